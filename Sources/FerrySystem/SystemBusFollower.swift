import DBus
import Dispatch
import Foundation
import Synchronization
import Logging

/// Follows properties of services on the system bus, for the monitors built on it
/// (`NetworkMonitor`, `PowerMonitor`): reads each service's interface (`GetAll`, never
/// starting the service), follows its `PropertiesChanged` and the service leaving and
/// coming back (`NameOwnerChanged`). Nothing is polled.
///
/// It has its own system-bus connection on a queue of its own and never blocks a
/// caller. What happens reaches `onChange` on `queue`, in order, with what is known
/// of every service then (`Known`); the owner keeps its own state on `queue` too.
/// The owner logs: the follower only says what happened.
///
/// Every read and every departure bumps the service's generation: the answer to an
/// older read is dropped, so a reply that crosses a change never overwrites it.
///
/// `@unchecked Sendable`: the mutable state is confined to `queue`; the rest is
/// immutable.
final class SystemBusFollower: @unchecked Sendable {
    /// One interface of one service.
    struct Source: Sendable {
        /// How the log names it.
        var name: String
        var busName: String
        var path: String
        var interface: String
        /// The properties that matter: one of them invalidated means a new read.
        var properties: Set<String>
    }

    /// What happened.
    enum Change: Sendable {
        /// No system bus (or the match rules were refused): nothing will be followed.
        case unavailable(noBus: Bool, String)
        /// Source `i` answered a read: it is on the bus, with these properties.
        case answered(Int)
        /// Source `i` is not on the bus, or did not answer (`reason`).
        case absent(Int, reason: String, notOnBus: Bool)
        /// Source `i` came on the bus (a read follows).
        case appeared(Int)
        /// Source `i` left the bus.
        case left(Int)
        /// Source `i` said some properties changed.
        case changed(Int)
        /// The system bus connection closed: every source counts as absent.
        case busLost
    }

    /// What is known of every source, in the order given.
    struct Known: Sendable {
        /// Each source's properties (nil: absent or not known).
        var values: [[String: DBusValue]?]
        /// Every source has answered its first read (or was found absent).
        var complete: Bool
    }

    let sources: [Source]
    /// Where `onChange` runs and the owner's state lives.
    let queue: DispatchQueue
    private let busQueue: DispatchQueue
    private let connect: @Sendable (DispatchQueue) throws -> BusConnection
    private let onChange: @Sendable (Change, Known) -> Void

    private var bus: BusConnection?
    private var values: [[String: DBusValue]?]
    private var generations: [Int]
    private var unanswered: Set<Int>
    private var started = false
    /// On `queue`: set by `stop`; nothing is reported after it.
    private(set) var stopped = false

    init(label: String, sources: [Source],
         connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection,
         onChange: @escaping @Sendable (Change, Known) -> Void) {
        self.sources = sources
        queue = DispatchQueue(label: label)
        busQueue = DispatchQueue(label: label + ".bus")
        self.connect = connect
        self.onChange = onChange
        values = Array(repeating: nil, count: sources.count)
        generations = Array(repeating: 0, count: sources.count)
        unanswered = Set(sources.indices)
    }

    /// Connects and starts following; returns at once.
    func start() {
        queue.async { [self] in
            guard !started, !stopped else { return }
            started = true
            let bus: BusConnection
            do {
                bus = try connect(busQueue)
            } catch {
                unavailable(noBus: true, "\(error)")
                return
            }
            self.bus = bus
            bus.onDisconnect { [weak self] in
                guard let self else { return }
                self.queue.async { self.systemBusLost() }
            }
            Task.onQueue { await self.subscribe(bus) }
        }
    }

    /// Closes the connection; nothing is reported after it. Not from `onChange`.
    func stop() {
        let bus: BusConnection? = queue.sync {
            stopped = true
            defer { self.bus = nil }
            return self.bus
        }
        bus?.close()
    }

