import Foundation

public typealias TransferID = UInt64
public typealias SessionID = UInt64

/// What the core asks the engine to fetch. The engine owns the bytes: it opens
/// `partPath`, writes the body there and reports back through `EngineEvent`s.
public struct EngineRequest: Sendable, Equatable {
    public var id: TransferID
    public var url: String
    /// Request headers, in order. Already validated (no CR/LF).
    public var headers: [(name: String, value: String)]
    /// The `.part` file the body goes to.
    public var partPath: String
    /// Bytes already in `partPath` to continue after. 0 = start over (truncate).
    public var offset: Int64
    /// Validator sent as `If-Range` with the `Range` request (an ETag, else a
    /// Last-Modified date). nil with offset > 0 = resume without validation is not
    /// allowed: the engine starts over.
    public var ifRange: String?
    /// Bytes per second for this transfer, 0 = unlimited.
    public var speedLimit: UInt64
    /// Seconds without any data before the attempt fails with `.timeout`.
    public var requestTimeout: Double
    /// A proxy URL, nil = libcurl's default (environment), or the desktop's when the
    /// engine asks it (`DesktopProxyLookup`).
    public var proxy: String?
    /// (Set by the engine.) `proxy` is the desktop's: the environment's `no_proxy` still
    /// applies, where a session's proxy carries every request.
    public var proxyIsTheDesktops = false
    /// Hash the whole file (including an existing prefix when resuming).
    public var computeSHA256: Bool
    /// Parallel range connections for one download (1-16). With more than one, and a
    /// server that sends a length, `Accept-Ranges: bytes` and a strong validator, the
    /// engine fetches ranges at once into `partPath`; otherwise it uses one connection
    /// and says why in `EngineResponse.singleConnectionReason`.
    public var connections: Int = 1
    /// The ranges already in `partPath` (from `EngineEvent.segments` of an earlier
    /// attempt), fetched under the validator in `ifRange`: only the missing ranges are
    /// requested. Takes the place of `offset`. Without `ifRange` the engine starts over.
    public var segments: SegmentMap? = nil
    /// The file's length as announced with the bytes on disk (-1: unknown). A 416 that
    /// says the file ends where the part file does completes the download only if it
    /// agrees: else the bytes on disk were cut short, and it starts over.
    public var knownTotal: Int64 = -1
    /// Makes this an upload of the given file (`partPath` is then unused).
    public var upload: EngineUpload? = nil
    /// A sandboxed application's download or upload: the part file and the
    /// response-destination are opened relative to their folder as opened and checked
    /// to be inside this area (nil: an unconfined caller's).
    public var confinedTo: SandboxArea? = nil
    /// Where cookies come from and go to; nil = no cookies at all.
    public var cookieJar: EngineCookieJar? = nil
    /// At most this much body (a small document fetched whole, such as a Metalink);
    /// nil = no limit. Use with one connection.
    public var bodyLimit: EngineBodyLimit? = nil
    /// (v1.2) More URLs of the same file: the download runs as a segmented one and
    /// spreads its range requests over `url` and these; a source that fails (an error,
    /// a short answer, a bad piece) is dropped for the attempt and its ranges go to the
    /// others. Range requests to a mirror carry no `If-Range` (mirrors have their own
    /// validators): their bytes are checked by `pieces`, the length and `sha256`.
    public var mirrors: [String] = []
    /// (v1.2) The SHA-256 of each piece: every piece is checked as it completes, range
    /// requests begin and end at piece boundaries, `EngineEvent.segments` then lists
    /// only verified pieces, and a bad piece is fetched again from another source.
    /// When every source has failed, the attempt fails with `.checksumMismatch`
    /// naming them.
    public var pieces: PieceList? = nil

    public init(id: TransferID, url: String, headers: [(name: String, value: String)] = [],
                partPath: String, offset: Int64 = 0, ifRange: String? = nil,
                speedLimit: UInt64 = 0, requestTimeout: Double = 60, proxy: String? = nil,
                computeSHA256: Bool = false) {
        self.id = id; self.url = url; self.headers = headers; self.partPath = partPath
        self.offset = offset; self.ifRange = ifRange; self.speedLimit = speedLimit
        self.requestTimeout = requestTimeout; self.proxy = proxy; self.computeSHA256 = computeSHA256
    }

