import DBus
import FerryInterface
import Foundation

/// A typed client for Ferry's bus API (`org.ferry.Ferry1`). Every call is async
/// and throws `BusError`, carrying the service's `org.ferry.Ferry1.Error.*` name.
public final class BusClient: Sendable {
    public static let busName = FerryInterface.busName
    public static let managerPath = FerryInterface.managerPath
    public static let managerInterface = FerryInterface.managerInterface
    public static let sessionInterface = FerryInterface.sessionInterface
    public static let transferInterface = FerryInterface.transferInterface
    public static let transferPathPrefix = FerryInterface.transferPathPrefix

    public let bus: BusConnection

    /// Connects to the bus at `address`, or to the session bus.
    public init(address: String? = nil) throws {
        if let address {
            bus = try BusConnection(address: address)
        } else {
            bus = try BusConnection.session()
        }
    }

    public init(bus: BusConnection) {
        self.bus = bus
    }

    public func close() { bus.close() }

    // MARK: Manager

    func callManager(_ method: BusMethod, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await bus.call(method, on: Self.managerPath, args)
    }

    /// `Manager.Watch` (v1.2): from now until `unwatch` or the connection closes, this
    /// connection also receives, unicast, the private signals of every session (those
    /// of sandboxed apps and of sessions with `private-signals`). Returns false when
    /// the daemon has no such method (older than v1.2: every signal is broadcast
    /// there). Throws `AccessDenied` for a sandboxed caller.
    @discardableResult
    public func watch() async throws -> Bool {
        do {
            _ = try await callManager(FerryInterface.ManagerMethod.watch)
            return true
        } catch let e as BusError where e.name == StandardErrors.unknownMethod {
            return false
        }
    }

    /// `Manager.Unwatch`: undoes `watch` (nothing on a daemon without it).
    public func unwatch() async throws {
        do {
            _ = try await callManager(FerryInterface.ManagerMethod.unwatch)
        } catch let e as BusError where e.name == StandardErrors.unknownMethod {}
    }

    /// Opens (or re-attaches to) the session with this identifier.
    public func openSession(_ identifier: String, configuration: [String: DBusValue] = [:]) async throws -> BusSession {
        let r = try await callManager(FerryInterface.ManagerMethod.openSession, [.string(identifier), .vardict(configuration)])
        guard let path = r.first?.string else { throw BusError(name: StandardErrors.failed, message: "OpenSession returned nothing") }
        return BusSession(client: self, path: path)
    }

    public func listSessions() async throws -> [BusSession] {
        try await callManager(FerryInterface.ManagerMethod.listSessions).first?.arrayElements?.compactMap(\.string).map { BusSession(client: self, path: $0) } ?? []
    }

    /// Every transfer the daemon knows, oldest first.
    public func listTransfers() async throws -> [FerryTransfer] {
        try await callManager(FerryInterface.ManagerMethod.listTransfers).first?.arrayElements?.compactMap(\.string).map { FerryTransfer(client: self, path: $0) } ?? []
    }

    public func pauseAll() async throws { _ = try await callManager(FerryInterface.ManagerMethod.pauseAll) }
    public func resumeAll() async throws { _ = try await callManager(FerryInterface.ManagerMethod.resumeAll) }
    public func cancelAll() async throws { _ = try await callManager(FerryInterface.ManagerMethod.cancelAll) }

    /// The manager's properties.
    public func managerProperties() async throws -> [String: DBusValue] {
        try await getAll(Self.managerPath, Self.managerInterface)
    }

    public func setManagerProperty(_ name: String, _ value: DBusValue) async throws {
        try await bus.call(destination: Self.busName, path: Self.managerPath, interface: StandardNames.properties,
                           method: "Set", arguments: [.string(Self.managerInterface), .string(name), .variant(value)])
    }

    /// A transfer by the id the CLI shows.
    public func transfer(id: UInt64) -> FerryTransfer {
        FerryTransfer(client: self, path: Self.transferPathPrefix + String(id))
    }

    func getAll(_ path: String, _ interface: String) async throws -> [String: DBusValue] {
        let r = try await bus.call(destination: Self.busName, path: path, interface: StandardNames.properties,
                                   method: "GetAll", arguments: [.string(interface)])
        return r.first?.vardict ?? [:]
    }
}

/// A session object.
public struct BusSession: BusObject {
    private typealias M = FerryInterface.SessionMethod
    public let client: BusClient
    /// `/org/ferry/Ferry1/session/N`.
    public let path: String

    public init(client: BusClient, path: String) { (self.client, self.path) = (client, path) }

