/// What happens after an attempt fails.
public enum RetryDecision: Equatable, Sendable {
    /// The transfer fails now.
    case fail
    /// The transfer waits (`WaitingReason` `retry`) and is queued again after this many seconds.
    case retry(afterSeconds: Double)
}

/// Decides whether a failed attempt is tried again. Kept apart from the coordinator so
/// that backoff rules can change without touching the state handling. The coordinator
/// adds what a policy cannot see: a server's `Retry-After` (the wait is at least that
/// long) and the session's `resource-timeout` (no wait past it).
public struct RetryPolicy: Sendable {
    /// - Parameters: the failure; the attempts made in this run so far, the failed one
    ///   included (1 after the first failure); the session's `retries` setting.
    public var decide: @Sendable (CoreError, _ attempts: UInt32, _ maxRetries: UInt32) -> RetryDecision

    public init(decide: @escaping @Sendable (CoreError, UInt32, UInt32) -> RetryDecision) {
        self.decide = decide
    }

    /// Every failure is final.
    public static let never = RetryPolicy { _, _, _ in .fail }

    /// Transient failures (`isTransient`) are retried up to the session's `retries`,
    /// after `base * 2^(attempts-1)` seconds, at most `cap`, each spread by up to
    /// ±`jitter` (a fraction) so that many transfers failing together do not come back
    /// together. `random` gives numbers in 0..<1 (injectable for tests).
    public static func exponentialBackoff(base: Double = 2, cap: Double = 300, jitter: Double = 0,
                                          random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) -> RetryPolicy {
        RetryPolicy { error, attempts, maxRetries in
            guard isTransient(error), attempts <= maxRetries else { return .fail }
            let exponent = Double(max(attempts, 1) - 1)
            var delay = min(cap, base * pow2(exponent))
            if jitter > 0 {
                delay *= 1 + jitter * (2 * random() - 1)
                delay = min(max(delay, 0), cap)
            }
            return .retry(afterSeconds: delay)
        }
    }

    /// The daemon's policy: exponential backoff from `base` seconds up to `cap`, ±20 %
    /// jitter. `ferryd` takes a smaller base from `FERRY_RETRY_BASE_MS` (a testing knob).
    public static func standard(base: Double = 2, cap: Double = 300) -> RetryPolicy {
        exponentialBackoff(base: base, cap: cap, jitter: 0.2)
    }

    /// Failures that may go away by themselves: network errors (refused, reset, DNS,
    /// dropped mid-body), timeouts (including a stalled transfer) and HTTP 408, 429
    /// and 5xx. Everything else (other 4xx, TLS, too many redirects, checksum, disk)
    /// is permanent.
    public static func isTransient(_ error: CoreError) -> Bool {
        switch error {
        case .network, .timeout: return true
        case .http(let status, _): return isTransient(status: status)
        default: return false
        }
    }

    /// HTTP statuses worth trying again: 408, 429 and 5xx.
    public static func isTransient(status: Int) -> Bool {
        status == 408 || status == 429 || status >= 500
    }

    private static func pow2(_ e: Double) -> Double {
        var r = 1.0
        var i = 0.0
        while i < e && r < 1e9 { r *= 2; i += 1 }
        return r
    }
}
