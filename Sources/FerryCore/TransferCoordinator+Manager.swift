import Dispatch

extension TransferCoordinator {
    /// Opens the session with this identifier, or re-attaches to it (`created` false):
    /// keys present in `configuration` replace the stored values.
    /// - Throws: `.invalidArgument` (identifier, headers, proxy, timeouts, limits),
    ///   `.invalidDestination` (directory).
    public func openSession(identifier: String, configuration: SessionConfigurationUpdate) throws -> (id: SessionID, created: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        try SessionValidation.validateIdentifier(identifier)
        try SessionValidation.validate(configuration, fileManager: fileManager)
        return mutate {
            // A closing session no longer answers to its identifier: opening it again
            // makes a new session.
            if let existing = sessions.values.first(where: { $0.identifier == identifier && !$0.isClosing }) {
                if existing.configuration.apply(configuration) {
                    existing.publishedActive = activeCount(existing.id)
                    observer?.sessionChanged(snapshot(of: existing))
                }
                return (existing.id, false)
            }
            var config = SessionConfiguration()
            _ = config.apply(configuration)
            let session = SessionRecord(id: nextSessionID, identifier: identifier, configuration: config)
            nextSessionID += 1
            sessions[session.id] = session
            observer?.sessionAdded(snapshot(of: session))
            return (session.id, true)
        }
    }

    /// All open sessions (including closing ones), oldest first.
    public var sessionIDs: [SessionID] {
        dispatchPrecondition(condition: .onQueue(queue))
        return sessions.keys.sorted()
    }

    /// Transfers of one session, or of all when nil; oldest first.
    public func transferIDs(session: SessionID? = nil) throws -> [TransferID] {
        dispatchPrecondition(condition: .onQueue(queue))
        return try records(in: session).map(\.id)
    }

    /// Pauses every queued, waiting or running transfer (of one session or all).
    public func pauseAll(session: SessionID? = nil) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let targets = try records(in: session)
        mutate {
            for t in targets where TransferStateMachine.Action.pause.allowedStates.contains(t.state) { pauseTransfer(t) }
        }
    }

    /// Resumes every paused or failed transfer (of one session or all).
    public func resumeAll(session: SessionID? = nil) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let targets = try records(in: session)
        mutate {
            for t in targets where TransferStateMachine.Action.resume.allowedStates.contains(t.state) { resumeTransfer(t) }
        }
    }

    /// Cancels every transfer that is not final yet (of one session or all).
    public func cancelAll(session: SessionID? = nil) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let targets = try records(in: session)
        mutate {
            for t in targets where TransferStateMachine.Action.cancel.allowedStates.contains(t.state) {
                cancelTransfer(t, reason: .cancelled("Cancelled by the user"), deletePart: true)
            }
        }
    }

    /// The Manager's properties, current.
    public var manager: ManagerSnapshot {
        dispatchPrecondition(condition: .onQueue(queue))
        var running: UInt32 = 0, queued: UInt32 = 0, rate: UInt64 = 0
        for t in transfers.values {
            switch t.state {
            case .running: running += 1; rate += t.snapshot.rate
            case .queued, .waiting: queued += 1
            default: break
            }
        }
        return ManagerSnapshot(activeTransfers: running, queuedTransfers: queued, downloadRate: rate, uploadRate: 0,
                               maxConcurrentTransfers: maxConcurrentTransfers, speedLimit: globalSpeedLimit,
                               notificationsEnabled: notificationsEnabled)
    }

    /// How many transfers may run at once, 1-64; raising it starts queued ones at once,
    /// lowering it lets running ones finish.
    public func setMaxConcurrentTransfers(_ n: UInt32) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        guard (1...64).contains(n) else {
            throw FerryError.invalidArgument("MaxConcurrentTransfers is \(n); it must be between 1 and 64")
        }
        mutate { maxConcurrentTransfers = n }
    }

    /// Bytes/s over all transfers, 0 = none; shared evenly by the running ones.
    public func setSpeedLimit(_ bps: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        mutate { globalSpeedLimit = bps }
    }

    /// Whether AllFinished posts a desktop notification (the notifier reads it).
    public func setNotificationsEnabled(_ on: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        mutate { notificationsEnabled = on }
    }
}
