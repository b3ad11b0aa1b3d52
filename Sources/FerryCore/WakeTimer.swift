import Dispatch

/// The one timer that wakes the core for the timeline's earliest due moment, and the
/// moment it is armed for.
///
/// Rules: armed for one moment at a time, and only re-armed when that moment changes;
/// nothing due, no wake-ups; once fired it is armed for nothing until armed again.
/// Real time: the core decides what is due by its environment's clock when it fires.
struct WakeTimer {
    private var timer: DispatchSourceTimer?
    private var armedDue: UInt64?

    /// Arms the timer for `next` (µs on the environment's clock, where it is `now`);
    /// nil: disarms it. `makeTimer` gives the timer the first time one is needed.
    mutating func arm(for next: UInt64?, now: UInt64, makeTimer: () -> DispatchSourceTimer) {
        guard let next else {
            if armedDue != nil {
                armedDue = nil
                timer?.schedule(deadline: .distantFuture)
            }
            return
        }
        guard next != armedDue else { return }
        armedDue = next
        // Far-off moments are clamped to a year; the timer re-arms when it fires early.
        let delay = Int(min(next > now ? next - now : 0, 365 * 86_400 * 1_000_000))
        let timer = self.timer ?? makeTimer()
        self.timer = timer
        timer.schedule(deadline: .now() + .microseconds(delay), leeway: .milliseconds(50))
    }

    /// It fired: armed for nothing now.
    mutating func fired() {
        armedDue = nil
    }

    /// Stops it for good (at shutdown).
    mutating func cancel() {
        timer?.cancel()
        timer = nil
    }
}
