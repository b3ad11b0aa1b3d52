import FerryCore

/// Decides what an idle connection of a segmented download fetches next: a range no
/// connection has claimed (split so that the idle connections share it), else half of
/// the largest range a busy connection still has to fetch (work stealing). Ranges are
/// never smaller than `minimum`.
struct RangePlanner {
    /// What a busy connection has claimed: `start..<end`, of which `start..<position` is done.
    struct Claim {
        var start: Int64
        var position: Int64
        var end: Int64
    }

    enum Assignment: Equatable {
        /// Fetch this unclaimed range.
        case unclaimed(Range<Int64>)
        /// Take `at..<end` from the busy connection `victim`, which stops at `at`.
        case steal(victim: Int, at: Int64)
    }

    var minimum: Int64

    /// The next range for one of `idle` idle connections, or nil when there is nothing
    /// worth splitting.
    func next(done: SegmentMap, claims: [Claim], idle: Int) -> Assignment? {
        var claimed = done
        for claim in claims { claimed.insert(claim.start..<min(claim.end, done.total)) }
        if let hole = claimed.missing.first {
            let parts = max(1, min(Int64(max(idle, 1)), Int64(hole.count) / minimum))
            let length = parts > 1 ? Int64(hole.count) / parts : Int64(hole.count)
            return .unclaimed(hole.lowerBound..<(hole.lowerBound + length))
        }
        var best: (index: Int, left: Int64)?
        for (index, claim) in claims.enumerated() {
            let left = min(claim.end, done.total) - claim.position
            if left >= 2 * minimum, left > (best?.left ?? 0) { best = (index, left) }
        }
        guard let best else { return nil }
        let claim = claims[best.index]
        return .steal(victim: best.index, at: claim.position + best.left / 2)
    }
}
