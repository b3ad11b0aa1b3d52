import NIOCore
import NIOHTTP1

/// A file the test server serves.
struct ServedResource {
    /// Stored once; responses send zero-copy slices of it.
    var body: ByteBuffer
    var etag: String?
    var lastModified: String?
    var contentDisposition: String?
    var supportsRanges: Bool
}

/// How the server misbehaves for one path. Set with `TestHTTPServer.set(_:on:)`.
public enum ServerBehaviour: Sendable {
    /// Answer every request with this status and a small text body.
    case status(Int)
    /// Send the body at about this rate (a slice every 100 ms).
    case slow(bytesPerSecond: Int)
    /// Close the connection after this many body bytes, for the next `times` responses
    /// (answers to uploads included).
    case dropAfter(bytes: Int, times: Int = 1)
    /// Stop sending after this many body bytes but keep the connection open, for the
    /// next `times` responses (answers to uploads included).
    case stallAfter(bytes: Int, times: Int = 1)
    /// Redirect to `location` (absolute or relative).
    case redirect(to: String, status: Int = 302)
    /// Answer the next `count` requests with `status`, then serve normally.
    case failFirst(Int, status: Int)
    /// Answer range requests with a range starting `by` bytes before the one asked
    /// for (a buggy server), with a matching Content-Range.
    case shiftRanges(by: Int)
    /// Adds `Retry-After: value` to the error answers of `status` and `failFirst`.
    case retryAfter(String)
    /// After `requests` requests for the path, serve `body` with `etag` instead (the
    /// file changes on the server mid-download).
    case replaceAfter(requests: Int, body: [UInt8], etag: String)
    /// Advertise `Accept-Ranges: bytes` but answer every request with the whole file.
    case ignoreRanges
    /// Serve ranges even when `If-Range` no longer matches (a buggy server).
    case ignoreIfRange
    /// Like `dropAfter`, for the next `times` answers to range requests only.
    case dropRangeAfter(bytes: Int, times: Int = 1)
    /// Answer the next `count` range requests with `status` (a server limiting connections).
    case failRangeRequests(Int, status: Int)
    /// Adds `Set-Cookie: value` to every answer (repeatable: one header each).
    case setCookie(String)
    /// Adds `Date: value` to every answer (the server sends none otherwise).
    case date(String)
    /// Accept PUT and POST bodies (recorded in `RecordedRequest.upload`) and answer
    /// `status` with `body` (default: "received N bytes, sha256 HEX").
    case acceptUploads(status: Int = 201, body: [UInt8]? = nil)
    /// Read every request (its body too) and never answer, keeping the connection open.
    case neverAnswer
    /// Read each request and hold its answer back until `TestHTTPServer.release(_:)`
    /// (a server slow to answer, for what a client does meanwhile).
    case holdAnswers
    /// Flip the file's byte at `offset` in every answer that carries it (a mirror
    /// serving a bad piece).
    case corruptByte(at: Int)
}

/// The behaviours in force for one path.
struct PathRules {
    var status: Int?
    var bytesPerSecond: Int?
    var drop: (bytes: Int, remaining: Int)?
    var stall: (bytes: Int, remaining: Int)?
    var redirect: (location: String, status: Int)?
    var failFirst: (remaining: Int, status: Int)?
    var rangeShift = 0
    var retryAfter: String?
    var replacement: (afterRequests: Int, body: [UInt8], etag: String)?
    var requestsSeen = 0
    var ignoreRanges = false
    var ignoreIfRange = false
    var rangeDrop: (bytes: Int, remaining: Int)?
    var cookies: [String] = []
    var date: String?
    var rangeFailures: (remaining: Int, status: Int)?
    var uploads: (status: Int, body: [UInt8]?)?
    var silent = false
    var held = false
    var corruptAt: Int?

