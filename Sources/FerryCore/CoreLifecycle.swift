/// Where the coordinator is in its life (not started, running, shut down) and how deep
/// the changes under way (`mutate`) nest.
///
/// Rules: it only goes forward: it starts once, and never after it was shut down (even
/// if it never started); a change ends its nesting only when the outermost one ends.
struct CoreLifecycle {
    private(set) var isStarted = false
    private(set) var isShutDown = false
    /// Nesting of `mutate`.
    private var changeDepth = 0

    /// Started and not shut down: transfers may start, timers may fire.
    var isRunning: Bool { isStarted && !isShutDown }
    /// A change is under way (its end delivers events and schedules).
    var isInChange: Bool { changeDepth > 0 }
    /// Only the outermost change is under way.
    var isOutermostChange: Bool { changeDepth == 1 }

    /// Starts; false when it started already or was shut down.
    mutating func start() -> Bool {
        guard !isStarted, !isShutDown else { return false }
        isStarted = true
        return true
    }

    mutating func shutDown() {
        isShutDown = true
    }

    mutating func enterChange() {
        changeDepth += 1
    }

    /// Leaves a change; true when none is under way any more.
    mutating func leaveChange() -> Bool {
        changeDepth -= 1
        return changeDepth == 0
    }
}
