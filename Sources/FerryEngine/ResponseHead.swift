import FerryCore
import Foundation

/// One header block of an HTTP response (a redirect, a 1xx, or the final response),
/// built line by line from curl's header callback. Only the fields Ferry uses.
struct ResponseHead {
    var status = 0
    var reason = ""
    var etag: String?
    var lastModified: String?
    var date: String?
    var contentLength: Int64?
    /// A Content-Length that is not a plain decimal count that fits in 63 bits
    /// ("1e23", "-1", 20 digits), or two that disagree: printable, for the message.
    var impossibleContentLength: String?
    var contentRange: String?
    var contentDisposition: String?
    var location: String?
    var acceptsByteRanges = false
    /// `Retry-After` in seconds from now (delta-seconds, or an HTTP date converted).
    var retryAfter: Double?

    /// What later range requests for this file are checked against (`If-Range`).
    var strongValidator: String? { RangeValidator.strong(etag: etag, lastModified: usableLastModified) }

    /// The Last-Modified date when it can check ranges: not within 60 s of `Date`
    /// (`RangeValidator.usableLastModified`). What the core is told, so a file served
    /// with only a weak date is neither resumed nor fetched in ranges.
    var usableLastModified: String? { RangeValidator.usableLastModified(lastModified, date: date) }

    /// Whether this answer to a range request sent under `validator` (an ETag, or a
    /// Last-Modified date: the request's `If-Range`) is of the same file. A server that
    /// ignores `If-Range` sends the range of a changed file anyway; its validator says so.
    /// An answer without the kind of validator sent cannot show it is the same file (a
    /// 206 carries the ETag a 200 would, RFC 9110 §15.3.7; a mirror after `SetUrl`, or
    /// a file replaced by one served without it, may send none): taken as changed, so
    /// the download starts over rather than join two files.
    func isSameFile(as validator: String) -> Bool {
        if validator.hasPrefix("\"") || validator.hasPrefix("W/") {
            return etag == validator
        }
        return lastModified == validator
    }

    /// Whether this answer names another file than `validator`: it carries a validator
    /// of the kind sent, and a different one. (An error answer such as a 416 need not
    /// carry one: its absence proves nothing either way.)
    func contradicts(_ validator: String) -> Bool {
        if validator.hasPrefix("\"") || validator.hasPrefix("W/") {
            return etag.map { $0 != validator } ?? false
        }
        return lastModified.map { $0 != validator } ?? false
    }

    /// Whether a 416 to a range request from `offset` under `validator` says the part
    /// file already holds the whole file: "bytes */TOTAL" with TOTAL the offset, no other
    /// validator, and (when known) the length announced before for these bytes. Any
    /// other 416 (a file that shrank, a response cut short whose server now says its
    /// length is what arrived) means the file on disk is not the one on the server.
    func showsCompleteFile(offset: Int64, validator: String?, knownTotal: Int64) -> Bool {
        guard status == 416, let range = contentRange.flatMap(ContentRange.init), range.first == nil,
              range.total == offset else { return false }
        if let validator, contradicts(validator) { return false }
        return knownTotal < 0 || knownTotal == offset
    }

    /// Parses "HTTP/1.1 206 Partial Content" or "HTTP/2 200"; nil if not a status line.
    static func statusLine(_ line: String) -> ResponseHead? {
        guard line.hasPrefix("HTTP/") else { return nil }
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        guard parts.count >= 2, let code = Int(parts[1]), (100...999).contains(code) else { return nil }
        var head = ResponseHead()
        head.status = code
        head.reason = parts.count == 3 ? String(Self.trimmingOWS(parts[2])) : ""
        return head
    }

    /// Records one "Name: value" line.
    mutating func add(_ line: String) {
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = Self.trimmingOWS(line[..<colon]).lowercased()
        let value = String(Self.trimmingOWS(line[line.index(after: colon)...]))
        switch name {
        case "etag": etag = value
        case "last-modified": lastModified = value
        case "date": date = value
        case "content-length":
            if let length = Self.decimalCount(value), contentLength == nil || contentLength == length {
                contentLength = length
            } else {
                impossibleContentLength = Self.printable(value)
            }
        case "content-range": contentRange = value
        case "content-disposition": contentDisposition = value
        case "location": location = value
        case "retry-after": retryAfter = Self.retryAfterSeconds(value, now: Date())
        case "accept-ranges":
            acceptsByteRanges = value.lowercased().split(separator: ",").contains {
                Self.trimmingOWS($0) == "bytes"
            }
        default: break
        }
    }