    public static func == (a: EngineRequest, b: EngineRequest) -> Bool {
        a.id == b.id && a.url == b.url && a.headers.map { $0.name } == b.headers.map { $0.name }
            && a.headers.map { $0.value } == b.headers.map { $0.value } && a.partPath == b.partPath
            && a.offset == b.offset && a.ifRange == b.ifRange && a.speedLimit == b.speedLimit
            && a.requestTimeout == b.requestTimeout && a.proxy == b.proxy && a.proxyIsTheDesktops == b.proxyIsTheDesktops && a.computeSHA256 == b.computeSHA256
            && a.connections == b.connections && a.segments == b.segments && a.upload == b.upload
            && a.cookieJar == b.cookieJar && a.knownTotal == b.knownTotal && a.confinedTo == b.confinedTo
            && a.bodyLimit == b.bodyLimit && a.mirrors == b.mirrors && a.pieces == b.pieces
    }
}

/// A limit on a response body: a response that announces more (Content-Length), or
/// sends more, fails the attempt with `error` as soon as it does, before more is read.
public struct EngineBodyLimit: Sendable, Equatable {
    public var bytes: Int64
    public var error: CoreError

    public init(bytes: Int64, error: CoreError) {
        self.bytes = bytes
        self.error = error
    }
}

/// The final response's headers, as far as the core needs them.
///
/// An engine may also send `.response` for a final response it is about to fail on,
/// just before the `.completed(.failed…)`: status 400 or more (other than the 416 that
/// means "already complete"), to pass on `retryAfter`; or a 3xx it will not follow (a
/// redirect to another scheme, a 3xx without `Location`). From such a response the core
/// takes only `status` and `retryAfter`; a status other than 408, 429 and 5xx makes the
/// failure that follows final, whatever its error (no retry).
public struct EngineResponse: Sendable, Equatable {
    public var status: Int
    public var etag: String?
    public var lastModified: String?
    /// Total size of the resource when known (from Content-Length or Content-Range), else -1.
    public var expectedTotal: Int64
    /// Where the body starts in the file: the resumed offset for a 206 that matched,
    /// 0 when the server sent the whole file (the engine truncated the part file).
    public var startOffset: Int64
    /// Raw `Content-Disposition` value, if any.
    public var contentDisposition: String?
    /// `Accept-Ranges: bytes` was sent (or a 206 was received).
    public var acceptsRanges: Bool
    /// The URL after redirects.
    public var effectiveURL: String
    /// Seconds the server asked to wait before trying again (`Retry-After`, as
    /// delta-seconds or converted from an HTTP date); nil when not sent. The core waits
    /// at least this long before retrying a 408, 429 or 5xx.
    public var retryAfter: Double?
    /// Connections this attempt uses (more than one: a segmented download).
    public var connections: Int = 1
    /// The response came over a connection that carries several requests at once as
    /// streams (HTTP/2, negotiated by ALPN): the scheduler counts the origin's transfers
    /// by connection, not one each (`TransferIndex`).
    public var multiplexed = false
    /// False for a response the engine makes up rather than a connection's answer (the
    /// file was whole on disk, or a mirror answered first and the URL's validator is
    /// kept): it says nothing of how the origin answers, nor of whether the attempt is a
    /// stream, so neither `multiplexed` nor the effective URL is taken for that.
    public var answeredOnConnection = true
    /// Why a download asked to use several connections uses one (no length, no
    /// `Accept-Ranges: bytes`, no strong validator, the file changed on the server...);
    /// nil otherwise. For the log and `Attempts`.
    public var singleConnectionReason: String? = nil
    /// An upload's answer: the first 64 KiB of the response body when the upload has no
    /// `responseDestination`. An upload's `.response` comes once the answer is complete
    /// (after its progress events), except for a failure status (sent at once).
    public var body: [UInt8]? = nil
    /// A second word in the same attempt of a download on several connections: the
    /// server sent the file but refuses range requests, so one connection goes on to the
    /// end. The ranges on disk no longer count, and the download cannot be resumed (its
    /// next attempt starts over: a range request would be refused again).
    /// `startOffset` then gives the bytes on disk that still count (the connection's).
    public var rangesRefused = false
    /// The engine checked that the file up to `expectedTotal` fits with a margin to spare,
    /// and reserved its space (`fallocate`) unless it is small: the core does not ask
    /// again (the free space read now may no longer count reserved bytes).
    public var spaceReserved = false

