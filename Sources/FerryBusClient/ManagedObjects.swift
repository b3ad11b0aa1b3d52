import DBus
import FerryInterface
import Foundation

/// A session object's properties, typed.
public struct SessionInfo: Sendable, Equatable {
    public var path: String
    public var identifier: String
    public var configuration: [String: DBusValue]
    public var activeTransfers: UInt32

    public init(path: String, properties p: [String: DBusValue]) {
        self.path = path
        identifier = p[FerryInterface.SessionProperty.identifier.name]?.string ?? ""
        configuration = p[FerryInterface.SessionProperty.configuration.name]?.vardict ?? [:]
        activeTransfers = p[FerryInterface.SessionProperty.activeTransfers.name]?.uint32 ?? 0
    }
}

/// Everything the daemon exports, read in one `GetManagedObjects` call.
public struct ManagedObjects: Sendable {
    /// Sessions, oldest first.
    public var sessions: [SessionInfo]
    /// Transfers, oldest first (by id).
    public var transfers: [TransferInfo]

    public func session(path: String) -> SessionInfo? { sessions.first { $0.path == path } }
    public func session(identifier: String) -> SessionInfo? { sessions.session(identifier: identifier) }
}

extension BidirectionalCollection where Element == SessionInfo {
    /// The session of that identifier among these (oldest first); when a closing one
    /// (its transfers finishing) shares it with the one opened since, the newer: the
    /// open one.
    public func session(identifier: String) -> SessionInfo? { last { $0.identifier == identifier } }
}

extension BusClient {
    /// Every transfer the service shows this caller, with all its properties, from one
    /// `Manager.ListTransferProperties` (a column per property: a listing of 10,000
    /// transfers in a third of the bytes of `GetManagedObjects`), and every session from
    /// `ListSessions` and a `GetAll` each, read after the transfers — so the sessions'
    /// `ActiveTransfers` may count a transfer the listing does not hold yet, or no longer
    /// (use `managedObjects()` where the two must agree). From a service without that
    /// method, `managedObjects()`; when the reply would be more than the bus carries in one
    /// message (`LimitExceeded`: about 200,000 transfers, or about 1,000 with 64 KiB URLs),
    /// object by object.
    public func listing() async throws -> ManagedObjects {
        let reply: [DBusValue]
        do {
            reply = try await bus.call(FerryInterface.ManagerMethod.listTransferProperties, on: Self.managerPath,
                                       [.stringArray([])], timeout: 120)
        } catch let e as BusError where e.name == StandardErrors.unknownMethod {
            return try await managedObjects()
        } catch let e as BusError where e.name == FerryInterface.ErrorName.limitExceeded.fullName {
            return try await managedObjectsOneByOne()
        }
        var transfers = try Self.transfers(fromColumns: reply)
        // After the transfers: a session they name that is new since is listed too.
        var sessions = try await sessionInfos()
        transfers.sort { $0.id < $1.id }
        sessions.sort { Self.trailingNumber($0.path) < Self.trailingNumber($1.path) }
        return ManagedObjects(sessions: sessions, transfers: transfers)
    }

    /// The transfers of a `ListTransferProperties` reply; a reply whose columns do not
    /// line up with its transfers is refused, not read askew.
    static func transfers(fromColumns reply: [DBusValue]) throws -> [TransferInfo] {
        func malformed(_ why: String) -> BusError {
            BusError(name: StandardErrors.failed, message: "the service's ListTransferProperties reply \(why)")
        }
        guard reply.count == 2, let paths = reply[0].arrayElements, case .dictionary(_, _, let columns) = reply[1] else {
            throw malformed("is of type '\(reply.map(\.signature).joined())', not 'aoa{sv}'")
        }
        var transfers: [TransferInfo] = []
        transfers.reserveCapacity(paths.count)
        for p in paths {
            guard let path = p.string else { throw malformed("lists a transfer that is not an object path") }
            transfers.append(TransferInfo(id: Self.transferID(path), path: path))
        }
        for column in columns {
            guard let name = column.key.string, case .variant(let values) = column.value, let items = values.arrayElements else {
                throw malformed("holds a property that is not an array")
            }
            guard items.count == transfers.count else {
                throw malformed("holds \(items.count) values of \(name) for \(transfers.count) transfers")
            }
            TransferInfo.apply(column: name, items, to: &transfers)
        }
        return transfers
    }

