import Foundation

/// Which byte ranges of a segmented download's `.part` file hold the resource's bytes.
///
/// The engine reports it (`EngineEvent.segments`) while a download runs over several
/// connections; the core persists it and puts it in resume data, and hands it back in
/// `EngineRequest.segments` so a paused, failed or killed download continues every
/// range where it was. It is only meaningful together with the validator (ETag or
/// Last-Modified) the bytes were fetched under: the engine sends that as `If-Range`.
public struct SegmentMap: Sendable, Equatable, CustomStringConvertible {
    /// At most this many separate ranges (resume data comes from clients: bounded).
    public static let maximumRanges = 4096

    /// The resource's full length in bytes.
    public let total: Int64
    /// The ranges on disk: sorted, disjoint, non-adjacent, non-empty, inside 0..<total.
    public private(set) var done: [Range<Int64>]

    /// An empty map (nothing on disk yet).
    public init(total: Int64) {
        precondition(total >= 0, "a segment map needs a known length")
        self.total = total
        self.done = []
    }

    /// A map from ranges in any order (overlapping and adjacent ones merge); nil when a
    /// range lies outside 0..<total, the length is negative or there are too many ranges.
    public init?(total: Int64, done ranges: [Range<Int64>]) {
        guard total >= 0, ranges.count <= Self.maximumRanges else { return nil }
        self.init(total: total)
        for range in ranges {
            guard range.lowerBound >= 0, range.upperBound <= total else { return nil }
            insert(range)
        }
    }

    /// Marks `range` as on disk (clamped to the resource).
    public mutating func insert(_ range: Range<Int64>) {
        let r = max(0, range.lowerBound)..<min(total, max(range.upperBound, max(0, range.lowerBound)))
        guard !r.isEmpty else { return }
        var merged = r
        var result: [Range<Int64>] = []
        result.reserveCapacity(done.count + 1)
        var placed = false
        for existing in done {
            if existing.upperBound < merged.lowerBound {
                result.append(existing)
            } else if existing.lowerBound > merged.upperBound {
                if !placed { result.append(merged); placed = true }
                result.append(existing)
            } else {
                merged = min(existing.lowerBound, merged.lowerBound)..<max(existing.upperBound, merged.upperBound)
            }
        }
        if !placed { result.append(merged) }
        done = result
    }

    /// Marks `range` as not on disk (a piece that failed its check).
    public mutating func remove(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        var result: [Range<Int64>] = []
        result.reserveCapacity(done.count + 1)
        for r in done {
            if r.upperBound <= range.lowerBound || r.lowerBound >= range.upperBound {
                result.append(r)
                continue
            }
            if r.lowerBound < range.lowerBound { result.append(r.lowerBound..<range.lowerBound) }
            if r.upperBound > range.upperBound { result.append(range.upperBound..<r.upperBound) }
        }
        done = result
    }

    /// Whether every byte of `range` is on disk.
    public func contains(_ range: Range<Int64>) -> Bool {
        guard !range.isEmpty else { return true }
        return done.contains { $0.lowerBound <= range.lowerBound && $0.upperBound >= range.upperBound }
    }

    /// Bytes on disk.
    public var bytesDone: Int64 { done.reduce(0) { $0 + Int64($1.count) } }

    /// Every byte is on disk.
    public var isComplete: Bool { done.count == 1 && done[0] == 0..<total || total == 0 }

    /// Bytes on disk from byte 0 without a gap: what a plain `Range: bytes=N-` resume keeps.
    public var contiguousPrefix: Int64 { done.first.map { $0.lowerBound == 0 ? $0.upperBound : 0 } ?? 0 }

    /// The ranges still missing, in order.
    public var missing: [Range<Int64>] {
        var gaps: [Range<Int64>] = []
        var at: Int64 = 0
        for range in done {
            if range.lowerBound > at { gaps.append(at..<range.lowerBound) }
            at = range.upperBound
        }
        if at < total { gaps.append(at..<total) }
        return gaps
    }

    /// A compact text form for the store and resume data: "TOTAL:a-b,c-d" with
    /// half-open ranges [a, b). "1000:" is an empty map.
    public var encoded: String {
        "\(total):" + done.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ",")
    }

    /// Parses `encoded`; nil for anything malformed (it may come from a client).
    public init?(encoded text: String) {
        guard text.utf8.count <= 64 * 1024 else { return nil }
        let halves = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2, let total = Int64(halves[0]), total >= 0 else { return nil }
        var ranges: [Range<Int64>] = []
        if !halves[1].isEmpty {
            for item in halves[1].split(separator: ",", omittingEmptySubsequences: false) {
                let ends = item.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
                guard ends.count == 2, let a = Int64(ends[0]), let b = Int64(ends[1]), a >= 0, b > a else { return nil }
                ranges.append(a..<b)
            }
        }
        self.init(total: total, done: ranges)
    }

    public var description: String { encoded }
}
