import Crypto
import Foundation

/// Deterministic test bodies and their digests.
public enum TestData {
    /// `count` pseudo-random bytes; the same seed gives the same bytes.
    public static func bytes(count: Int, seed: UInt64 = 1) -> [UInt8] {
        var state = seed &+ 0x9E37_79B9_7F4A_7C15
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { raw in
            var i = 0
            while i < count {
                // splitmix64
                state = state &+ 0x9E37_79B9_7F4A_7C15
                var z = state
                z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                z ^= z >> 31
                withUnsafeBytes(of: z.littleEndian) { word in
                    let n = min(8, count - i)
                    raw.baseAddress!.advanced(by: i).copyMemory(from: word.baseAddress!, byteCount: n)
                }
                i += 8
            }
        }
        return out
    }

    /// Lowercase hex SHA-256.
    public static func sha256Hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    /// Lowercase hex SHA-256.
    public static func sha256Hex(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }
}