    /// One `org.freedesktop.DBus.ObjectManager.GetManagedObjects` on the manager:
    /// every session and transfer with all its properties, in one round trip and from
    /// one moment (the sessions' counts agree with the transfers). When that is more
    /// than the bus carries in one message (`LimitExceeded`: past about 80,000
    /// transfers, or fewer with very long URLs), object by object instead.
    public func managedObjects() async throws -> ManagedObjects {
        let reply: BusMessage
        do {
            let call = try BusMessage.methodCall(destination: Self.busName, path: Self.managerPath,
                                                 interface: StandardNames.objectManager, member: "GetManagedObjects")
            reply = try await bus.call(call, timeout: 120)
        } catch let e as BusError where e.name == FerryInterface.ErrorName.limitExceeded.fullName {
            return try await managedObjectsOneByOne()
        }
        // Read as a stream: the reply of 10,000 transfers holds 220,000 properties, and
        // a tree of values for all of them would cost more than the listing itself.
        var sessions: [SessionInfo] = []
        var transfers: [TransferInfo] = []
        var path = ""
        // Filled in place (an optional here would be copied for every property).
        var transfer = TransferInfo(id: 0, path: "")
        var isTransfer = false
        var sessionProperties: [String: DBusValue] = [:]
        var isSession = false
        func finishObject() {
            if isTransfer { transfers.append(transfer) }
            if isSession { sessions.append(SessionInfo(path: path, properties: sessionProperties)) }
            isTransfer = false
            isSession = false
        }
        try reply.forEachManagedProperty(interfaces: [Self.transferInterface, Self.sessionInterface], object: {
            finishObject()
            path = $0
        }, property: { interface, name, value in
            if interface == 0 {
                if !isTransfer {
                    transfer = TransferInfo(id: Self.transferID(path), path: path)
                    isTransfer = true
                }
                transfer.apply(property: name, value)
            } else {
                if !isSession {
                    sessionProperties = [:]
                    isSession = true
                }
                sessionProperties[name] = value
            }
        })
        finishObject()
        transfers.sort { $0.id < $1.id }
        sessions.sort { Self.trailingNumber($0.path) < Self.trailingNumber($1.path) }
        return ManagedObjects(sessions: sessions, transfers: transfers)
    }

    /// Every session (not its transfers) from `ListSessions` and a pipelined `GetAll`
    /// each: what a command that acts on a session by its identifier needs without
    /// opening (and so creating) it. Sessions removed meanwhile are left out.
    public func sessionInfos() async throws -> [SessionInfo] {
        let paths = try await callManager(FerryInterface.ManagerMethod.listSessions).first?.arrayElements?.compactMap(\.string) ?? []
        let calls = try paths.map {
            try Self.methodCall(path: $0, interface: StandardNames.properties, method: "GetAll", [.string(Self.sessionInterface)])
        }
        var sessions: [SessionInfo] = []
        for (path, result) in zip(paths, await pipeline(calls)) {
            switch result {
            case .success(let values): sessions.append(SessionInfo(path: path, properties: values.first?.vardict ?? [:]))
            case .failure(let e) where Self.goneErrors.contains(e.name): continue
            case .failure(let e): throw e
            }
        }
        return sessions
    }

    static let goneErrors: Set<String> = [FerryInterface.ErrorName.noSuchSession.fullName,
                                          FerryInterface.ErrorName.noSuchTransfer.fullName, StandardErrors.unknownObject]

