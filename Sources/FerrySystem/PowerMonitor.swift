import DBus
import Dispatch
import FerryCore
import Foundation
import Logging

/// Follows UPower and power-profiles-daemon on the system bus and reports whether the
/// machine runs on battery and whether the power-saver profile is active.
///
/// It reads UPower's `OnBattery` (`org.freedesktop.UPower`) and the power profile's
/// `ActiveProfile` (`net.hadess.PowerProfiles`, and `org.freedesktop.UPower.PowerProfiles`,
/// the name power-profiles-daemon 0.20 added), follows their `PropertiesChanged` and the
/// services leaving and coming back (`NameOwnerChanged`). Nothing is polled. A service
/// that is absent counts as "on mains power" / "no power saving": where neither runs,
/// nothing waits.
///
/// It has its own system-bus connection on its own queue and never blocks a caller;
/// `onChange` is called on the monitor's queue, in order, whenever the conditions change
/// (and once when they are first known).
///
/// `@unchecked Sendable`: the mutable state is confined to `queue`.
public final class PowerMonitor: @unchecked Sendable {
    /// One property of one service that the monitor follows.
    struct Source: Sendable {
        var busName: String
        var path: String
        var interface: String
        var property: String
    }

    static let upower = Source(busName: "org.freedesktop.UPower", path: "/org/freedesktop/UPower",
                               interface: "org.freedesktop.UPower", property: "OnBattery")
    static let profiles = Source(busName: "net.hadess.PowerProfiles", path: "/net/hadess/PowerProfiles",
                                 interface: "net.hadess.PowerProfiles", property: "ActiveProfile")
    static let upowerProfiles = Source(busName: "org.freedesktop.UPower.PowerProfiles", path: "/org/freedesktop/UPower/PowerProfiles",
                                       interface: "org.freedesktop.UPower.PowerProfiles", property: "ActiveProfile")
    static let sources = [upower, profiles, upowerProfiles]

    private let queue = DispatchQueue(label: "ferry.power")
    private let busQueue = DispatchQueue(label: "ferry.power.bus")
    private let connect: @Sendable (DispatchQueue) throws -> BusConnection
    private let onChange: @Sendable (PowerConditions) -> Void
    private let logger: Logger

    private var bus: BusConnection?
    /// Each source's value (nil: absent or not known).
    private var values: [DBusValue?] = Array(repeating: nil, count: PowerMonitor.sources.count)
    /// Bumped by every read of a source and by it leaving: older replies are dropped.
    private var generations = Array(repeating: 0, count: PowerMonitor.sources.count)
    /// Sources whose first read has not answered yet.
    private var unanswered = Set(PowerMonitor.sources.indices)
    private var reported: PowerConditions?
    private var started = false
    private var stopped = false
    private let known = DispatchSemaphore(value: 0)

    /// - Parameters:
    ///   - connect: opens the system bus on the queue given; by default the system bus.
    ///   - onChange: the new conditions, on the monitor's queue.
    public init(logger: Logger = Logger(label: "ferry.power"),
                connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection = { try BusConnection.system(queue: $0) },
                onChange: @escaping @Sendable (PowerConditions) -> Void) {
        self.logger = logger
        self.connect = connect
        self.onChange = onChange
    }

    /// Connects and starts following; returns at once.
    public func start() {
        queue.async { [self] in
            guard !started, !stopped else { return }
            started = true
            let bus: BusConnection
            do {
                bus = try connect(busQueue)
            } catch {
                logger.notice("no system bus (\(error)); assuming mains power")
                unanswered = []
                report()
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
        known.signal()
        return true
    }

    /// The conditions last reported (`assumed` until then).
    public var current: PowerConditions {
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

    // MARK: - Following the services

    /// Subscribes first, then reads: a change in between is not missed.
    private func subscribe(_ bus: BusConnection) async {
        do {
            for (i, source) in Self.sources.enumerated() {
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
            logger.warning("cannot follow UPower and power-profiles-daemon on the system bus (\(error)); assuming mains power")
            queue.async { [self] in
                unanswered = []
                report()
            }
            return
        }
        queue.async { [self] in for i in Self.sources.indices { read(i) } }
    }

    /// Reads a source's property (on `queue`). The service is not started for this.
    private func read(_ i: Int) {
        guard let bus, !stopped else { return }
        let source = Self.sources[i]
        generations[i] += 1
        let asked = generations[i]
        guard let call = try? BusMessage.methodCall(destination: source.busName, path: source.path,
                                                    interface: StandardNames.properties, member: "Get") else { return }
        try? call.append(.string(source.interface))
        try? call.append(.string(source.property))
        call.autoStart = false
        bus.send(call, timeout: 10) { [weak self] result in
            guard let self else { return }
            self.queue.async { self.readFinished(i, result, generation: asked) }
        }
    }

    private func readFinished(_ i: Int, _ result: Result<BusMessage, BusError>, generation asked: Int) {
        guard asked == generations[i], !stopped else { return }
        let source = Self.sources[i]
        switch result {
        case .success(let reply):
            let value = (try? reply.arguments())?.first
            values[i] = value.map { if case .variant(let inner) = $0 { return inner } else { return $0 } }
            if unanswered.contains(i) { logger.info("following \(source.busName) on the system bus") }
        case .failure(let error):
            values[i] = nil
            if error.name != StandardErrors.serviceUnknown && error.name != StandardErrors.nameHasNoOwner {
                logger.notice("\(source.busName) did not answer (\(error.message)); taking it as absent")
            }
        }
        unanswered.remove(i)
        report()
    }

    private func ownerChanged(_ i: Int, to owner: String) {
        guard !stopped else { return }
        if owner.isEmpty {
            generations[i] += 1
            values[i] = nil
            logger.info("\(Self.sources[i].busName) left the system bus")
            report()
        } else {
            read(i)
        }
    }

    /// `PropertiesChanged(s interface, a{sv} changed, as invalidated)`.
    private func propertiesChanged(_ i: Int, _ args: [DBusValue]) {
        let source = Self.sources[i]
        guard !stopped, args.count >= 3, args[0].string == source.interface else { return }
        if let value = args[1].vardict?[source.property] {
            generations[i] += 1 // a read under way answers with an older value
            values[i] = value
            report()
        } else if (args[2].arrayElements ?? []).contains(where: { $0.string == source.property }) {
            read(i)
        }
    }

    private func systemBusLost() {
        guard !stopped else { return }
        bus = nil
        for i in generations.indices { generations[i] += 1 }
        values = Array(repeating: nil, count: Self.sources.count)
        unanswered = []
        logger.notice("the system bus connection closed; assuming mains power")
        report()
    }

    /// Tells `onChange` when the conditions differ from the last report; nothing before
    /// every source's first read has answered.
    private func report() {
        guard !stopped, unanswered.isEmpty else { return }
        let conditions = PowerConditions(
            onBattery: values[0]?.bool ?? false,
            powerSaver: values[1...].contains { $0?.string == "power-saver" })
        let first = reported == nil
        guard conditions != reported else { return }
        reported = conditions
        logger.debug("power conditions: \(conditions)")
        onChange(conditions)
        if first {
            // After the report: once this line is in the log, the core has the state
            // queued before anything a client sends afterwards.
            logger.info("power state known: \(conditions)")
            known.signal()
        }
    }
}
