import DBus
import FerryCore
import Foundation

/// Who hears private signals (contract v1.2): a sandboxed app's connections, the
/// connections that opened or used a private unconfined session (by its identifier),
/// and the watchers (`Manager.Watch`). Connections are noted as they call and
/// forgotten when they leave the bus.
///
/// `@unchecked Sendable`: every table is only touched under `lock`. A signal asks once
/// (`recipients`): its cost grows with its recipients, never with the transfers.
final class SignalRecipients: @unchecked Sendable {
    private let lock = NSLock()
    /// App id -> its connections that called ferryd.
    private var appConnections: [String: Set<String>] = [:]
    /// Session identifier -> the unconfined connections that opened or used it.
    private var sessionClients: [String: Set<String>] = [:]
    /// What each connection is noted under, to forget it when it leaves.
    private var notedApp: [String: String] = [:]
    private var notedSessions: [String: Set<String>] = [:]
    private var watchers: Set<String> = []

    /// A sandboxed caller's connection, once identified.
    func noteConnection(_ name: String, ofApp app: String) {
        lock.lock(); defer { lock.unlock() }
        appConnections[app, default: []].insert(name)
        notedApp[name] = app
    }

    /// An unconfined connection opened or used the session with this identifier.
    func noteClient(_ name: String?, ofSession identifier: String) {
        guard let name, name.hasPrefix(":") else { return }
        lock.lock(); defer { lock.unlock() }
        guard !(sessionClients[identifier]?.contains(name) ?? false) else { return }
        sessionClients[identifier, default: []].insert(name)
        notedSessions[name, default: []].insert(identifier)
    }

    func watch(_ name: String) {
        lock.lock(); defer { lock.unlock() }
        watchers.insert(name)
    }

    func unwatch(_ name: String) {
        lock.lock(); defer { lock.unlock() }
        watchers.remove(name)
    }

    /// The connection left the bus.
    func departed(_ name: String) {
        lock.lock(); defer { lock.unlock() }
        watchers.remove(name)
        if let app = notedApp.removeValue(forKey: name) {
            appConnections[app]?.remove(name)
            if appConnections[app]?.isEmpty == true { appConnections[app] = nil }
        }
        for identifier in notedSessions.removeValue(forKey: name) ?? [] {
            sessionClients[identifier]?.remove(name)
            if sessionClients[identifier]?.isEmpty == true { sessionClients[identifier] = nil }
        }
    }

    /// The recipients of a private session's signal: its app's connections (a sandboxed
    /// caller's session) or its clients (an unconfined one's), and the watchers.
    func recipients(app: String?, identifier: String) -> [String] {
        lock.lock(); defer { lock.unlock() }
        let own = app.map { appConnections[$0] ?? [] } ?? (sessionClients[identifier] ?? [])
        return Array(own.union(watchers))
    }

    var currentWatchers: [String] {
        lock.lock(); defer { lock.unlock() }
        return Array(watchers)
    }
}

/// The audience of one session's objects (the session and its transfers share it):
/// everyone while the session's signals are public, its own recipients once private.
///
/// `@unchecked Sendable`: `isPrivate` is set on the bus queue (in order with the
/// signals it governs), or before the first object using it is exported.
final class SessionAudience: SignalAudience, @unchecked Sendable {
    let identifier: String
    /// The sandboxed app owning the session; nil for an unconfined caller's.
    let app: String?
    private let registry: SignalRecipients
    var isPrivate: Bool

    init(identifier: String, app: String?, isPrivate: Bool, registry: SignalRecipients) {
        self.identifier = identifier
        self.app = app
        self.isPrivate = isPrivate
        self.registry = registry
    }

    func recipients() -> [String]? {
        isPrivate ? registry.recipients(app: app, identifier: identifier) : nil
    }
}

/// The watchers alone: for the manager's signals about private sessions only.
final class WatcherAudience: SignalAudience, @unchecked Sendable {
    private let registry: SignalRecipients
    init(registry: SignalRecipients) { self.registry = registry }
    func recipients() -> [String]? { registry.currentWatchers }
}