    private var known: Known { Known(values: values, complete: unanswered.isEmpty) }

    private func tell(_ change: Change) {
        guard !stopped else { return }
        onChange(change, known)
    }

    private func unavailable(noBus: Bool, _ message: String) {
        unanswered = []
        tell(.unavailable(noBus: noBus, message))
    }

    /// Subscribes first, then reads: a change in between is not missed.
    private func subscribe(_ bus: BusConnection) async {
        do {
            for (i, source) in sources.enumerated() {
                _ = try await bus.subscribe(MatchRule(sender: StandardNames.bus, path: StandardNames.busPath,
                                                      interface: StandardNames.bus, member: "NameOwnerChanged",
                                                      arg0: source.busName)) { [weak self] m in
                    let args = (try? m.arguments()) ?? []
                    let owner = args.count >= 3 ? args[2].string ?? "" : ""
                    guard let self else { return }
                    self.queue.async { self.ownerChanged(i, to: owner) }
                }
                _ = try await bus.subscribe(MatchRule(sender: source.busName, path: source.path, interface: StandardNames.properties,
                                                      member: "PropertiesChanged", arg0: source.interface)) { [weak self] m in
                    let args = (try? m.arguments()) ?? []
                    guard let self else { return }
                    self.queue.async { self.propertiesChanged(i, args) }
                }
            }
        } catch {
            queue.async { [self] in unavailable(noBus: false, "\(error)") }
            return
        }
        queue.async { [self] in for i in sources.indices { read(i) } }
    }

    /// Reads a source's properties (on `queue`).
    private func read(_ i: Int) {
        guard let bus, !stopped else { return }
        let source = sources[i]
        generations[i] += 1
        let asked = generations[i]
        guard let call = try? BusMessage.methodCall(destination: source.busName, path: source.path,
                                                    interface: StandardNames.properties, member: "GetAll") else { return }
        try? call.append(.string(source.interface))
        call.autoStart = false
        bus.send(call, timeout: 10) { [weak self] result in
            guard let self else { return }
            self.queue.async { self.readFinished(i, result, generation: asked) }
        }
    }

    private func readFinished(_ i: Int, _ result: Result<BusMessage, BusError>, generation asked: Int) {
        guard asked == generations[i], !stopped else { return }
        unanswered.remove(i)
        switch result {
        case .success(let reply):
            guard let all = (try? reply.arguments())?.first?.vardict else {
                values[i] = nil
                tell(.absent(i, reason: "\(sources[i].name)'s properties could not be read", notOnBus: false))
                return
            }
            values[i] = all.mapValues(\.unwrapped)
            tell(.answered(i))
        case .failure(let error):
            values[i] = nil
            let notOnBus = error.name == StandardErrors.serviceUnknown || error.name == StandardErrors.nameHasNoOwner
            tell(.absent(i, reason: notOnBus ? "\(sources[i].name) is not on the system bus"
                                             : "\(sources[i].name) did not answer (\(error.message))", notOnBus: notOnBus))
        }
    }

    private func ownerChanged(_ i: Int, to owner: String) {
        guard !stopped else { return }
        if owner.isEmpty {
            generations[i] += 1 // a read still under way answers for the old owner
            values[i] = nil
            tell(.left(i))
        } else {
            tell(.appeared(i))
            read(i)
        }
    }

    /// `PropertiesChanged(s interface, a{sv} changed, as invalidated)`.
    private func propertiesChanged(_ i: Int, _ args: [DBusValue]) {
        let source = sources[i]
        guard !stopped, values[i] != nil, args.count >= 3, args[0].string == source.interface else { return }
        let invalidated = Set((args[2].arrayElements ?? []).compactMap(\.string))
        if !invalidated.isDisjoint(with: source.properties) {
            read(i)
            return
        }
        let changed = (args[1].vardict ?? [:]).filter { source.properties.contains($0.key) }
        guard !changed.isEmpty else { return }
        generations[i] += 1 // a read under way answers with older values
        values[i]?.merge(changed.mapValues(\.unwrapped)) { _, new in new }
        tell(.changed(i))
    }