    /// `text` without HTTP's optional whitespace (spaces and horizontal tabs, RFC 9110
    /// §5.6.3) at either end. Byte-wise: Foundation's `trimmingCharacters(in:)` went
    /// through NSString and was a tenth of the engine thread's time in a batch of small
    /// downloads.
    static func trimmingOWS(_ text: Substring) -> Substring {
        let bytes = text.utf8
        var start = bytes.startIndex, end = bytes.endIndex
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start = bytes.index(after: start) }
        while end > start {
            let last = bytes.index(before: end)
            guard bytes[last] == 0x20 || bytes[last] == 0x09 else { break }
            end = last
        }
        return Substring(bytes[start..<end])
    }

    /// 1 to 18 ASCII digits (so it fits in an Int64), else nil.
    static func decimalCount(_ value: String) -> Int64? {
        let digits = value.utf8
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(value)
    }

    /// "120" or "Wed, 21 Oct 2026 07:28:00 GMT" -> seconds to wait (never negative).
    static func retryAfterSeconds(_ value: String, now: Date) -> Double? {
        if let seconds = Int(value), seconds >= 0 { return Double(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: value) { return max(0, date.timeIntervalSince(now)) }
        }
        return nil
    }

    /// Statuses curl follows when FOLLOWLOCATION is on and a Location is present.
    var isFollowedRedirect: Bool {
        location != nil && [301, 302, 303, 307, 308].contains(status)
    }

    /// "HTTP 404 Not Found": the status and its reason phrase.
    var statusDescription: String {
        let phrase = HTTPReasonPhrase.standard(status) ?? Self.printable(reason)
        return phrase.isEmpty ? "HTTP \(status)" : "HTTP \(status) \(phrase)"
    }

    /// The server's reason phrase, limited to printable ASCII and a sane length.
    private static func printable(_ s: String) -> String {
        String(String.UnicodeScalarView(s.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }).prefix(80))
    }

    /// Decodes a header line: UTF-8 when valid, else ISO-8859-1 (old servers' filenames).
    static func decode(_ bytes: UnsafeRawBufferPointer) -> String {
        var end = bytes.count
        while end > 0, bytes[end - 1] == 0x0A || bytes[end - 1] == 0x0D { end -= 1 }
        let trimmed = UnsafeRawBufferPointer(rebasing: bytes[0..<end])
        if let s = String(validating: trimmed, as: UTF8.self) { return s }
        return String(String.UnicodeScalarView(trimmed.map { Unicode.Scalar($0) }))
    }
}

/// A `Content-Range` value: "bytes 100-199/1000", "bytes 100-199/*" or "bytes */1000".
struct ContentRange: Equatable {
    /// nil for the unsatisfied form "bytes */TOTAL".
    var first: Int64?
    var last: Int64?
    /// nil when the server wrote "*".
    var total: Int64?

    init?(_ value: String) {
        let v = value.trimmingCharacters(in: .whitespaces)
        guard v.lowercased().hasPrefix("bytes") else { return nil }
        let rest = v.dropFirst(5).trimmingCharacters(in: .whitespaces)
        let halves = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let range = halves[0].trimmingCharacters(in: .whitespaces)
        let totalText = halves[1].trimmingCharacters(in: .whitespaces)
        if totalText == "*" { total = nil } else if let t = Int64(totalText), t >= 0 { total = t } else { return nil }
        if range == "*" {
            guard total != nil else { return nil }
            first = nil; last = nil
            return
        }
        let ends = range.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard ends.count == 2, let a = Int64(ends[0].trimmingCharacters(in: .whitespaces)),
              let b = Int64(ends[1].trimmingCharacters(in: .whitespaces)), a >= 0, b >= a else { return nil }
        if let t = total, b >= t { return nil }
        first = a; last = b
    }
}

/// Reason phrases of the statuses a download is likely to meet (HTTP/2 sends none).
enum HTTPReasonPhrase {
    static func standard(_ status: Int) -> String? {
        switch status {
        case 200: return "OK"
        case 201: return "Created"
        case 202: return "Accepted"
        case 203: return "Non-Authoritative Information"
        case 204: return "No Content"
        case 205: return "Reset Content"
        case 206: return "Partial Content"
        case 300: return "Multiple Choices"
        case 301: return "Moved Permanently"
        case 302: return "Found"
        case 303: return "See Other"
        case 304: return "Not Modified"
        case 305: return "Use Proxy"
        case 307: return "Temporary Redirect"
        case 308: return "Permanent Redirect"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 402: return "Payment Required"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 406: return "Not Acceptable"
        case 407: return "Proxy Authentication Required"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 410: return "Gone"
        case 411: return "Length Required"
        case 412: return "Precondition Failed"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 415: return "Unsupported Media Type"
        case 416: return "Range Not Satisfiable"
        case 417: return "Expectation Failed"
        case 421: return "Misdirected Request"
        case 422: return "Unprocessable Content"
        case 425: return "Too Early"
        case 426: return "Upgrade Required"
        case 428: return "Precondition Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 451: return "Unavailable For Legal Reasons"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        case 505: return "HTTP Version Not Supported"
        case 507: return "Insufficient Storage"
        case 508: return "Loop Detected"
        case 511: return "Network Authentication Required"
        default: return nil
        }
    }
}
