/// The contract's limits on what a client may send (interface.md, Security): every
/// string, array and count a client gives has one, and going over it is refused at
/// call time with `LimitExceeded`, before anything is stored or sent. Sizes are in
/// bytes of UTF-8.
public enum Limits {
    /// `MaxConcurrentTransfers` and a session's `max-connections-per-host` (each a
    /// libcurl connection and a file descriptor).
    public static let concurrentTransfers: ClosedRange<UInt32> = 1...256
    /// Requests one HTTP/2 connection carries at once as streams (libcurl's
    /// CURLMOPT_MAX_CONCURRENT_STREAMS; a server may allow fewer, and libcurl then opens
    /// another connection). The scheduler counts a multiplexing origin's running
    /// transfers as one connection per this many.
    public static let streamsPerConnection = 100
    /// A URL (`Download`, `Upload`, `SetUrl`, the resume data's, a proxy's).
    public static let urlBytes = 64 * 1024
    /// (v1.2) URLs in one download's `mirrors` (refused beyond with `InvalidArgument`).
    public static let mirrors = 16
    /// A file path: PATH_MAX.
    public static let pathBytes = 4096
    /// One name in a path: NAME_MAX.
    public static let nameBytes = 255
    /// A request header's name.
    public static let headerNameBytes = 256
    /// A request header's value.
    public static let headerValueBytes = 8 * 1024
    /// Request headers in one `headers` option.
    public static let headerCount = 64
    /// A transfer's `description`.
    public static let descriptionBytes = 4 * 1024
    /// `ResumeDownload`'s resume data.
    public static let resumeDataBytes = 64 * 1024
    /// A session's `application-id` (a D-Bus well-known name).
    public static let applicationIDBytes = 255
    /// Default cap on the sessions of one client (ferryd `--max-sessions-per-client`).
    public static let defaultSessionsPerClient = 1_000
    /// Default cap on the transfers of one session (ferryd `--max-transfers-per-session`).
    public static let defaultTransfersPerSession = 100_000
    /// Default cap on a session's completion events not acknowledged, beyond which it
    /// starts no new run (ferryd `--max-pending-events-per-session`).
    public static let defaultPendingEventsPerSession = 100_000
    /// One method call's arguments on the wire, in all: over three times the largest a
    /// call within the other limits can need (an `Upload` with a 64 KiB URL, 64 headers
    /// and 64 form values of 8 KiB each is about 1.2 MiB), so that a call of millions of
    /// small values is refused before they are read.
    public static let callArgumentBytes = 4 * 1024 * 1024
    /// The reply of one `PendingEventsAfter` call, at most: half of what an array may
    /// hold on the bus (64 MiB), whatever the events' paths and messages.
    public static let pendingEventsPageBytes = 32 * 1024 * 1024

    /// Refuses a value over `limit` bytes; the message names what and the limit,
    /// never the value.
    public static func check(_ value: String, max limit: Int, what: String) throws {
        let n = value.utf8.count
        guard n <= limit else {
            throw CoreError.limitExceeded("\(what) is \(n) bytes long; at most \(limit) are allowed")
        }
    }

    /// A path of at most PATH_MAX bytes whose every name is at most NAME_MAX bytes.
    public static func checkPath(_ path: String, what: String) throws {
        try check(path, max: pathBytes, what: what)
        for name in path.utf8.split(separator: UInt8(ascii: "/")) where name.count > nameBytes {
            throw CoreError.limitExceeded("\(what) has a name of \(name.count) bytes; file names hold at most \(nameBytes)")
        }
    }

    /// The request header rules (names, values, count, reserved and framing names).
    public static func checkHeaders(_ headers: [String: String]) throws {
        try HeaderFields.validate(headers)
    }
}