    /// Every session and transfer from `ListSessions`, `ListTransfers` and a pipelined
    /// `GetAll` each. Objects removed between the list and their `GetAll` are left out.
    func managedObjectsOneByOne() async throws -> ManagedObjects {
        var sessions = try await sessionInfos()
        let transferPaths = try await callManager(FerryInterface.ManagerMethod.listTransfers).first?.arrayElements?.compactMap(\.string) ?? []
        let calls = try transferPaths.map {
            try Self.methodCall(path: $0, interface: StandardNames.properties, method: "GetAll", [.string(Self.transferInterface)])
        }
        var transfers: [TransferInfo] = []
        transfers.reserveCapacity(transferPaths.count)
        for (path, result) in zip(transferPaths, await pipeline(calls)) {
            let values: [DBusValue]
            switch result {
            case .success(let v): values = v
            case .failure(let e) where Self.goneErrors.contains(e.name): continue
            case .failure(let e): throw e
            }
            guard case .dictionary(_, _, let props)? = values.first else { continue }
            transfers.append(TransferInfo(id: Self.transferID(path), path: path, entries: props))
        }
        transfers.sort { $0.id < $1.id }
        sessions.sort { Self.trailingNumber($0.path) < Self.trailingNumber($1.path) }
        return ManagedObjects(sessions: sessions, transfers: transfers)
    }

    /// The id in a transfer's object path.
    public static func transferID(_ path: String) -> UInt64 { trailingNumber(path) }

    static func trailingNumber(_ path: String) -> UInt64 {
        let utf8 = path.utf8
        let start = utf8.lastIndex(of: UInt8(ascii: "/")).map { utf8.index(after: $0) } ?? utf8.startIndex
        return UInt64(Substring(path[start...])) ?? 0
    }

    /// Sends the calls without waiting for each reply (pipelining), in order, at
    /// most `window` at a time (so each call's timeout runs from its own sending,
    /// not from the first's), and returns the replies in the same order. The default
    /// stays under dbus-daemon's built-in limit of 128 calls awaiting replies per
    /// connection (a bus whose configuration does not raise it refuses the rest with
    /// `LimitsExceeded`).
    public func pipeline(_ calls: [BusMessage], window: Int = 100, timeout: Double = 60) async -> [Result<[DBusValue], BusError>] {
        await withCheckedContinuation { (c: CheckedContinuation<[Result<[DBusValue], BusError>], Never>) in
            guard !calls.isEmpty else { return c.resume(returning: []) }
            let collector = ReplyCollector(count: calls.count) { c.resume(returning: $0) }
            let bus = self.bus
            // Sends call i; its reply sends the next one not yet sent.
            let next = NextIndex(start: min(window, calls.count))
            @Sendable func send(_ i: Int) {
                bus.send(calls[i], timeout: timeout) { result in
                    collector.set(i, result.flatMap { m in
                        do { return .success(try m.arguments()) } catch let e as BusError { return .failure(e) } catch {
                            return .failure(BusError(name: StandardErrors.failed, message: "\(error)"))
                        }
                    })
                    if let j = next.take(below: calls.count) { send(j) }
                }
            }
            for i in 0..<min(window, calls.count) { send(i) }
        }
    }

    /// A method call message for pipelining.
    public static func methodCall(path: String, interface: String, method: String, _ args: [DBusValue]) throws -> BusMessage {
        let m = try BusMessage.methodCall(destination: busName, path: path, interface: interface, member: method)
        try m.append(args)
        return m
    }
}

/// The next call to send.
private final class NextIndex: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int
    init(start: Int) { value = start }
    func take(below limit: Int) -> Int? {
        lock.lock()
        defer { lock.unlock() }
        guard value < limit else { return nil }
        value += 1
        return value - 1
    }
}

/// Gathers pipelined replies; calls `done` once all have come.
private final class ReplyCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [Result<[DBusValue], BusError>?]
    private var remaining: Int
    private let done: ([Result<[DBusValue], BusError>]) -> Void

    init(count: Int, done: @escaping ([Result<[DBusValue], BusError>]) -> Void) {
        results = Array(repeating: nil, count: count)
        remaining = count
        self.done = done
    }

    func set(_ i: Int, _ r: Result<[DBusValue], BusError>) {
        lock.lock()
        results[i] = r
        remaining -= 1
        let finished = remaining == 0
        lock.unlock()
        if finished { done(results.map { $0! }) }
    }
}
