import DBus
import Dispatch
import FerryCore
import Foundation
import Logging

/// Follows NetworkManager on the system bus and reports whether the network is
/// metered and online (see `NetworkManagerState` for the rule).
///
/// It reads `Metered`, `Connectivity` and `State` of `/org/freedesktop/NetworkManager`,
/// follows their `PropertiesChanged`, and follows NetworkManager leaving and coming
/// back (`NameOwnerChanged`). Without a system bus, or without NetworkManager on it,
/// it reports `NetworkConditions.assumed` (online, not metered) and logs that once.
///
/// It has its own system-bus connection on its own queue and never blocks a caller:
/// `start` returns at once; `onChange` is called on the monitor's queue, in order,
/// whenever the conditions change (and once when they are first known).
///
/// `@unchecked Sendable`: the mutable state is confined to `queue`; `connect`,
/// `onChange` and `logger` are immutable.
public final class NetworkMonitor: @unchecked Sendable {
    public static let busName = "org.freedesktop.NetworkManager"
    public static let path = "/org/freedesktop/NetworkManager"
    public static let interface = "org.freedesktop.NetworkManager"

    /// Owns the state below; the connection runs on a queue of its own (`busQueue`)
    /// and its callbacks hop here.
    private let queue = DispatchQueue(label: "ferry.network")
    private let busQueue = DispatchQueue(label: "ferry.network.bus")
    private let connect: @Sendable (DispatchQueue) throws -> BusConnection
    private let onChange: @Sendable (NetworkConditions) -> Void
    private let logger: Logger

    private var bus: BusConnection?
    private var properties = NetworkManagerState()
    /// Whether NetworkManager answered (owns its name and gave its properties).
    private var present = false
    private var reported: NetworkConditions?
    /// Bumped by every read and by NetworkManager leaving: replies to older reads
    /// are stale and dropped.
    private var generation = 0
    private var started = false
    private var stopped = false
    private var saidAbsent = false
    private let known = DispatchSemaphore(value: 0)

    /// - Parameters:
    ///   - connect: opens the system bus on the queue given (tests pass an address);
    ///     by default the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket).
    ///   - onChange: the new conditions, on the monitor's queue.
    public init(logger: Logger = Logger(label: "ferry.network"),
                connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection = { try BusConnection.system(queue: $0) },
                onChange: @escaping @Sendable (NetworkConditions) -> Void) {
        self.logger = logger
        self.connect = connect
        self.onChange = onChange
    }

