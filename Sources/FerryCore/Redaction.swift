/// What the daemon shows of secrets: on the bus, in events and in the log. The real
/// values stay inside the daemon and go only to the server (or proxy) they are for.
public enum Redaction {
    /// Shown in place of a header's value (`Session.Configuration`).
    public static let hiddenValue = "(hidden)"

    /// `url` without its `user:password@` part; everything else as given. Works on
    /// any text, valid URL or not, so that even a refused value is shown safely.
    public static func urlWithoutCredentials(_ url: String) -> String {
        urlWithoutCredentials(url, slashesInAuthority: false)
    }

    /// The same, with the authority's end chosen.
    /// - Parameter slashesInAuthority: for a refused URL's error message, which may hide
    ///   too much but never a password: the "authority" runs from the scheme's `:` (with
    ///   or without `//`: `http:u:p@host`, `http:\\u:p@host`) to the last `@` anywhere,
    ///   so that a URL too broken to say where it ends (a password holding `/`, `?` or
    ///   `#`) loses all of that.
    public static func urlWithoutCredentials(_ url: String, slashesInAuthority: Bool) -> String {
        var text = url
        // Byte by byte: every delimiter is ASCII, and this runs for each URL shown.
        return text.withUTF8 { bytes -> String? in
            let count = bytes.count
            var i = 0
            while i + 2 < count, !(bytes[i] == UInt8(ascii: ":") && bytes[i + 1] == UInt8(ascii: "/") && bytes[i + 2] == UInt8(ascii: "/")) {
                i += 1
            }
            var authority = i + 3
            if i + 2 >= count {
                // No "://": a refused URL's authority starts after its scheme's ':'.
                guard slashesInAuthority, let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0 else { return nil }
                authority = colon + 1
            }
            var at: Int?
            var j = authority
            while j < count, slashesInAuthority || (bytes[j] != UInt8(ascii: "?") && bytes[j] != UInt8(ascii: "#")
                                                       && bytes[j] != UInt8(ascii: "/")) {
                if bytes[j] == UInt8(ascii: "@") { at = j }
                j += 1
            }
            guard let at else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[..<authority]), as: UTF8.self)
                + String(decoding: UnsafeBufferPointer(rebasing: bytes[(at + 1)...]), as: UTF8.self)
        } ?? url
    }

    /// Header names with every value replaced by `hiddenValue`.
    public static func hidingValues(_ headers: [String: String]) -> [String: String] {
        headers.mapValues { _ in hiddenValue }
    }
}
