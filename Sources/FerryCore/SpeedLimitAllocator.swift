/// Splits the global and session speed limits evenly over the running transfers and
/// combines them with a transfer's own limit: the smallest that applies wins.
enum SpeedLimitAllocator {
    /// Bytes/s for one transfer, 0 = unlimited.
    static func effectiveLimit(transfer: UInt64, session: UInt64, runningInSession: Int,
                               global: UInt64, runningOverall: Int) -> UInt64 {
        let limits = [transfer, share(session, runningInSession), share(global, runningOverall)].filter { $0 > 0 }
        return limits.min() ?? 0
    }

    /// An even share, never 0 (which would mean unlimited) when there is a limit.
    static func share(_ limit: UInt64, _ count: Int) -> UInt64 {
        guard limit > 0 else { return 0 }
        return max(1, limit / UInt64(max(count, 1)))
    }
}