    public init(status: Int, etag: String? = nil, lastModified: String? = nil, expectedTotal: Int64 = -1,
                startOffset: Int64 = 0, contentDisposition: String? = nil, acceptsRanges: Bool = false,
                effectiveURL: String, retryAfter: Double? = nil) {
        self.status = status; self.etag = etag; self.lastModified = lastModified
        self.expectedTotal = expectedTotal; self.startOffset = startOffset
        self.contentDisposition = contentDisposition; self.acceptsRanges = acceptsRanges
        self.effectiveURL = effectiveURL; self.retryAfter = retryAfter
    }

    /// A response the engine fails the attempt on (it only carries a status and `retryAfter`).
    var isFailure: Bool { status >= 300 && status != 416 }
}

public enum EngineOutcome: Sendable, Equatable {
    /// The body is complete in the part file (flushed with fdatasync, closed).
    case succeeded(bytesOnDisk: Int64, sha256: String?)
    /// The attempt failed; the part file keeps what was written (`bytesOnDisk`).
    /// `error` is one of the transfer failures (network, timeout, http, tls,
    /// tooManyRedirects, disk).
    case failed(CoreError, bytesOnDisk: Int64)
    /// `stop(id)` was called; the part file is closed and keeps `bytesOnDisk`.
    case stopped(bytesOnDisk: Int64)
    // For a segmented download `bytesOnDisk` is the contiguous prefix from byte 0 (what
    // an offset resume may keep); the `.segments` event just before has every range.
    // For an upload it is the bytes sent.
}

/// Sent by the engine, in order per transfer, on the engine's thread. The receiver
/// hops to its own queue.
public enum EngineEvent: Sendable, Equatable {
    /// Once per attempt, when the final response's headers are in (before any body);
    /// again when a segmented download starts over within the attempt, or finds its
    /// range requests refused (`EngineResponse.rangesRefused`).
    case response(TransferID, EngineResponse)
    /// Coalesced by the engine: at most one every 250 ms per transfer.
    /// `bytesWritten` since the previous progress event; `totalOnDisk` includes the
    /// resumed prefix; `expected` is -1 when unknown.
    case progress(TransferID, bytesWritten: Int64, totalOnDisk: Int64, expected: Int64)
    /// The attempt's body is complete and its connections are free for other
    /// transfers; its file is being flushed (`.completed` follows). Sent by downloads
    /// whose flush takes a while, so that the next transfer need not wait for a sync.
    case connectionsFreed(TransferID)
    /// The attempt's request went out as a stream of an HTTP/2 connection (ALPN) and the
    /// attempt fails before any answer to it: sent just before its `.completed(.failed)`.
    /// A network failure then is the shared connection's loss, not the transfer's own
    /// (as for a stream whose answer had begun: `EngineResponse.multiplexed`).
    case unansweredStream(TransferID)
    /// Always the last event of an attempt.
    case completed(TransferID, EngineOutcome)
    /// A segmented download's map of the ranges on disk: after its `.response`, with
    /// its progress events, and just before its `.completed`. The core persists the
    /// latest one (with the validator) and passes it back in `EngineRequest.segments`.
    /// A later `.response` with `startOffset` 0 (the file changed on the server: the
    /// engine started over on one connection) makes earlier maps void.
    case segments(TransferID, SegmentMap)
    /// What of the part file is on the disk itself (fdatasync'd), not only in the page
    /// cache: a running download syncs every few seconds (`PartFileWriteback`). After
    /// the machine itself restarted (a power cut, a crash of the kernel), the part file
    /// is trusted only this far (`TransferCoordinator.restore`).
    case durable(TransferID, DurablePart)
}

