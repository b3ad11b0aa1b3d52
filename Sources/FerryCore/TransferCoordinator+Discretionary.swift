import Foundation

/// Discretionary transfers and the Manager's `Schedule` (v1.2): the coordinator only
/// routes; the rules and their state are `DiscretionaryPolicy`'s and `ScheduleWindows`'.
///
/// The waits ride on the network policy's (`TransferCoordinator+Network.swift`): the
/// same `waiting` state decided by conditions rather than a time, judged for a
/// transfer as it is about to start and, when a condition changes, for the transfers
/// running or waiting for a condition (not the whole list).
///
/// The schedule's next edge (a window starting or ending) is one entry on the
/// timeline (`DueTimeline`, kind `.schedule`), so the one wake timer serves it too;
/// at the edge the window on is decided again and the next edge put on the timeline.
extension TransferCoordinator {
    /// Tells the core what the machine's power allows now; discretionary transfers
    /// wait or go on at once. Ferry assumes `PowerConditions.assumed` until told otherwise.
    public func setPowerState(onBattery: Bool, powerSaver: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let new = PowerConditions(onBattery: onBattery, powerSaver: powerSaver)
        mutate {
            guard discretion.setPower(new) else { return }
            logger.info("power: \(new)")
            judgeConditionWaits()
        }
    }

    /// What the core currently assumes about power.
    public var powerState: PowerConditions {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return discretion.power
    }

    /// The Manager's `Schedule`, as set.
    public var scheduleWindows: [ScheduleWindow] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return discretion.schedule.windows
    }

    /// The window on now (nil outside every window).
    public var activeScheduleWindow: ScheduleWindow? {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return discretion.activeWindow
    }

    /// Replaces the schedule; it applies at once and is stored with the settings.
    /// - Throws: `.invalidArgument` (a bad window, too many); then nothing changes.
    public func setSchedule(_ windows: [ScheduleWindow]) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let checked = try ScheduleWindows(windows)
        mutate {
            discretion.setSchedule(checked)
            stageSettings()
            // Judged whether or not the window on changed: gaining or losing its
            // discretionary-only windows changes who waits outside every window.
            evaluateSchedule(judge: true, force: true)
        }
    }

    /// Takes a stored schedule at a restart (before `start()`); one that no longer
    /// passes the checks is dropped with a log line.
    func restoreSchedule(_ windows: [ScheduleWindow]) {
        guard !windows.isEmpty else { return }
        do {
            discretion.setSchedule(try ScheduleWindows(windows))
        } catch {
            logger.warning("the stored schedule is not valid any more and is ignored: \(error)")
        }
    }

    /// Decides the window on now; when it changed (or `force`), speed limits are shared
    /// anew and (if `judge`) the transfers waiting or running are judged again. Puts a new next edge
    /// on the timeline.
    func evaluateSchedule(judge: Bool, force: Bool = false) {
        let result = discretion.evaluate(now: environment.now(), zone: environment.timeZone)
        if let edge = result.newEdge { timeline.add(0, .schedule, at: edge) }
        guard result.changed else {
            if force && judge { judgeConditionWaits() }
            return
        }
        if let w = discretion.activeWindow {
            logger.info("schedule: window \(w.days) \(w.start)-\(w.end) is on (speed limit \(w.speedLimit == 0 ? "none" : "\(w.speedLimit) B/s")\(w.discretionaryOnly ? ", discretionary transfers only" : ""))")
        } else {
            logger.info("schedule: outside every window")
        }
        schedulingDue.limitChanged()
        if judge { judgeConditionWaits() }
    }

    /// A schedule entry of the timeline came due (`wakeDueTransfers`).
    func scheduleEdgeCame(_ due: UInt64) {
        guard discretion.isCurrentEdge(due) else { return }
        discretion.edgeTaken()
        evaluateSchedule(judge: true)
    }

    /// The global speed limit in force: the window's while one is on, else `SpeedLimit`.
    var effectiveGlobalSpeedLimit: UInt64 { discretion.globalSpeedLimit(manual: managerSettings.speedLimit) }

    /// Why the power or the schedule keeps `t` from running now (after the network's
    /// own reasons), nil when they do not.
    func discretionaryBlocker(_ t: TransferRecord, configuration: SessionConfiguration?) -> WaitingReason? {
        discretion.blocker(discretionary: t.options.discretionary ?? configuration?.discretionary ?? false,
                           running: t.state == .running, metered: network.metered)
    }

    /// Judges again the transfers a condition may hold back or release: those running
    /// and those waiting for a condition. Queued ones are judged as they are about to start.
    private func judgeConditionWaits() {
        applyNetworkPolicy(to: index.running.union(index.waitingForNetwork).sorted())
    }
}
