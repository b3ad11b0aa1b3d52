import DBus
import FerryCore
import FerryInterface

/// The counts a client may not go over (the contract's "sessions per client and
/// transfers per session capped"); ferryd's options may change the defaults.
public struct ClientLimits: Sendable, Equatable {
    /// Sessions per client. The client is the caller's uid: on a session bus every
    /// unconfined client runs as the bus's user, so this caps all the sessions of
    /// that user (ferryd does not yet record which app opened a session).
    public var sessionsPerClient: Int
    /// Transfers (of any state, until removed) per session.
    public var transfersPerSession: Int

    public init(sessionsPerClient: Int = Limits.defaultSessionsPerClient,
                transfersPerSession: Int = Limits.defaultTransfersPerSession) {
        self.sessionsPerClient = sessionsPerClient
        self.transfersPerSession = transfersPerSession
    }
}

extension FerryBusService {
    /// Refuses an `OpenSession` that would make a new session (not re-attach to one
    /// of that identifier) when the client's cap is reached. A client is a sandboxed
    /// application (its sessions count, no one else's: one app cannot lock the others
    /// and the user out), or the user's unconfined clients together. On the core's queue.
    func checkSessionLimit(_ core: TransferCoordinator, identifier: String, owner: String?) throws {
        let ids = core.sessionIDs.filter { core.sessionOwner($0) == owner }
        guard ids.count >= limits.sessionsPerClient else { return }
        // Re-attaching is always fine, to any session the caller may open (an unconfined
        // client re-opening an app's session included). A closing session counts until
        // it is gone, and opening its identifier makes a new session: not a re-attach.
        guard !core.hasOpenSession(identifier: identifier) else { return }
        throw CoreError.limitExceeded("there are \(ids.count) sessions already, the most one client may have (\(limits.sessionsPerClient)); close some (Session.Close) first")
    }

    /// Refuses a new transfer in a session that holds the most transfers it may, or has
    /// no room for one more completion event (the core's cap). On the core's queue.
    func checkTransferLimit(_ core: TransferCoordinator, session: SessionID) throws {
        // Downloads of the same group not added yet count too.
        let prepared = core.preparedCount(session: session)
        try core.checkRoomForEvents(session: session, starting: prepared)
        let count = try core.transferCount(session: session) + prepared
        guard count < limits.transfersPerSession else {
            throw CoreError.limitExceeded("session \(session) holds \(count) transfers, the most a session may (\(limits.transfersPerSession)); remove finished ones (Transfer.Remove) first")
        }
    }
}

extension FerryBusService {
    /// Named errors for what the binding would otherwise answer generically: calls on
    /// sessions and transfers that do not exist, and replies too large for the bus
    /// (logged, never sent: the bus would drop ferryd's connection).
    func configureBusSafety() {
        bus.setMissingObjectError(prefix: FerryInterface.managerPath + "/session/",
                                  errorName: CoreError.noSuchSession("").name, noun: "session")
        bus.setMissingObjectError(prefix: FerryInterface.managerPath + "/transfer/",
                                  errorName: CoreError.noSuchTransfer("").name, noun: "transfer")
        bus.onOversizeMessage(errorName: CoreError.limitExceeded("").name) { [logger] text in
            logger.error("\(text)")
        }
        bus.limitCallArguments(to: Limits.callArgumentBytes, errorName: CoreError.limitExceeded("").name)
    }
}
