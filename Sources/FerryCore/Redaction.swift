/// What the daemon shows of secrets: on the bus, in events and in the log. The real
/// values stay inside the daemon and go only to the server (or proxy) they are for.
public enum Redaction {
    /// Shown in place of a header's value (`Session.Configuration`).
    public static let hiddenValue = "(hidden)"

    /// `url` without its `user:password@` part; everything else as given. Works on
    /// any text, valid URL or not, so that even a refused value is shown safely.
    public static func urlWithoutCredentials(_ url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return url }
        return String(url[..<schemeEnd.upperBound]) + String(rest[rest.index(after: at)...])
    }

    /// Header names with every value replaced by `hiddenValue`.
    public static func hidingValues(_ headers: [String: String]) -> [String: String] {
        headers.mapValues { _ in hiddenValue }
    }
}
