import DBus
import Dispatch
import FerryCore
import Logging

/// Wakes a session's application when completion events wait for it and none of
/// its clients is on the bus: `org.freedesktop.Application.ActivateAction(
/// "ferry-events", [<identifier>], {})` on the session's `application-id` — the
/// desktop's form of relaunching an app for its background session.
///
/// At most one wake-up per batch (a session's `AllFinished`); when the
/// application cannot be reached, it is tried again with a growing delay while
/// events are still pending and no client has come back.
///
/// Threading: `clients`, `retryDelay` and `subscribed` live on the bus queue.
final class ApplicationWaker: @unchecked Sendable {
    private let bus: BusConnection
    private let core: TransferCoordinator
    private let logger: Logger
    /// Unique bus names that have called into each session.
    private var clients: [SessionID: Set<String>] = [:]
    private var retryDelay: [SessionID: Double] = [:]
    private var subscribed = false
    static let firstRetry = 30.0
    static let maxRetry = 3600.0

    init(bus: BusConnection, core: TransferCoordinator, logger: Logger) {
        self.bus = bus
        self.core = core
        self.logger = logger
    }

    /// Remembers that `sender` is a client of `session` (from any thread).
    func noteClient(_ sender: String?, of session: SessionID) {
        guard let sender, sender.hasPrefix(":") else { return }
        bus.perform { [self] in
            clients[session, default: []].insert(sender)
            retryDelay[session] = nil
            subscribeOnce()
        }
    }

    func forget(_ session: SessionID) {
        bus.perform { [self] in
            clients[session] = nil
            retryDelay[session] = nil
        }
    }

    /// A batch of the session ended (on the core's queue).
    func batchEnded(_ end: SessionBatchEnd) {
        guard !end.applicationID.isEmpty, end.hasPendingEvents else { return }
        let session = end.session
        let appID = end.applicationID
        let identifier = end.identifier
        bus.perform { [self] in
            guard clients[session]?.isEmpty ?? true else { return }
            wake(session: session, appID: appID, identifier: identifier)
        }
    }

    /// The object path a DBusActivatable application serves: its id with '.' as
    /// '/' and '-' as '_'.
    static func objectPath(for appID: String) -> String {
        "/" + appID.replacingOccurrences(of: ".", with: "/").replacingOccurrences(of: "-", with: "_")
    }

    private func wake(session: SessionID, appID: String, identifier: String) {
        let path = Self.objectPath(for: appID)
        guard BusNames.isValidBusName(appID), BusNames.isValidObjectPath(path),
              let call = try? BusMessage.methodCall(destination: appID, path: path, interface: "org.freedesktop.Application",
                                                    member: "ActivateAction") else {
            logger.warning("session \(identifier): application-id '\(appID)' is not a valid D-Bus name; cannot wake it")
            return
        }
        do {
            try call.append([.string("ferry-events"), .array(element: "v", [.variant(.string(identifier))]), .vardict([:])])
        } catch {
            return
        }
        logger.info("waking \(appID) for the pending events of session \(identifier)")
        bus.send(call, timeout: 30) { [self] result in
            switch result {
            case .success:
                retryDelay[session] = nil
            case .failure(let e):
                let delay = min(Self.maxRetry, retryDelay[session].map { $0 * 2 } ?? Self.firstRetry)
                retryDelay[session] = delay
                logger.warning("could not wake \(appID) (\(e.name): \(e.message)); trying again in \(Int(delay)) s")
                bus.queue.asyncAfter(deadline: .now() + delay) { [self] in
                    guard retryDelay[session] == delay else { return }
                    core.queue.async { [self] in
                        guard core.hasPendingEvents(session: session) else { return }
                        bus.perform { [self] in
                            guard clients[session]?.isEmpty ?? true, retryDelay[session] == delay else { return }
                            wake(session: session, appID: appID, identifier: identifier)
                        }
                    }
                }
            }
        }
    }

    /// Follows clients leaving the bus.
    private func subscribeOnce() {
        guard !subscribed else { return }
        subscribed = true
        Task.onQueue { [self] in
            do {
                _ = try await bus.subscribeToDepartures { [weak self] name in
                    guard let self else { return }
                    for (session, names) in self.clients where names.contains(name) {
                        self.clients[session]?.remove(name)
                    }
                }
            } catch {
                logger.warning("cannot follow clients leaving the bus: \(error)")
            }
        }
    }
}
