import Foundation

/// Reads the file name out of a `Content-Disposition` header (RFC 6266): `filename*`
/// (RFC 8187, UTF-8 or ISO-8859-1) wins over `filename`; the result is sanitised, so a
/// server cannot choose a directory, a hidden file or `..`.
enum ContentDisposition {
    /// nil when the header names no usable file.
    static func fileName(from header: String) -> String? {
        let params = parameters(header)
        if let extended = params["filename*"], let decoded = decodeExtended(extended),
           let name = FileNameSanitizer.sanitize(decoded) {
            return name
        }
        if let plain = params["filename"], let name = FileNameSanitizer.sanitize(plain) {
            return name
        }
        return nil
    }

    /// Parameter names (lowercased) to values, quoted strings unquoted. The first
    /// occurrence of a name wins.
    static func parameters(_ header: String) -> [String: String] {
        var result: [String: String] = [:]
        let chars = Array(header)
        var i = 0
        // Skip the disposition type.
        while i < chars.count && chars[i] != ";" { i += 1 }
        while i < chars.count {
            i += 1  // past ';'
            while i < chars.count && (chars[i] == " " || chars[i] == "\t") { i += 1 }
            var name = ""
            while i < chars.count && chars[i] != "=" && chars[i] != ";" { name.append(chars[i]); i += 1 }
            name = name.trimmingSpaces().lowercased()
            guard i < chars.count, chars[i] == "=" else { continue }
            i += 1
            while i < chars.count && (chars[i] == " " || chars[i] == "\t") { i += 1 }
            var value = ""
            if i < chars.count && chars[i] == "\"" {
                i += 1
                while i < chars.count && chars[i] != "\"" {
                    if chars[i] == "\\" && i + 1 < chars.count { i += 1 }
                    value.append(chars[i]); i += 1
                }
                while i < chars.count && chars[i] != ";" { i += 1 }
            } else {
                while i < chars.count && chars[i] != ";" { value.append(chars[i]); i += 1 }
                value = value.trimmingSpaces()
            }
            if !name.isEmpty && result[name] == nil { result[name] = value }
        }
        return result
    }

    /// `charset'language'percent-encoded` → text; nil for other charsets or bad encoding.
    static func decodeExtended(_ value: String) -> String? {
        let parts = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let charset = parts[0].lowercased()
        guard let bytes = percentDecodedBytes(String(parts[2])) else { return nil }
        switch charset {
        case "utf-8": return String(bytes: bytes, encoding: .utf8)
        case "iso-8859-1": return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
        default: return nil
        }
    }

    private static func percentDecodedBytes(_ s: String) -> [UInt8]? {
        var out: [UInt8] = []
        let utf8 = Array(s.utf8)
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "%") {
                guard i + 2 < utf8.count, let h = Hex.nibble(utf8[i + 1]), let l = Hex.nibble(utf8[i + 2]) else { return nil }
                out.append(h << 4 | l); i += 3
            } else {
                out.append(utf8[i]); i += 1
            }
        }
        return out
    }
}