    func call(_ method: BusMethod, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.bus.call(method, on: path, args)
    }

    /// Queues a download. Options are the contract's keys (`destination`, `sha256`, …).
    public func download(_ url: String, options: [String: DBusValue] = [:]) async throws -> FerryTransfer {
        let r = try await call(M.download, [.string(url), .vardict(options)])
        return FerryTransfer(client: client, path: r.first?.string ?? "/")
    }

    /// Queues an upload of a local file (`Session.Upload`).
    public func upload(_ url: String, file: String, options: [String: DBusValue] = [:]) async throws -> FerryTransfer {
        let r = try await call(M.upload, [.string(url), .string(file), .vardict(options)])
        return FerryTransfer(client: client, path: r.first?.string ?? "/")
    }

    /// Queues many downloads in one call, as one group (`DownloadGroup`, v1.2): all of
    /// them or none. `items` are URLs with their `Download` options; `options` the
    /// group's (`description`, `all-or-nothing`, `start`).
    public func downloadGroup(_ items: [(url: String, options: [String: DBusValue])],
                              options: [String: DBusValue] = [:]) async throws -> BusGroup {
        let list = DBusValue.array(element: "(sa{sv})", items.map { .structure([.string($0.url), .vardict($0.options)]) })
        let r = try await call(M.downloadGroup, [list, .vardict(options)])
        return BusGroup(client: client, path: r.first?.string ?? "/")
    }

    public func resumeDownload(_ resumeData: [UInt8], options: [String: DBusValue] = [:]) async throws -> FerryTransfer {
        let r = try await call(M.resumeDownload, [.bytes(resumeData), .vardict(options)])
        return FerryTransfer(client: client, path: r.first?.string ?? "/")
    }

    public func listTransfers() async throws -> [FerryTransfer] {
        try await call(M.listTransfers).first?.arrayElements?.compactMap(\.string).map { FerryTransfer(client: client, path: $0) } ?? []
    }

    public func pauseAll() async throws { _ = try await call(M.pauseAll) }
    public func resumeAll() async throws { _ = try await call(M.resumeAll) }
    public func cancelAll() async throws { _ = try await call(M.cancelAll) }

    /// Completion events not acknowledged yet, oldest first: read a page at a time
    /// (`PendingEventsAfter`), so that more than one reply may carry are read too; from
    /// a service without it, in one `PendingEvents` call.
    public func pendingEvents() async throws -> [CompletionEvent] {
        var all: [CompletionEvent] = []
        var after: UInt64 = 0
        while true {
            let raw: [DBusValue]
            do {
                raw = try await rawPendingEvents(after: after, limit: 0)
            } catch let e as BusError where e.name == StandardErrors.unknownMethod && all.isEmpty && after == 0 {
                let r = try await call(M.pendingEvents)
                return (r.first?.arrayElements ?? []).compactMap(CompletionEvent.init)
            }
            // The next page starts after the last serial given, also when an entry of
            // this one could not be read.
            guard let last = raw.last?.structFields?.first?.uint64, last > after else { return all }
            all += raw.compactMap(CompletionEvent.init)
            after = last
        }
    }

    /// One page of `pendingEvents()`: the events with a serial above `after`, oldest
    /// first, at most `limit` (0: as many as fit in the service's page).
    public func pendingEvents(after: UInt64, limit: UInt32 = 0) async throws -> [CompletionEvent] {
        try await rawPendingEvents(after: after, limit: limit).compactMap(CompletionEvent.init)
    }

    private func rawPendingEvents(after: UInt64, limit: UInt32) async throws -> [DBusValue] {
        try await call(M.pendingEventsAfter, [.uint64(after), .uint32(limit)]).first?.arrayElements ?? []
    }

    public func acknowledgeEvents(upTo serial: UInt64) async throws { _ = try await call(M.acknowledgeEvents, [.uint64(serial)]) }

    public func close(cancelTransfers: Bool) async throws { _ = try await call(M.close, [.boolean(cancelTransfers)]) }

    public func properties() async throws -> [String: DBusValue] {
        try await client.getAll(path, BusClient.sessionInterface)
    }
}

/// One entry of `PendingEvents`.
public struct CompletionEvent: Sendable, Equatable {
    public var serial: UInt64
    public var transferPath: String
    public var kind: String
    public var details: [String: DBusValue]

    init?(_ v: DBusValue) {
        guard let f = v.structFields, f.count == 4, let serial = f[0].uint64, let path = f[1].string,
              let kind = f[2].string, let details = f[3].vardict else { return nil }
        self.serial = serial
        self.transferPath = path
        self.kind = kind
        self.details = details
    }
}
