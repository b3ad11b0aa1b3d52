import Foundation

/// A temporary HOME for a test, with its XDG base directories, and the
/// environment that points a process (ferryd, the CLI, a mock) at it.
public struct TemporaryHome: Sendable {
    /// The proxy variables a test environment drops: the test server is on loopback.
    public static let proxyVariables = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"]

    /// The directory, `/tmp/PREFIX.XXXXXX`.
    public let path: String

    /// Makes the directory with `.config` and `.local/state` below it, and each of
    /// `subdirectories` (relative paths). With `downloadDirectory`, writes
    /// `.config/user-dirs.dirs` naming `$HOME/<downloadDirectory>` as the download
    /// directory, as xdg-user-dirs does (the directory itself is not made).
    public init(prefix: String, downloadDirectory: String? = nil, subdirectories: [String] = []) throws {
        path = try makeShortTemporaryDirectory(prefix: prefix)
        for dir in [".config", ".local/state"] + subdirectories {
            try FileManager.default.createDirectory(atPath: path + "/" + dir, withIntermediateDirectories: true)
        }
        if let downloadDirectory {
            try "XDG_DOWNLOAD_DIR=\"$HOME/\(downloadDirectory)\"\n".write(toFile: path + "/.config/user-dirs.dirs",
                                                                         atomically: true, encoding: .utf8)
        }
    }

    /// HOME and XDG_{CONFIG,STATE,DATA,CACHE}_HOME for this HOME.
    public var xdgVariables: [String: String] {
        ["HOME": path,
         "XDG_CONFIG_HOME": path + "/.config",
         "XDG_STATE_HOME": path + "/.local/state",
         "XDG_DATA_HOME": path + "/.local/share",
         "XDG_CACHE_HOME": path + "/.cache"]
    }

    /// `base` with `xdgVariables` and NO_PROXY/no_proxy `*`, without the proxy
    /// variables and `unsetting`, and then with `setting` applied.
    public func environment(base: [String: String], unsetting: [String] = [], setting: [String: String] = [:]) -> [String: String] {
        var env = base
        for (k, v) in xdgVariables { env[k] = v }
        env["NO_PROXY"] = "*"
        env["no_proxy"] = "*"
        for k in Self.proxyVariables + unsetting { env.removeValue(forKey: k) }
        for (k, v) in setting { env[k] = v }
        return env
    }

    /// Removes the directory and everything below it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
