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
/// The bus work is `SystemBusFollower`'s: its own connection on its own queue, never
/// blocking a caller. `onChange` is called on the follower's queue, in order, whenever
/// the conditions change (and once when they are first known).
///
/// `@unchecked Sendable`: the mutable state is confined to the follower's queue.
public final class PowerMonitor: SystemBusMonitor<PowerConditions>, @unchecked Sendable {
    static let upower = SystemBusFollower.Source(
        name: "org.freedesktop.UPower", busName: "org.freedesktop.UPower", path: "/org/freedesktop/UPower",
        interface: "org.freedesktop.UPower", properties: ["OnBattery"])
    static let profiles = SystemBusFollower.Source(
        name: "net.hadess.PowerProfiles", busName: "net.hadess.PowerProfiles", path: "/net/hadess/PowerProfiles",
        interface: "net.hadess.PowerProfiles", properties: ["ActiveProfile"])
    static let upowerProfiles = SystemBusFollower.Source(
        name: "org.freedesktop.UPower.PowerProfiles", busName: "org.freedesktop.UPower.PowerProfiles",
        path: "/org/freedesktop/UPower/PowerProfiles", interface: "org.freedesktop.UPower.PowerProfiles",
        properties: ["ActiveProfile"])
    static let sources = [upower, profiles, upowerProfiles]
    static let assuming = "assuming mains power"

    /// - Parameters:
    ///   - connect: opens the system bus on the queue given; by default the system bus.
    ///   - onChange: the new conditions, on the monitor's queue.
    public init(logger: Logger = Logger(label: "ferry.power"),
                connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection = { try BusConnection.system(queue: $0) },
                onChange: @escaping @Sendable (PowerConditions) -> Void) {
        super.init(label: "ferry.power", sources: Self.sources, assumed: .assumed, logger: logger,
                   connect: connect, onChange: onChange)
    }

    override func changed(_ change: SystemBusFollower.Change, _ known: SystemBusFollower.Known) {
        switch change {
        case .unavailable(let noBus, let message):
            sayUnavailable(noBus: noBus, message, followed: "UPower and power-profiles-daemon", assuming: Self.assuming)
        case .answered(let i):
            logger.info("following \(Self.sources[i].name) on the system bus")
        case .absent(_, let reason, let notOnBus):
            if !notOnBus { logger.notice("\(reason); taking it as absent") }
        case .left(let i):
            logger.info("\(Self.sources[i].name) left the system bus")
        case .busLost:
            logger.notice("the system bus connection closed; \(Self.assuming)")
        case .appeared, .changed:
            break
        }
        report(known)
    }

    /// Tells `onChange` when the conditions differ from the last report; nothing before
    /// every source's first read has answered.
    private func report(_ known: SystemBusFollower.Known) {
        guard known.complete else { return }
        let conditions = PowerConditions(
            onBattery: known.values[0]?["OnBattery"]?.bool ?? false,
            powerSaver: known.values[1...].contains { $0?["ActiveProfile"]?.string == "power-saver" })
        if reports.report(conditions) {
            // After the report: once this line is in the log, the core has the state
            // queued before anything a client sends afterwards.
            logger.info("power state known: \(conditions)")
        }
    }
}