    private func systemBusLost() {
        guard !stopped else { return }
        bus = nil
        for i in generations.indices { generations[i] += 1 }
        values = Array(repeating: nil, count: sources.count)
        unanswered = []
        tell(.busLost)
    }
}

/// What a monitor last reported to its `onChange`, and a wait for the first report.
/// Reported on the follower's queue; `last` is under a `Mutex`, so it may be read anywhere.
final class ConditionsReport<Value: Equatable & Sendable>: Sendable {
    private let lastReported = Mutex<Value?>(nil)
    var last: Value? { lastReported.withLock { $0 } }
    private let known = DispatchSemaphore(value: 0)
    private let onChange: @Sendable (Value) -> Void
    private let logger: Logger
    private let label: String

    init(_ label: String, logger: Logger, onChange: @escaping @Sendable (Value) -> Void) {
        self.label = label
        self.logger = logger
        self.onChange = onChange
    }

    /// Tells `onChange` when `value` differs from the last report; true when this was
    /// the first report (callers log "known" after it).
    @discardableResult
    func report(_ value: Value) -> Bool {
        let previous = lastReported.withLock { last in
            defer { last = value }
            return last
        }
        guard value != previous else { return false }
        let first = previous == nil
        logger.debug("\(label): \(value)")
        onChange(value)
        if first { known.signal() }
        return first
    }

    /// Waits (at most `timeout`) until the first report; true when it came.
    func waitUntilKnown(timeout: TimeInterval) -> Bool {
        guard known.wait(timeout: .now() + timeout) == .success else { return false }
        known.signal() // for the next caller
        return true
    }
}

/// What the monitors (`NetworkMonitor`, `PowerMonitor`) share: a `SystemBusFollower`,
/// the conditions last reported, the wait for the first report, start and stop.
/// A subclass reads what the follower says in `changed` and reports conditions.
///
/// `@unchecked Sendable`: the mutable state is confined to the follower's queue.
public class SystemBusMonitor<Conditions: Equatable & Sendable>: @unchecked Sendable {
    private var follower: SystemBusFollower!
    let reports: ConditionsReport<Conditions>
    let logger: Logger
    private let assumed: Conditions

    init(label: String, sources: [SystemBusFollower.Source], assumed: Conditions, logger: Logger,
         connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection,
         onChange: @escaping @Sendable (Conditions) -> Void) {
        self.logger = logger
        self.assumed = assumed
        reports = ConditionsReport(label.replacingOccurrences(of: "ferry.", with: "") + " conditions",
                                   logger: logger, onChange: onChange)
        follower = SystemBusFollower(label: label, sources: sources, connect: connect) { [unowned self] change, known in
            self.changed(change, known)
        }
    }

    /// What the follower said, on its queue (the subclass's state lives there too).
    func changed(_ change: SystemBusFollower.Change, _ known: SystemBusFollower.Known) {}

    /// Logs why nothing can be followed (`Change.unavailable`): `followed` names the
    /// services, `assuming` what is taken instead.
    func sayUnavailable(noBus: Bool, _ message: String, followed: String, assuming: String) {
        if noBus {
            logger.notice("no system bus (\(message)); \(assuming)")
        } else {
            logger.warning("cannot follow \(followed) on the system bus (\(message)); \(assuming)")
        }
    }

    /// Connects and starts following; returns at once.
    public func start() { follower.start() }

    /// Waits (at most `timeout`) until the first conditions are known; true when they are.
    public func waitUntilKnown(timeout: TimeInterval) -> Bool { reports.waitUntilKnown(timeout: timeout) }

    /// The conditions last reported (the assumed ones until then).
    public var current: Conditions { follower.queue.sync { reports.last ?? assumed } }

    /// Closes the connection; no more reports. Not from `onChange`.
    public func stop() { follower.stop() }
}
