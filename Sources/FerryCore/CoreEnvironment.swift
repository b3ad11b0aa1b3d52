import Foundation

/// What the core takes from the world outside it: the clock, the default download
/// directory and the version. Tests inject a fake clock and temporary directories.
public struct CoreEnvironment {
    /// Microseconds since the Unix epoch.
    public var now: () -> UInt64
    /// Where downloads go when neither the transfer nor its session names a directory.
    public var defaultDownloadDirectory: () -> String
    /// The daemon's version (the Manager's `Version` property).
    public var version: String
    /// Decides whether a failed attempt is tried again. Retries are not enabled yet:
    /// the default fails at once.
    public var retryPolicy: RetryPolicy

    /// - Parameters:
    ///   - now: the clock; the real wall clock by default.
    ///   - defaultDownloadDirectory: the XDG download directory by default
    ///     (`XDG_DOWNLOAD_DIR` from `user-dirs.dirs`, else `~/Downloads`, created if missing).
    ///   - version: the daemon's version.
    ///   - retryPolicy: `.never` by default.
    public init(now: @escaping () -> UInt64 = CoreEnvironment.systemClock,
                defaultDownloadDirectory: @escaping () -> String = { XDGUserDirectories.downloadDirectory() },
                version: String = "0.1.0",
                retryPolicy: RetryPolicy = .never) {
        self.now = now
        self.defaultDownloadDirectory = defaultDownloadDirectory
        self.version = version
        self.retryPolicy = retryPolicy
    }

    /// The wall clock in microseconds since the Unix epoch.
    public static func systemClock() -> UInt64 {
        let seconds = Date().timeIntervalSince1970
        return seconds > 0 ? UInt64(seconds * 1_000_000) : 0
    }
}
