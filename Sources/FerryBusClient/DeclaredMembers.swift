import DBus
import FerryInterface

/// Calls and signals by their declarations in `FerryInterface` (`BusMethod`,
/// `BusSignal`): no client spells a method's or signal's name or interface.
extension BusConnection {
    /// Calls ferryd's `method` on the object at `path` and returns the reply's values.
    @discardableResult
    public func call(_ method: BusMethod, on path: String, _ arguments: [DBusValue] = [],
                     timeout: Double = 25) async throws -> [DBusValue] {
        try await call(destination: FerryInterface.busName, path: path, interface: method.interface, method: method.name,
                       arguments: arguments, timeout: timeout)
    }
}

extension BusClient {
    /// A call of ferryd's `method` on the object at `path`, to pipeline or send unawaited.
    public static func methodCall(_ method: BusMethod, on path: String, _ args: [DBusValue] = []) throws -> BusMessage {
        try methodCall(path: path, interface: method.interface, method: method.name, args)
    }
}

extension BusSignal {
    /// Whether `message` is this signal with its declared arguments (`values`).
    public func matches(_ message: BusMessage, _ values: [DBusValue]) -> Bool {
        message.member == name && message.interface == interface && values.count == arguments.count
    }
}

extension TransferEvent {
    /// The transfer signal `message` (with its `args`) on the object at `path`; nil when
    /// it is not one of `org.ferry.Ferry1.Transfer`'s declared signals.
    public init?(transferSignal message: BusMessage, path: String, args: [DBusValue]) {
        typealias S = FerryInterface.TransferSignal
        if S.progress.matches(message, args) {
            self = .progress(path: path, bytesWritten: args[0].int64 ?? 0, totalBytesWritten: args[1].int64 ?? 0,
                             totalBytesExpected: args[2].int64 ?? -1)
        } else if S.resumedAtOffset.matches(message, args) {
            self = .resumedAtOffset(path: path, offset: args[0].int64 ?? 0, expectedTotal: args[1].int64 ?? -1)
        } else if S.finished.matches(message, args) {
            self = .finished(path: path, location: args[0].string ?? "")
        } else if S.completed.matches(message, args) {
            self = .completed(path: path, serial: args[0].uint64 ?? 0, errorName: args[1].string ?? "",
                              errorMessage: args[2].string ?? "")
        } else {
            return nil
        }
    }
}

extension MatchRule {
    /// ferryd's `signal`, on the object at `path` or on every object under `pathNamespace`.
    public init(_ signal: BusSignal, path: String? = nil, pathNamespace: String? = nil) {
        self.init(sender: FerryInterface.busName, path: path, pathNamespace: pathNamespace, interface: signal.interface,
                  member: signal.name)
    }
}

/// One of ferryd's objects (a session, transfer or group) as a client holds it: the
/// client it is reached through and its path. Two are the same object when their
/// paths are.
public protocol BusObject: Sendable, Hashable {
    var client: BusClient { get }
    var path: String { get }
}

extension BusObject {
    public static func == (a: Self, b: Self) -> Bool { a.path == b.path }
    public func hash(into h: inout Hasher) { h.combine(path) }

    /// The id in the object path (what the CLI shows).
    public var id: UInt64 { UInt64(path.split(separator: "/").last ?? "") ?? 0 }
}
