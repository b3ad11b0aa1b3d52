import Foundation

/// The `pieces` download option (contract v1.2): a piece length and the SHA-256 of
/// each piece of the file, in order. The file's pieces are `length` bytes each but the
/// last, which holds what is left (1...`length` bytes). Every piece is checked as it
/// completes; a bad one is fetched again (from another mirror where there is one).
public struct PieceList: Sendable, Hashable {
    /// The smallest and largest piece length accepted (a piece is one hash job).
    public static let lengths: ClosedRange<Int64> = (16 * 1024)...(1 << 30)
    /// At most this many pieces (each 64 hex digits on the bus; 32,768 of them stay
    /// well inside a call's 4 MiB).
    public static let maximumCount = 32_768

    /// Bytes per piece (the last may be shorter).
    public let length: Int64
    /// Each piece's SHA-256 as 32 bytes.
    public let digests: [[UInt8]]

    public var count: Int { digests.count }

    /// Checked values: `length` within `lengths`, 1...`maximumCount` digests of 64 hex
    /// digits each. Throws `InvalidArgument` naming what is wrong.
    public init(length: UInt64, hex: [String]) throws {
        guard length >= UInt64(Self.lengths.lowerBound), length <= UInt64(Self.lengths.upperBound) else {
            throw CoreError.invalidArgument("the piece length is \(length) bytes; it must be between \(Self.lengths.lowerBound) (16 KiB) and \(Self.lengths.upperBound) (1 GiB)")
        }
        guard !hex.isEmpty else { throw CoreError.invalidArgument("pieces lists no SHA-256; give one per piece, in order") }
        guard hex.count <= Self.maximumCount else {
            throw CoreError.invalidArgument("pieces lists \(hex.count) SHA-256s; at most \(Self.maximumCount) are allowed (use a longer piece length)")
        }
        var digests: [[UInt8]] = []
        digests.reserveCapacity(hex.count)
        for (i, text) in hex.enumerated() {
            guard let digest = Hex.sha256Digest(text) else {
                let shown = text.count > 80 ? String(text.prefix(80)) + "…" : text
                throw CoreError.invalidArgument("piece \(i)'s SHA-256 '\(shown)' is not 64 hexadecimal digits")
            }
            digests.append(digest)
        }
        self.length = Int64(length)
        self.digests = digests
    }

    /// From stored values already checked once.
    public init?(length: Int64, digests: [[UInt8]]) {
        guard Self.lengths.contains(length), !digests.isEmpty, digests.count <= Self.maximumCount,
              digests.allSatisfy({ $0.count == 32 }) else { return nil }
        self.length = length
        self.digests = digests
    }

    /// The digests as lowercase hex, as given on the bus.
    public var hex: [String] { digests.map(Hex.string) }

    /// Whether a file of `total` bytes has exactly `count` pieces of `length`.
    public func fits(total: Int64) -> Bool {
        total > Int64(count - 1) * length && total <= Int64(count) * length
    }

    /// The largest file the pieces can describe.
    public var maximumTotal: Int64 { Int64(count) * length }

    /// Piece `index`'s bytes in a file of `total` bytes.
    public func range(of index: Int, total: Int64) -> Range<Int64> {
        let start = Int64(index) * length
        return start..<min(start + length, total)
    }

    /// The pieces lying wholly inside `bytes`.
    public func pieces(within bytes: Range<Int64>, total: Int64) -> Range<Int> {
        let first = Int((bytes.lowerBound + length - 1) / length)
        var end = Int(bytes.upperBound / length)
        if bytes.upperBound >= total, total > Int64(end) * length { end += 1 } // the short last piece
        return first..<max(first, min(end, count))
    }
}
