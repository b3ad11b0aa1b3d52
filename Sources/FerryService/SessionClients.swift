import DBus
import FerryCore
import Foundation
import Logging

/// The bus connections that opened or used each session, for the session key
/// `on-client-exit`: when the last of a session's connections leaves the bus, the core
/// applies the session's policy (`TransferCoordinator.clientsLeft`); a connection
/// opening it again undoes a pause (`clientReturned`).
///
/// Noted from any queue (a lock guards the tables). A name's departure can be seen
/// before a call it made reaches the core (calls hop queues): names that left recently
/// are remembered (a bounded number) and never noted again — unique names are not
/// reused on a bus.
final class SessionClients: @unchecked Sendable {
    private let bus: BusConnection
    private let core: TransferCoordinator
    private let logger: Logger
    private let lock = NSLock()
    /// Session -> the connections that opened or used it and are still on the bus.
    private var clients: [SessionID: Set<String>] = [:]
    /// Connection -> the sessions it is noted under, to forget it when it leaves.
    private var sessionsOf: [String: Set<SessionID>] = [:]
    /// Names seen leaving, oldest first, and the same as a set.
    private var departedOrder: [String] = []
    private var departedHead = 0
    private var departed: Set<String> = []
    static let departedMemory = 4096

    init(bus: BusConnection, core: TransferCoordinator, logger: Logger) {
        self.bus = bus
        self.core = core
        self.logger = logger
    }

    /// `name` opened or used `session`.
    func note(_ name: String?, of session: SessionID) {
        guard let name, name.hasPrefix(":") else { return }
        lock.lock(); defer { lock.unlock() }
        guard !departed.contains(name) else { return }
        clients[session, default: []].insert(name)
        sessionsOf[name, default: []].insert(session)
    }

    /// Whether no connection of the session is on the bus.
    func hasNoClients(_ session: SessionID) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return clients[session]?.isEmpty ?? true
    }

    /// The session is gone.
    func forget(_ session: SessionID) {
        lock.lock(); defer { lock.unlock() }
        for name in clients.removeValue(forKey: session) ?? [] { sessionsOf[name]?.remove(session) }
    }

    /// Follows connections leaving the bus.
    func watchDepartures() async throws {
        _ = try await bus.subscribeToDepartures { [weak self] name in self?.departed(name) }
    }

    private func departed(_ name: String) {
        var left: [SessionID] = []
        lock.lock()
        remember(name)
        for session in sessionsOf.removeValue(forKey: name) ?? [] {
            clients[session]?.remove(name)
            if clients[session]?.isEmpty ?? true {
                clients[session] = nil
                left.append(session)
            }
        }
        lock.unlock()
        guard !left.isEmpty else { return }
        let gone = left
        logger.debug("\(name) left the bus, the last client of sessions \(left)")
        core.queue.async { [self] in
            // A client may have opened it again meanwhile (its call ran on this queue first).
            for session in gone where hasNoClients(session) { core.clientsLeft(session: session) }
        }
    }

    /// Under `lock`: adds a departed name, dropping the oldest beyond the memory's size.
    private func remember(_ name: String) {
        guard departed.insert(name).inserted else { return }
        if departedOrder.count < Self.departedMemory {
            departedOrder.append(name)
        } else {
            departed.remove(departedOrder[departedHead])
            departedOrder[departedHead] = name
            departedHead = (departedHead + 1) % Self.departedMemory
        }
    }
}