    /// Connects and starts following NetworkManager; returns at once.
    public func start() {
        queue.async { [self] in
            guard !started, !stopped else { return }
            started = true
            let bus: BusConnection
            do {
                bus = try connect(busQueue)
            } catch {
                logger.notice("no system bus (\(error)); assuming the network is online and not metered")
                report(.assumed)
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

    /// Waits (at most `timeout`) until the first conditions are known; true when they are.
    public func waitUntilKnown(timeout: TimeInterval) -> Bool {
        guard known.wait(timeout: .now() + timeout) == .success else { return false }
        known.signal() // for the next caller
        return true
    }

    /// The conditions last reported (`assumed` until then).
    public var current: NetworkConditions {
        queue.sync { reported ?? .assumed }
    }

    /// Closes the connection; no more reports. Not from `onChange`.
    public func stop() {
        let bus: BusConnection? = queue.sync {
            stopped = true
            defer { self.bus = nil }
            return self.bus
        }
        bus?.close()
    }

    // MARK: - Following NetworkManager

    /// Subscribes first, then reads: a change in between is not missed.
    private func subscribe(_ bus: BusConnection) async {
        do {
            _ = try await bus.subscribe(MatchRule(sender: StandardNames.bus, path: StandardNames.busPath,
                                                  interface: StandardNames.bus, member: "NameOwnerChanged",
                                                  arg0: Self.busName)) { [weak self] m in
                let args = (try? m.arguments()) ?? []
                let owner = args.count >= 3 ? args[2].string ?? "" : ""
                guard let self else { return }
                self.queue.async { self.ownerChanged(to: owner) }
            }
            _ = try await bus.subscribe(MatchRule(sender: Self.busName, path: Self.path, interface: StandardNames.properties,
                                                  member: "PropertiesChanged", arg0: Self.interface)) { [weak self] m in
                let args = (try? m.arguments()) ?? []
                guard let self else { return }
                self.queue.async { self.propertiesChanged(args) }
            }
        } catch {
            logger.warning("cannot follow NetworkManager on the system bus (\(error)); assuming the network is online and not metered")
            queue.async { [self] in report(.assumed) }
            return
        }
        queue.async { [self] in read() }
    }

    /// Reads the properties (on `queue`). NetworkManager is not started for this.
    private func read() {
        guard let bus, !stopped else { return }
        generation += 1
        let asked = generation
        guard let call = try? BusMessage.methodCall(destination: Self.busName, path: Self.path,
                                                    interface: StandardNames.properties, member: "GetAll") else { return }
        try? call.append(.string(Self.interface))
        call.autoStart = false
        bus.send(call, timeout: 10) { [weak self] result in
            guard let self else { return }
            self.queue.async { self.readFinished(result, generation: asked) }
        }
    }

    private func readFinished(_ result: Result<BusMessage, BusError>, generation asked: Int) {
        guard asked == generation, !stopped else { return }
        switch result {
        case .success(let reply):
            guard let all = (try? reply.arguments())?.first?.vardict else {
                logger.warning("NetworkManager's properties could not be read; assuming the network is online and not metered")
                report(.assumed)
                return
            }
            var state = NetworkManagerState()
            state.update(from: all)
            properties = state
            let first = !present
            present = true
            saidAbsent = false
            report(state.conditions)
            // After the report: once this line is in the log, the core has the state
            // queued before anything a client sends afterwards.
            if first { logger.info("following NetworkManager on the system bus") }
        case .failure(let error):
            absent(because: error.name == StandardErrors.serviceUnknown || error.name == StandardErrors.nameHasNoOwner
                   ? "NetworkManager is not on the system bus" : "NetworkManager did not answer (\(error.message))")
        }
    }

    private func ownerChanged(to owner: String) {
        guard !stopped else { return }
        if owner.isEmpty {
            generation += 1 // a read still under way answers for the old owner
            absent(because: "NetworkManager left the system bus")
        } else {
            logger.info("NetworkManager is on the system bus")
            read()
        }
    }

    /// `PropertiesChanged(s interface, a{sv} changed, as invalidated)` of the manager.
    private func propertiesChanged(_ args: [DBusValue]) {
        guard !stopped, present, args.count >= 3, args[0].string == Self.interface else { return }
        let changed = args[1].vardict ?? [:]
        let invalidated = Set((args[2].arrayElements ?? []).compactMap(\.string))
        if !invalidated.isDisjoint(with: NetworkManagerState.propertyNames) {
            read()
            return
        }
        guard properties.update(from: changed) else { return }
        report(properties.conditions)
    }

    private func absent(because reason: String) {
        present = false
        properties = NetworkManagerState()
        if !saidAbsent {
            saidAbsent = true
            logger.notice("\(reason); assuming the network is online and not metered")
        }
        report(.assumed)
    }

    private func systemBusLost() {
        guard !stopped else { return }
        bus = nil
        present = false
        generation += 1
        logger.notice("the system bus connection closed; assuming the network is online and not metered")
        report(.assumed)
    }

    /// Tells `onChange` when the conditions differ from the last report.
    private func report(_ conditions: NetworkConditions) {
        guard !stopped else { return }
        let first = reported == nil
        guard conditions != reported else { return }
        reported = conditions
        logger.debug("network conditions: \(conditions)")
        onChange(conditions)
        if first { known.signal() }
    }
}