    /// Where the next answer is cut, and how (`dropAfter` before `stallAfter`), using up
    /// one of its `times`; nil when neither is left.
    mutating func takeCut() -> (bytes: Int, cut: ResponsePlan.Cut)? {
        if let d = drop, d.remaining > 0 {
            drop = (d.bytes, d.remaining - 1)
            return (d.bytes, .drop)
        }
        if let s = stall, s.remaining > 0 {
            stall = (s.bytes, s.remaining - 1)
            return (s.bytes, .stall)
        }
        return nil
    }

    mutating func apply(_ behaviour: ServerBehaviour) {
        switch behaviour {
        case .status(let code): status = code
        case .slow(let rate): bytesPerSecond = max(1, rate)
        case .dropAfter(let bytes, let times): drop = (max(0, bytes), times)
        case .stallAfter(let bytes, let times): stall = (max(0, bytes), times)
        case .redirect(let location, let code): redirect = (location, code)
        case .failFirst(let count, let code): failFirst = (count, code)
        case .shiftRanges(let by): rangeShift = by
        case .retryAfter(let value): retryAfter = value
        case .replaceAfter(let n, let body, let etag): replacement = (n, body, etag)
        case .ignoreRanges: ignoreRanges = true
        case .ignoreIfRange: ignoreIfRange = true
        case .dropRangeAfter(let bytes, let times): rangeDrop = (max(0, bytes), times)
        case .setCookie(let value): cookies.append(value)
        case .date(let value): date = value
        case .failRangeRequests(let count, let code): rangeFailures = (count, code)
        case .acceptUploads(let status, let body): uploads = (status, body)
        case .neverAnswer: silent = true
        case .holdAnswers: held = true
        case .corruptByte(let offset): corruptAt = offset
        }
    }
}

/// What the connection handler sends for one request.
struct ResponsePlan {
    enum Cut { case drop, stall }

    var status: HTTPResponseStatus
    var headers: HTTPHeaders
    /// The bytes to send (a slice of the stored body, or a small text).
    var body: ByteBuffer
    /// False for HEAD: headers (with Content-Length) only.
    var sendsBody = true
    var bytesPerSecond: Int?
    var cutAfter: Int?
    var cut = Cut.drop
    /// Send nothing at all (`neverAnswer`).
    var silent = false
    /// Wait for `TestHTTPServer.release(_:)` before answering (`holdAnswers`).
    var held = false

    static func text(_ code: Int, _ text: String, extraHeaders: [(String, String)] = []) -> ResponsePlan {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        for (name, value) in extraHeaders { headers.add(name: name, value: value) }
        return ResponsePlan(status: HTTPResponseStatus(statusCode: code), headers: headers, body: ByteBuffer(string: text))
    }
}

/// Parses "bytes=N-", "bytes=N-M" and "bytes=-N" against a body of `size` bytes.
/// Returns nil when the header should be ignored (malformed or several ranges),
/// `.unsatisfiable` when no byte of the range exists.
enum ByteRangeRequest: Equatable {
    case range(first: Int, last: Int)
    case unsatisfiable

    init?(_ header: String, size: Int) {
        let value = header.trimmedSpaces()
        guard value.lowercased().hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst(6)
        let ends = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard ends.count == 2 else { return nil }
        let a = ends[0].trimmedSpaces()
        let b = ends[1].trimmedSpaces()
        if a.isEmpty {
            guard let suffix = Int(b), suffix >= 0 else { return nil }
            if suffix == 0 || size == 0 { self = .unsatisfiable; return }
            self = .range(first: max(0, size - suffix), last: size - 1)
            return
        }
        guard let first = Int(a), first >= 0 else { return nil }
        var last = size - 1
        if !b.isEmpty {
            guard let end = Int(b), end >= first else { return nil }
            last = min(end, size - 1)
        }
        if first >= size { self = .unsatisfiable; return }
        self = .range(first: first, last: last)
    }
}

private extension StringProtocol {
    func trimmedSpaces() -> String {
        var s = Substring(self)
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return String(s)
    }
}
