/// What happens after an attempt fails.
public enum RetryDecision: Equatable, Sendable {
    /// The transfer fails now.
    case fail
    /// The transfer waits (`WaitingReason` `retry`) and is queued again after this many seconds.
    case retry(afterSeconds: Double)
}

/// Decides whether a failed attempt is tried again. Kept apart from the coordinator so
/// that backoff rules can change without touching the state handling.
public struct RetryPolicy {
    /// - Parameters: the failure, the attempts made so far, the session's `retries` setting.
    public var decide: (FerryError, _ attempts: UInt32, _ maxRetries: UInt32) -> RetryDecision

    public init(decide: @escaping (FerryError, UInt32, UInt32) -> RetryDecision) {
        self.decide = decide
    }

    /// Every failure is final (the behaviour until retries are switched on).
    public static let never = RetryPolicy { _, _, _ in .fail }

    /// Transient failures (network, timeout, HTTP 408/429/5xx) are retried up to the
    /// session's `retries`, after `base * 2^(attempt-1)` seconds, at most `cap`.
    public static func exponentialBackoff(base: Double = 2, cap: Double = 300) -> RetryPolicy {
        RetryPolicy { error, attempts, maxRetries in
            guard isTransient(error), attempts <= maxRetries else { return .fail }
            let exponent = Double(max(attempts, 1) - 1)
            return .retry(afterSeconds: min(cap, base * pow2(exponent)))
        }
    }

    /// Failures that may go away by themselves.
    public static func isTransient(_ error: FerryError) -> Bool {
        switch error {
        case .network, .timeout: return true
        case .http(let status, _): return status == 408 || status == 429 || status >= 500
        default: return false
        }
    }

    private static func pow2(_ e: Double) -> Double {
        var r = 1.0
        var i = 0.0
        while i < e && r < 1e9 { r *= 2; i += 1 }
        return r
    }
}
