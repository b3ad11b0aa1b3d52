/// A smoothed transfer rate (bytes/s) from progress reports: an exponentially weighted
/// moving average, so one slow or fast report does not make the number jump.
struct RateEstimator {
    /// Weight of the newest sample.
    static let smoothing = 0.3

    private(set) var bytesPerSecond: Double = 0
    private var lastTime: UInt64?
    private var pendingBytes: Int64 = 0
    private var hasSample = false

    /// Starts measuring at `time` (µs), forgetting the past.
    mutating func reset(at time: UInt64?) {
        bytesPerSecond = 0; lastTime = time; pendingBytes = 0; hasSample = false
    }

    /// `bytes` arrived by `time` (µs).
    mutating func add(bytes: Int64, at time: UInt64) {
        pendingBytes += max(bytes, 0)
        guard let last = lastTime else { lastTime = time; return }
        guard time > last else { return }
        let sample = Double(pendingBytes) * 1_000_000 / Double(time - last)
        bytesPerSecond = hasSample ? RateEstimator.smoothing * sample + (1 - RateEstimator.smoothing) * bytesPerSecond : sample
        hasSample = true
        pendingBytes = 0
        lastTime = time
    }

    var rate: UInt64 { bytesPerSecond >= 1 ? UInt64(bytesPerSecond) : 0 }

    /// When the rest will be in, µs since the epoch; 0 when unknown.
    func expectedEnd(now: UInt64, done: Int64, total: Int64) -> UInt64 {
        guard total > 0, done <= total, bytesPerSecond >= 1 else { return 0 }
        let seconds = Double(total - done) / bytesPerSecond
        guard seconds < 1e9 else { return 0 }
        return now + UInt64(seconds * 1_000_000)
    }
}
