/// Hexadecimal digits: percent-escapes, and SHA-256 digests as options and pieces give them.
enum Hex {
    /// The value of one hexadecimal digit (either case), nil for any other byte.
    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// The 32 bytes of a SHA-256 digest written as 64 hexadecimal digits (either case);
    /// nil for anything else.
    static func sha256Digest(_ text: String) -> [UInt8]? {
        let u = Array(text.utf8)
        guard u.count == 64 else { return nil }
        var out = [UInt8](repeating: 0, count: 32)
        for i in 0..<32 {
            guard let hi = nibble(u[2 * i]), let lo = nibble(u[2 * i + 1]) else { return nil }
            out[i] = hi << 4 | lo
        }
        return out
    }

    /// `bytes` as lowercase hexadecimal digits.
    static func string(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }
}
