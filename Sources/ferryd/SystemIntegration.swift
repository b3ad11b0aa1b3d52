import Dispatch
import FerryCore
import FerrySystem
import Logging

/// The system bus, wired to the core: NetworkManager's metered/online state and
/// UPower's and power-profiles-daemon's power state go into the core (on its queue); the number of running transfers drives logind's
/// sleep inhibitor. Both have their own connection and queue, so a slow or missing
/// system bus never holds up the core or the session bus.
///
/// `@unchecked Sendable`: the fields are immutable; `running` is only used on the
/// core's queue.
final class SystemIntegration: @unchecked Sendable {
    let core: TransferCoordinator
    let network: NetworkMonitor
    let power: PowerMonitor
    let inhibitor: SleepInhibitor
    /// The number of running transfers last passed to the inhibitor (core queue only).
    private var running: UInt32?

    /// How long startup waits for NetworkManager's first answer.
    static let networkWait: Double = 1

    /// Starts following the network and waits (at most `networkWait`) for its first
    /// state, which the core gets before it starts anything: a restart on a metered
    /// network does not start, and then stop, what must wait. Call before `core.start()`.
    static func start(core: TransferCoordinator, logger: Logger) -> SystemIntegration {
        let system = SystemIntegration(core: core)
        system.network.start()
        if !system.network.waitUntilKnown(timeout: networkWait) {
            logger.notice("no answer about the network within \(networkWait) s; starting as if online and not metered")
        }
        system.power.start()
        let now = system.network.current
        core.queue.sync { core.setNetworkState(metered: now.metered, online: now.online, portal: now.portal, route: now.route) }
        // Started alongside the network's; by now it has had the same time to answer.
        if !system.power.waitUntilKnown(timeout: networkWait) {
            logger.notice("no answer about power within \(networkWait) s; starting as if on mains power")
        }
        let power = system.power.current
        core.queue.sync { core.setPowerState(onBattery: power.onBattery, powerSaver: power.powerSaver) }
        return system
    }

    private init(core: TransferCoordinator) {
        self.core = core
        network = NetworkMonitor(logger: Logger(label: "ferry.network")) { conditions in
            core.queue.async { core.setNetworkState(metered: conditions.metered, online: conditions.online, portal: conditions.portal, route: conditions.route) }
        }
        power = PowerMonitor(logger: Logger(label: "ferry.power")) { conditions in
            core.queue.async { core.setPowerState(onBattery: conditions.onBattery, powerSaver: conditions.powerSaver) }
        }
        let inhibitor = SleepInhibitor(logger: Logger(label: "ferry.inhibitor"), onWake: {
            core.queue.async { core.systemWoke() }
        })
        self.inhibitor = inhibitor
    }

    /// Follows the manager's running count (its `managerChanged` events): the sleep
    /// inhibitor is held while anything runs.
    func followRunningTransfers() {
        core.queue.async { [self] in
            note(core.manager.activeTransfers)
            core.subscribe { [weak self] event in
                if case .managerChanged(let m) = event { self?.note(m.activeTransfers) }
            }
        }
    }

    private func note(_ count: UInt32) {
        guard count != running else { return }
        running = count
        inhibitor.setActive(count > 0)
    }
}
