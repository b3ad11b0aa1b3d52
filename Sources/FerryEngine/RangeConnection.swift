import CCurl
import FerryCore
import Foundation

/// One connection of a segmented download: fetches bytes `start..<end` (or, as the
/// first connection of a fresh download, the whole file from `start`) and writes them
/// at their offsets in the shared part file. Engine thread only.
///
/// Ownership: `SegmentedDownload.connections` holds the only strong reference; the easy
/// handle carries this object unretained, which is safe because the download always
/// calls `release()` (out of the multi, then curl_easy_cleanup) before dropping it.
final class RangeConnection: PacedHandle {
    /// First byte asked for (moves to 0 when a whole-file answer is adopted).
    var start: Int64
    /// The bytes this connection took in but has not written yet, and where its
    /// written bytes end.
    var body: BodyBuffer
    /// Where the bytes it has written end: `start..<position` is on disk.
    var position: Int64 { body.writtenEnd }
    /// Where the bytes it took in end (written, or held in `body`): the next byte to come.
    var received: Int64 { body.writtenEnd + Int64(body.count) }
    /// Where this connection stops (exclusive); shrinks when another connection takes
    /// half of what is left. `Int64.max` while the length is unknown.
    var end: Int64
    /// The end this connection's request asked for (exclusive); nil = to the end of the file.
    let requestedEnd: Int64?
    /// Sent `If-Range` (every range request does; a fresh first request does not).
    let sentIfRange: Bool
    /// The first request of an attempt (`bytes=start-` or no Range at all).
    let isFirst: Bool

    private(set) var easy: UnsafeMutableRawPointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    let errorBuffer: UnsafeMutablePointer<CChar>
    var reader = ResponseHeadReader()
    /// The final response was accepted: body bytes go to the file.
    var accepted = false
    /// Stopped on purpose at `end` (its range was split, or the answer ran past it).
    var reachedEnd = false
    /// Told to stop: writes nothing more; the download removes it.
    var cancelled = false
    /// The server refused it for now (503/429/408): its range goes back to the pool.
    var refused = false
    /// Why it must end, when a callback decided so.
    var failure: CoreError?
    var isThrottled = false
    /// When this connection was started or last brought anything (monotonic ns).
    var lastDataAt: UInt64 = 0
    /// (Mirrors) Which of the download's sources it asks: 0 the URL, then the mirrors.
    var source = 0
    /// (Pieces) Where the pieces it wrote and handed to be checked end (nil: `start`).
    var piecesHandedUpTo: Int64?
    private unowned let download: SegmentedDownload

    var speedLimit: UInt64 { download.pacer.limit }
    var paceAllowsAt: UInt64 { download.pacer.allowsAt }

    init(download: SegmentedDownload, start: Int64, end: Int64, requestedEnd: Int64?, sentIfRange: Bool, isFirst: Bool) {
        self.download = download
        self.start = start
        self.body = BodyBuffer(startingAt: start)
        self.end = end
        self.requestedEnd = requestedEnd
        self.sentIfRange = sentIfRange
        self.isFirst = isFirst
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        if let easy { curl_easy_cleanup(easy) }
        if let headerList { curl_slist_free_all(headerList) }
        errorBuffer.deallocate()
    }

