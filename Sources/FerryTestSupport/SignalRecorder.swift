import DBus
import FerryBusClient
import Foundation

/// One signal a `SignalRecorder` received, with the time it arrived.
public struct RecordedSignal: CustomStringConvertible, Sendable {
    public var time: Date
    public var path: String
    public var interface: String
    public var member: String
    public var args: [DBusValue]

    public init(time: Date = Date(), path: String, interface: String, member: String, args: [DBusValue]) {
        self.time = time
        self.path = path
        self.interface = interface
        self.member = member
        self.args = args
    }

    /// For PropertiesChanged: the changed properties.
    public var changed: [String: DBusValue] { args.count >= 2 ? (args[1].vardict ?? [:]) : [:] }

    public var description: String {
        String(format: "%.3f ", time.timeIntervalSince1970.truncatingRemainder(dividingBy: 1000))
            + "\(path) \(interface).\(member)(\(args.map(\.description).joined(separator: ", ")))"
    }
}

/// Records every signal matching a rule (by default, all that ferryd sends below
/// /org/ferry/Ferry1) and lets a test wait, with a bound, until what it recorded
/// satisfies a condition.
///
/// `@unchecked Sendable`: `items`, `waiters` and `nextID` are only touched under
/// `lock`; `subscription` is set once, before `start` returns.
public final class SignalRecorder: @unchecked Sendable {
    /// ferryd's signals: sent by org.ferry.Ferry1 on /org/ferry/Ferry1 or below.
    public static let ferrySignals = MatchRule(sender: BusClient.busName, pathNamespace: BusClient.managerPath)

    private let lock = NSLock()
    private var items: [RecordedSignal] = []
    private var waiters: [Int: (condition: ([RecordedSignal]) -> Bool, continuation: CheckedContinuation<Void, Error>)] = [:]
    private var nextID = 0
    private var subscription: BusConnection.Subscription?
    private let bus: BusConnection

    private init(bus: BusConnection) { self.bus = bus }

    /// Subscribes before returning: nothing sent afterwards is missed.
    public static func start(_ bus: BusConnection, matching rule: MatchRule = ferrySignals) async throws -> SignalRecorder {
        let r = SignalRecorder(bus: bus)
        r.subscription = try await bus.subscribe(rule) { [r] m in
            guard let path = m.path, let interface = m.interface, let member = m.member else { return }
            r.add(RecordedSignal(path: path, interface: interface, member: member, args: (try? m.arguments()) ?? []))
        }
        return r
    }

    /// Stops recording.
    public func stop() {
        if let s = subscription { bus.unsubscribe(s) }
    }

    private func add(_ s: RecordedSignal) {
        lock.lock()
        items.append(s)
        var ready: [CheckedContinuation<Void, Error>] = []
        for (id, w) in waiters where w.condition(items) {
            ready.append(w.continuation)
            waiters[id] = nil
        }
        lock.unlock()
        for c in ready { c.resume() }
    }

    /// Everything recorded so far, oldest first.
    public var all: [RecordedSignal] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }

    /// How many signals have arrived: a position for conditions on what came after it.
    public var mark: Int { all.count }

    /// The recorded signals on `path` and/or named `member` (nil: any).
    public func signals(path: String? = nil, member: String? = nil) -> [RecordedSignal] {
        all.filter { (path == nil || $0.path == path) && (member == nil || $0.member == member) }
    }

    /// How many `member` signals arrived (on `path`, when given).
    public func count(_ member: String, path: String? = nil) -> Int {
        signals(path: path, member: member).count
    }

    /// Waits until `condition` holds for the signals recorded so far (checked now and
    /// on every new signal); after `timeout` throws `TimedOut` naming `what` and
    /// listing the last signals that arrived.
    public func wait(_ what: String, timeout: TimeInterval = 20, until condition: @escaping ([RecordedSignal]) -> Bool) async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
            lock.lock()
            if condition(items) {
                lock.unlock()
                c.resume()
                return
            }
            let id = nextID
            nextID += 1
            waiters[id] = (condition, c)
            lock.unlock()
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                lock.lock()
                let w = waiters.removeValue(forKey: id)
                let seen = items.suffix(40).map(\.description).joined(separator: "\n  ")
                lock.unlock()
                w?.continuation.resume(throwing: TimedOut(description: "no \(what) within \(timeout) s; last signals:\n  \(seen)"))
            }
        }
    }
}
