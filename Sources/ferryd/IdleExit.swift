import DBus
import Dispatch
import FerryCore
import FerryService
import Foundation
import Logging
import FerryInterface

/// Ends ferryd once it has had nothing to do for `timeout` seconds, so that bus
/// activation starts it again when it is needed.
///
/// Idle means: no transfer queued, waiting or running; no notification whose buttons
/// can still be clicked (`Notifier.hasPendingActions`: shown and not closed, for at
/// most the notifier's action window); no ephemeral session (its transfers and events
/// live only in this process). Paused, finished and failed transfers of persistent
/// sessions are in the store and come back with the next ferryd.
///
/// Leaving does not race a call: ferryd first gives up `org.ferry.Ferry1`
/// (`ReleaseName`); a call sent after that starts a new ferryd. Calls that reached us
/// before are answered first. If one of them queued new work, ferryd takes the name
/// back and stays.
///
/// `@unchecked Sendable`: `idleSince`, `timer` and `leaving` are only touched on the
/// core's queue; the rest is immutable.
final class IdleExit: @unchecked Sendable {
    let timeout: Double
    let core: TransferCoordinator
    let bus: BusConnection
    let notifier: Notifier?
    let lifetime: Lifetime
    let logger: Logger

    private var idleSince: DispatchTime?
    private var timer: DispatchSourceTimer?
    private var leaving = false

    init(timeout: Double, core: TransferCoordinator, bus: BusConnection, notifier: Notifier?, lifetime: Lifetime, logger: Logger) {
        self.timeout = timeout
        self.core = core
        self.bus = bus
        self.notifier = notifier
        self.lifetime = lifetime
        self.logger = logger
    }

    /// Starts watching; checks a few times per timeout (between every 0.25 s and 5 s).
    func start() {
        core.queue.async { [self] in
            let interval = min(max(timeout / 4, 0.25), 5)
            let t = DispatchSource.makeTimerSource(queue: core.queue)
            t.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(Int(interval * 100)))
            t.setEventHandler { [weak self] in self?.check() }
            t.resume()
            timer = t
            logger.info("exiting after \(timeout) s without work (--idle-timeout, --no-idle-exit)")
        }
    }

    /// On the core's queue.
    private var isIdle: Bool {
        let m = core.manager
        guard m.activeTransfers == 0, m.queuedTransfers == 0 else { return false }
        if notifier?.hasPendingActions == true { return false }
        return !core.sessionIDs.contains { core.session($0)?.configuration.persistent == false }
    }

    private func check() {
        guard !leaving else { return }
        guard isIdle else {
            idleSince = nil
            return
        }
        let now = DispatchTime.now()
        guard let since = idleSince else {
            idleSince = now
            return
        }
        if Double(now.uptimeNanoseconds - since.uptimeNanoseconds) / 1e9 >= timeout { leave() }
    }

    private func leave() {
        leaving = true
        logger.info("nothing to do for \(timeout) s: releasing \(FerryInterface.busName) and exiting")
        Task.onQueue { [self] in
            do {
                try await bus.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                   method: "ReleaseName", arguments: [.string(FerryInterface.busName)], timeout: 5)
            } catch {
                logger.warning("could not release \(FerryInterface.busName): \(error); exiting anyway")
            }
            // Calls that arrived before the release were dispatched before its reply:
            // their work is on the core's queue ahead of this.
            let stillIdle = await withCheckedContinuation { c in core.queue.async { c.resume(returning: self.isIdle) } }
            if !stillIdle, await takeNameBack() {
                logger.info("a call brought new work while leaving; staying")
                core.queue.async { [self] in
                    leaving = false
                    idleSince = nil
                }
                return
            }
            // A round trip to the bus: the replies to those calls were queued before
            // it, so they have been written when its answer comes.
            _ = try? await bus.nameHasOwner(FerryInterface.busName)
            lifetime.shutDown(code: 0)
        }
    }

    private func takeNameBack() async -> Bool {
        do {
            let reply = try await bus.requestName(FerryInterface.busName)
            return reply == .primaryOwner || reply == .alreadyOwner
        } catch {
            return false
        }
    }
}
