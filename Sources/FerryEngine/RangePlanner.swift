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
    /// (Pieces) Ranges begin and end at multiples of this, or at the file's end.
    var alignment: Int64 = 1
    /// (Pieces) No range longer than this, and no work stealing: a connection cut
    /// short would leave a piece half fetched, and the server would have sent more of
    /// its range than is kept.
    var maximum: Int64? = nil

    /// The next range for one of `idle` idle connections, or nil when there is nothing
    /// worth splitting.
    func next(done: SegmentMap, claims: [Claim], idle: Int) -> Assignment? {
        var claimed = done
        for claim in claims { claimed.insert(claim.start..<min(claim.end, done.total)) }
        if let hole = claimed.missing.first {
            let parts = max(1, min(Int64(max(idle, 1)), Int64(hole.count) / minimum))
            var length = parts > 1 ? Int64(hole.count) / parts : Int64(hole.count)
            if let maximum { length = min(length, maximum) }
            var end = hole.lowerBound + length
            if alignment > 1, end < hole.upperBound {
                end = end / alignment * alignment
                if end <= hole.lowerBound { end = hole.lowerBound + alignment }
                end = min(end, hole.upperBound)
            }
            return .unclaimed(hole.lowerBound..<end)
        }
        guard maximum == nil else { return nil }
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
