/// When an attempt next reports the bytes it moved: at most once every
/// `CurlTransfer.progressInterval` (250 ms), each attempt kind with its own count.
struct ProgressPace {
    /// When the next report is due (monotonic ns); 0 before `start`.
    private(set) var nextAt: UInt64 = 0

    var started: Bool { nextAt != 0 }

    /// The first interval begins at `now`.
    mutating func start(at now: UInt64) {
        nextAt = now + CurlTransfer.progressInterval
    }

    /// Whether a report is due at `now` (or `anyway`); if so, the next interval begins.
    @inline(__always)
    mutating func isDue(at now: UInt64, anyway: Bool = false) -> Bool {
        guard now >= nextAt || anyway else { return false }
        nextAt = now + CurlTransfer.progressInterval
        return true
    }

    /// For bytes that wait (a stalled body): nil when their report is due now (the
    /// caller reports them; the next interval begins), else when it will be.
    mutating func wait(at now: UInt64) -> UInt64? {
        isDue(at: now) ? nil : nextAt
    }
}
