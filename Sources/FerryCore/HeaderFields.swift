/// Request header rules: what a client may set, and how session and transfer headers
/// combine.
enum HeaderFields {
    /// Headers Ferry sets itself to resume safely.
    static let reserved: Set<String> = ["range", "if-range"]

    /// Headers that frame the message or belong to one connection (hop-by-hop): the
    /// HTTP library sets them from the request itself. A client's value would let it
    /// lie about the body or the host (request smuggling, `Host: evil.example`).
    static let framing: Set<String> = ["host", "content-length", "transfer-encoding", "connection", "keep-alive",
                                       "proxy-connection", "te", "trailer", "upgrade", "expect", "http2-settings"]

    /// An upload's body headers: Ferry sets them from the upload itself (`content-type`,
    /// or multipart/form-data with its boundary). Refused in an upload's own `headers`,
    /// and a session's are left out of its uploads (they are meant for its other requests).
    static let uploadBody: Set<String> = ["content-type"]

    /// Refuses names that are not HTTP tokens, values with line breaks or control
    /// characters (header injection), reserved names and names that differ only in
    /// case. Messages name the header, never its value (it may be a secret).
    static func validate(_ headers: [String: String]) throws {
        guard headers.count <= Limits.headerCount else {
            throw CoreError.limitExceeded("\(headers.count) headers were given; at most \(Limits.headerCount) are allowed")
        }
        var seen: [String: String] = [:]
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            guard !name.isEmpty else { throw CoreError.invalidArgument("a header has an empty name") }
            guard name.utf8.count <= Limits.headerNameBytes else {
                throw CoreError.limitExceeded("a header name is \(name.utf8.count) bytes long; at most \(Limits.headerNameBytes) are allowed")
            }
            guard name.unicodeScalars.allSatisfy(isTokenCharacter) else {
                // Only the name's valid start is quoted: a whole header line given as a
                // name ("Authorization: Bearer …") must not echo its secret.
                // At most 32 characters of it (a token given as a name is not echoed whole).
                let valid = name.unicodeScalars.prefix(while: isTokenCharacter)
                let start = String(String.UnicodeScalarView(valid.prefix(32)))
                let bad = name.unicodeScalars.dropFirst(valid.count).first.map { String(format: "U+%04X", $0.value) } ?? "?"
                throw CoreError.invalidArgument("header name \(start.debugDescription)… is not valid: it holds \(bad) after \(valid.count) valid characters; use letters, digits and !#$%&'*+-.^_`|~ only, and give the value apart from the name")
            }
            guard value.utf8.count <= Limits.headerValueBytes else {
                throw CoreError.limitExceeded("the value of header '\(name)' is \(value.utf8.count) bytes long; at most \(Limits.headerValueBytes) are allowed")
            }
            let lower = name.lowercased()
            if reserved.contains(lower) {
                throw CoreError.invalidArgument("header '\(name)' is set by Ferry itself (for resuming); leave it out")
            }
            if framing.contains(lower) {
                throw CoreError.invalidArgument("header '\(name)' frames the request or its connection and is set by Ferry itself; leave it out")
            }
            if let other = seen[lower] {
                throw CoreError.invalidArgument("headers '\(other)' and '\(name)' differ only in case; give one of them")
            }
            seen[lower] = name
            if value.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F }) {
                throw CoreError.invalidArgument("the value of header '\(name)' contains a line break, NUL or another control character")
            }
        }
    }

    /// Session headers first, then the transfer's, which replace session headers of the
    /// same name (case-insensitive). Sorted by name within each group, so requests are
    /// reproducible. Names in `excluding` (lowercase) are left out of both.
    static func merge(session: [String: String], transfer: [String: String],
                      excluding: Set<String> = []) -> [(name: String, value: String)] {
        var result: [(name: String, value: String)] = session.sorted { $0.key < $1.key }
            .filter { !excluding.contains($0.key.lowercased()) }.map { ($0.key, $0.value) }
        for (name, value) in transfer.sorted(by: { $0.key < $1.key }) {
            let lower = name.lowercased()
            guard !excluding.contains(lower) else { continue }
            result.removeAll { $0.name.lowercased() == lower }
            result.append((name, value))
        }
        return result
    }

    private static func isTokenCharacter(_ c: Unicode.Scalar) -> Bool {
        switch c {
        case "a"..."z", "A"..."Z", "0"..."9": return true
        case "!", "#", "$", "%", "&", "'", "*", "+", "-", ".", "^", "_", "`", "|", "~": return true
        default: return false
        }
    }
}
