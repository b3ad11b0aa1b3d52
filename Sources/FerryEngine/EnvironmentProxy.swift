import Foundation

/// The proxy settings libcurl reads from the process environment itself, read the way
/// it reads them: for ferryd, to know whether its environment names a proxy (then the
/// desktop's settings are not asked), and for failure messages, to name the proxy a
/// request went through.
public enum EnvironmentProxy {
    /// The variables a proxy is taken from for a URL's scheme, in libcurl's order (it
    /// ignores `HTTP_PROXY`, which a CGI request can set).
    static func variables(https: Bool) -> [String] {
        https ? ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] : ["http_proxy", "all_proxy", "ALL_PROXY"]
    }

    /// The first variable that names a proxy for some scheme, nil for none.
    public static func named(in environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        (["http_proxy"] + variables(https: true)).first { environment[$0].map { !$0.isEmpty } ?? false }
    }

    /// The proxy the environment names for `url`'s scheme, nil for none.
    static func proxy(for url: String, in environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        variables(https: url.lowercased().hasPrefix("https:")).lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
    }

    /// `no_proxy` (else `NO_PROXY`) as libcurl reads it; empty when not set.
    public static func noProxy(in environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        environment["no_proxy"] ?? environment["NO_PROXY"] ?? ""
    }
}
