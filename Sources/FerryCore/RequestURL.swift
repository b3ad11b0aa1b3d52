import Foundation

/// A download URL that passed validation: http or https with a host.
struct RequestURL: Equatable {
    /// As the client gave it (the `Url` property).
    let string: String
    /// Lowercased host name and port (`example.org:443`), the key for per-host limits
    /// and for what an origin's connections can carry: a server on another port of the
    /// same host is another server (libcurl's per-host limit counts host and port too).
    let host: String
    /// The last path component, percent-decoded and sanitised (a file name suggestion).
    let suggestedFileName: String

    /// Checks a client's URL. Errors name the bad value without any password in it.
    static func validate(_ string: String) throws -> RequestURL {
        guard !string.isEmpty else { throw CoreError.invalidUrl("the URL is empty") }
        try Limits.check(string, max: Limits.urlBytes, what: "the URL")
        // Only an error message shows the URL: worked out then, not for every good URL.
        var shown: String { redacted(string) }
        if hasSpaceOrControl(string) {
            throw CoreError.invalidUrl("'\(shown)' is not a valid URL: it contains spaces or control characters (percent-encode them)")
        }
        guard let components = URLComponents(string: string) else {
            throw CoreError.invalidUrl("'\(shown)' is not a valid URL")
        }
        guard let scheme = components.scheme?.lowercased(), !scheme.isEmpty else {
            throw CoreError.invalidUrl("'\(shown)' has no scheme; give a full http:// or https:// URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw CoreError.unsupportedScheme("'\(scheme)' URLs are not supported; only http and https are")
        }
        guard let host = components.host, !host.isEmpty else {
            throw CoreError.invalidUrl("'\(shown)' has no host name")
        }
        if let port = components.port, !(1...65535).contains(port) {
            throw CoreError.invalidUrl("'\(shown)' has port \(port); ports go from 1 to 65535")
        }
        let lastComponent = String(FileSystemChecks.lastComponent(components.percentEncodedPath))
        let decoded = lastComponent.utf8.contains(UInt8(ascii: "%")) ? lastComponent.removingPercentEncoding ?? lastComponent : lastComponent
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        return RequestURL(string: string, host: "\(host.lowercased()):\(port)",
                          suggestedFileName: FileNameSanitizer.sanitize(decoded) ?? FileNameSanitizer.fallbackName)
    }

    /// Whether `string` holds whitespace (Unicode's, not only ASCII's) or a control
    /// character. An all-ASCII string, nearly every URL, is looked at byte by byte:
    /// Unicode's property lookup per character took a quarter of checking a URL.
    static func hasSpaceOrControl(_ string: String) -> Bool {
        var ascii = true
        for byte in string.utf8 {
            if byte >= 0x80 { ascii = false; break }
            if byte <= 0x20 || byte == 0x7F { return true } // ASCII whitespace is 0x09-0x0D and 0x20
        }
        if ascii { return false }
        return string.unicodeScalars.contains { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }
    }

    /// How an error message shows a URL: without `user:password@` even where the URL is
    /// too broken to say where its authority ends (`Redaction`'s `slashesInAuthority`),
    /// clipped.
    static func redacted(_ string: String) -> String {
        let shown = Redaction.urlWithoutCredentials(string, slashesInAuthority: true)
        return shown.count > 300 ? String(shown.prefix(300)) + "…" : shown
    }
}