    /// Creates and configures the easy handle; returns the first setup failure.
    func makeHandle(request: EngineRequest, url: String, validator: String?, receiveBuffer: Int,
                    cookies: CookieJars, separateConnection: Bool) -> CURLcode {
        guard let easy = curl_easy_init() else { return CURLE_OUT_OF_MEMORY }
        self.easy = easy
        var setup = EasyHandleSetup(easy: easy)
        setup.common(request, url: url, receiveBuffer: receiveBuffer, cookies: cookies)
        // Over HTTP/2 libcurl would multiplex every range on one connection, and a
        // server's per-connection limit would hold them all: ranges get their own.
        if separateConnection { setup.long(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1)) }
        if let requestedEnd {
            setup.string(CURLOPT_RANGE, "\(start)-\(requestedEnd - 1)")
        } else if start > 0 {
            setup.string(CURLOPT_RANGE, "\(start)-")
        }
        if sentIfRange, let validator { setup.addHeader("If-Range: \(validator)") }
        setup.installHeaders()
        headerList = setup.headerList
        setup.callbacks(owner: Unmanaged.passUnretained(self).toOpaque(), errorBuffer: errorBuffer,
                        body: rangeBody, header: rangeHeaderLine)
        return setup.error
    }

    /// Out of the multi (through the loop) and cleaned up.
    func release(from loop: EngineLoop) {
        guard let easy else { return }
        loop.remove(easy, owner: self)
        loop.cookies.detach(easy)
        curl_easy_cleanup(easy)
        self.easy = nil
        if let headerList { curl_slist_free_all(headerList) }
        headerList = nil
    }

    func resumeAfterThrottle() {
        guard let easy, isThrottled else { return }
        isThrottled = false
        lastDataAt = monotonicNanoseconds() // the wait was ours
        _ = curl_easy_pause(easy, 0 /* CURLPAUSE_CONT */)
    }

    /// When it will have brought nothing for `timeout` ns; nil when it owes nothing.
    func stallDue(after timeout: UInt64) -> UInt64? {
        guard easy != nil, !cancelled, !isThrottled, !reachedEnd, failure == nil else { return nil }
        return lastDataAt &+ timeout
    }

    fileprivate func headerLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastDataAt = monotonicNanoseconds()
        if accepted || cancelled { return !cancelled }
        switch reader.take(bytes) {
        case .more: return true
        case .refusedRedirect(let scheme):
            return download.refusedRedirect(self, scheme: scheme)
        case .redirect(let location):
            return download.redirected(self, to: location)
        case .final:
            return download.accept(self, reader.head)
        }
    }

    /// The connection's bytes start at `offset` instead (a whole file came where a range
    /// was asked for); nothing was taken in yet.
    func restart(at offset: Int64) {
        start = offset
        body = BodyBuffer(startingAt: offset)
        piecesHandedUpTo = nil
    }

    /// Writes what `body` holds into `file`. Returns the failure, if any (what could
    /// not be written is dropped: `position` stays where the file's bytes end).
    func writeHeld(to file: PartFile) -> PartFileError? {
        guard file.fd >= 0, body.count > 0, let code = body.flush(toFile: file.fd) else { return nil }
        return writeFailed(code, file)
    }

    /// Takes in a piece of its range for `file` (written once `body` reaches a boundary).
    func take(_ data: UnsafeRawPointer, _ count: Int, into file: PartFile) -> PartFileError? {
        guard let code = body.append(data, count, toFile: file.fd) else { return nil }
        return writeFailed(code, file)
    }

    /// A write failed: what is held is dropped (`position` is where the file's bytes end).
    private func writeFailed(_ code: Int32, _ file: PartFile) -> PartFileError {
        body.discard()
        return PartFileError(code: code, action: "writing", path: file.path)
    }

    fileprivate func bodyArrived(_ data: UnsafeRawPointer, _ count: Int) -> Int {
        lastDataAt = monotonicNanoseconds()
        return download.write(self, data, count)
    }
}

// libcurl's C callbacks; the context pointer is the RangeConnection (see its ownership note).

private func rangeBody(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                       _ context: UnsafeMutableRawPointer?) -> Int {
    let total = size &* count
    guard let data, let context, total > 0 else { return total }
    return Unmanaged<RangeConnection>.fromOpaque(context)._withUnsafeGuaranteedRef {
        $0.bodyArrived(UnsafeRawPointer(data), total)
    }
}

private func rangeHeaderLine(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                             _ context: UnsafeMutableRawPointer?) -> Int {
    let total = size &* count
    guard let data, let context else { return 0 }
    let connection = Unmanaged<RangeConnection>.fromOpaque(context).takeUnretainedValue()
    return connection.headerLine(UnsafeRawBufferPointer(start: data, count: total)) ? total : 0
}
