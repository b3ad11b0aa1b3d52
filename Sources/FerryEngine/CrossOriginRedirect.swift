import Foundation

/// A redirect that leaves the origin (scheme, host and port) the request was sent to.
/// libcurl drops only `Authorization` and `Cookie` on such a redirect; every other
/// header the caller set (`X-Api-Key`, a bearer token under another name) would follow
/// to the new host, so Ferry follows these redirects itself without them.
enum CrossOriginRedirect {
    /// The absolute URL `location` points to, when it is another origin than `current`.
    static func target(of location: String, from current: String) -> String? {
        guard let base = URL(string: current), let next = URL(string: location, relativeTo: base)?.absoluteURL,
              let a = origin(base), let b = origin(next) else { return nil }
        return a == b ? nil : next.absoluteString
    }

    private static func origin(_ url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(host):\(port)"
    }
}