/// The bytes of a part file known to be on the disk (see `EngineEvent.durable`).
public enum DurablePart: Sendable, Hashable {
    /// Its first `n` bytes (a download on one connection).
    case prefix(Int64)
    /// These ranges (a segmented download).
    case ranges(SegmentMap)

    /// What stays of it once a response starts writing at `offset` (0: the part file
    /// was cut; below a prefix: the file is cut there): nil when nothing.
    /// `rangesKept`: a segmented download's map survived the response.
    public func cut(at offset: Int64, rangesKept: Bool) -> DurablePart? {
        switch self {
        case .prefix(let n):
            let kept = min(n, max(offset, 0))
            return kept > 0 ? .prefix(kept) : nil
        case .ranges:
            return rangesKept ? self : nil
        }
    }

    /// As stored: "prefix:N" or "ranges:" and the map's own encoding.
    public var encoded: String {
        switch self {
        case .prefix(let n): return "prefix:\(n)"
        case .ranges(let map): return "ranges:" + map.encoded
        }
    }

    public init?(encoded: String) {
        if encoded.hasPrefix("prefix:"), let n = Int64(encoded.dropFirst(7)), n >= 0 {
            self = .prefix(n)
        } else if encoded.hasPrefix("ranges:"), let map = SegmentMap(encoded: String(encoded.dropFirst(7))) {
            self = .ranges(map)
        } else {
            return nil
        }
    }
}

/// The transfer engine: libcurl in production, a fake in unit tests.
/// All methods are thread-safe and return at once.
public protocol TransferEngine: AnyObject, Sendable {
    /// Where events go. Set once before the first `start`.
    func setEventHandler(_ handler: @escaping @Sendable (EngineEvent) -> Void)
    func start(_ request: EngineRequest)
    /// Stops the attempt; a `.completed(id, .stopped)` follows (unless it already completed).
    func stop(_ id: TransferID)
    func setSpeedLimit(_ id: TransferID, bytesPerSecond: UInt64)
    /// Forgets the cookies of an in-memory jar (an ephemeral session closed).
    func discardCookies(_ jar: EngineCookieJar)
    /// The machine moved to another network (or came back online, or woke up):
    /// connections made before may be dead without a word, so none is used again, save
    /// those of the attempts still running (stop first the attempts that are to start
    /// over).
    func forgetConnections()
    /// Stops everything and the engine thread; no events after this returns.
    func shutdown()
    /// Why the engine could not request `url`, or nil (see the extension's default).
    func urlRefusal(_ url: String) -> String?
    /// Whether the engine says of every failed request on one handle (an upload, or a
    /// download that is not `isRanged`) that went out as a stream of an HTTP/2 connection
    /// and got no answer that it did (`EngineEvent.unansweredStream`), and of its answers
    /// whether they came over HTTP/2 (`multiplexed`). Then such a request is a stream only
    /// when its attempt says so; else the core also takes a request to an origin that last
    /// answered over HTTP/2 for one (`TransferCoordinator.schedule`), which forgives
    /// failures that were no lost connection (a refused connection, a redirect elsewhere).
    var reportsUnansweredStreams: Bool { get }
}

extension EngineRequest {
    /// A download the engine fetches over ranges (several connections, a range map to
    /// continue, mirrors or pieces), not whole on one handle.
    public var isRanged: Bool {
        upload == nil && (connections > 1 || (segments.map { !$0.done.isEmpty } ?? false) || !mirrors.isEmpty || pieces != nil)
    }
}

extension TransferEngine {
    /// Engines without cookies have nothing to forget.
    public func discardCookies(_ jar: EngineCookieJar) {}

    /// Engines that keep no connections have nothing to forget.
    public func forgetConnections() {}

    /// Why the engine could not request `url` (which passed `RequestURL`'s checks),
    /// or nil when it can. Asked when a client gives a URL, so that one the engine's
    /// own parser refuses is an `InvalidUrl` at the call, not a failed transfer later.
    public func urlRefusal(_ url: String) -> String? { nil }

    /// Engines that cannot tell say nothing.
    public var reportsUnansweredStreams: Bool { false }
}
