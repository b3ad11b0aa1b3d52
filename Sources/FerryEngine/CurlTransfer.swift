import CCurl
import Crypto
import FerryCore
import FerryInterface
import Foundation

/// The easy handle of a download on one connection (`SingleDownload`), its part file
/// and what the response said so far. Engine thread only.
///
/// Ownership: its `SingleDownload` holds the only strong reference. The easy handle's
/// CURLOPT_PRIVATE, WRITEDATA and HEADERDATA carry this object *unretained*; that is
/// safe because the attempt always calls `releaseHandle()` (remove from the multi, then
/// curl_easy_cleanup) before it lets go of the object.
final class CurlTransfer {
    /// Nanoseconds between two progress events of one transfer (250 ms).
    static let progressInterval: UInt64 = 250_000_000
    /// Receive buffer: fewer, larger reads from the socket (libcurl's default is 16 KiB).
    /// libcurl still hands the body over in pieces of at most 16 KiB; `BodyBuffer`
    /// gathers them into larger writes.
    static let bufferSize = 256 * 1024

    let request: EngineRequest
    var id: TransferID { request.id }
    /// Distinguishes this attempt's background job results from an older attempt's.
    let attempt: UInt64
    let file: PartFile
    /// Its handle is in the multi (added by its `SingleDownload`).
    var inMulti = false
    private(set) var easy: UnsafeMutableRawPointer?
    /// First setopt failure, if any (the loop then fails the attempt).
    private(set) var setupError: CURLcode = CURLE_OK

    private let fd: Int32
    private unowned let loop: EngineLoop
    private var headerList: UnsafeMutablePointer<curl_slist>?
    let errorBuffer: UnsafeMutablePointer<CChar>

    /// A `Range: bytes=OFFSET-` request was sent (resuming with a validator).
    let sentRange: Bool
    /// Where this attempt's body starts in the file.
    private(set) var startOffset: Int64
    /// Body bytes this attempt took in: written, or held in `body` until they are.
    private(set) var bodyBytes: Int64 = 0
    /// `request.bodyLimit`'s bytes (Int64.max: none), read on every chunk.
    private lazy var bodyLimitBytes: Int64 = request.bodyLimit?.bytes ?? .max
    /// The body's bytes on their way to a regular part file, gathered into larger,
    /// aligned writes (set up when the response is accepted).
    private var body = BodyBuffer(startingAt: 0)
    private var unreportedBytes: Int64 = 0
    private var writeback: PartFileWriteback?
    /// Tells this transfer's part-file syncs from those of the one it replaced (a
    /// redirect, the file started over), whose news is void (`SingleDownload`).
    let syncEpoch = CurlTransfer.nextSyncEpoch()
    nonisolated(unsafe) private static var syncEpochs = 0
    /// Engine thread only.
    private static func nextSyncEpoch() -> Int {
        syncEpochs &+= 1
        return syncEpochs
    }

    /// The write-out's duplicate descriptor, for the file job that flushes the file
    /// (-1 when there is none); no more write-out after this.
    func handOverWriteback() -> Int32 {
        defer { writeback = nil }
        return writeback?.handOver() ?? -1
    }
    /// File size at which the next write-out request is due (never, without writeback).
    private var nextWritebackAt = Int64.max
    private var progressPace = ProgressPace()
    /// Present only when the request asked for SHA-256.
    var hasher: SHA256?

    /// Bytes per second, 0 = unlimited. Enforced here rather than with
    /// CURLOPT_MAX_RECV_SPEED_LARGE, which libcurl 7.88 honours only loosely (a 4 MiB
    /// body limited to 200 KiB/s arrives in about 2 s): body chunks are paced by
    /// pausing the transfer (CURL_WRITEFUNC_PAUSE), which stops reading the socket,
    /// and the loop unpauses it when the pace allows (see `EngineLoop`).
    private(set) var speedLimit: UInt64
    /// Monotonic time before which a new chunk would exceed the speed limit.
    private(set) var paceAllowsAt: UInt64 = 0
    /// Paused by the speed limit; the loop resumes it at `paceAllowsAt`.
    var isThrottled = false

    /// Stops the download before its disk is full (see DiskSpaceGuard).
    private var space = DiskSpaceGuard()
    private var head = ResponseHead()
    /// Location of the last redirect followed (for a refused redirect's message).
    private(set) var lastLocation: String?
    /// Redirects this handle may still follow (10 in all per attempt).
    let redirectsLeft: Int
    /// A redirect to another origin, which the loop follows in a new handle without
    /// the caller's headers (see `CrossOriginRedirect`).
    private(set) var crossOriginRedirect: String?
    /// The server sent the asked-for range of a file that changed (its validator is not
    /// the `If-Range` sent: a server that ignores `If-Range`), or a 416 that does not
    /// fit the bytes on disk; the loop fetches the whole file again in a new handle,
    /// into the same part file cut to 0.
    private(set) var changedOnServer: String?
    /// When the body's last bytes came (monotonic ns), or it began.
    private var lastDataAt: UInt64 = 0

    /// What every request says it comes from: Ferry and its release.
    static let userAgent = "Ferry/" + FerryInterface.releaseVersion

    /// `request-timeout`, as curl is given it.
    static func stallSeconds(_ request: EngineRequest) -> Double {
        min(max(1, request.requestTimeout.isFinite ? request.requestTimeout : 60), 86_400)
    }

    /// When the body, once begun, will have brought nothing for `request-timeout`
    /// (monotonic ns): the try fails then (`EngineLoop`). nil before the body and while
    /// the speed limit holds the transfer (that wait is ours, not the server's).
    var stallDue: UInt64? {
        guard responseReady, inMulti, !isThrottled, failure == nil else { return nil }
        return lastDataAt &+ UInt64(Self.stallSeconds(request) * 1_000_000_000)
    }

    /// The final response was accepted; body bytes go to the file.
    private(set) var responseReady = false
    private(set) var expectedTotal: Int64 = -1
    /// A 416 proved the part file already holds the whole resource.
    private(set) var alreadyComplete = false
    /// Why a callback aborted the transfer.
    private(set) var failure: CoreError?
    /// Whether its request went out on an HTTP/2 connection.
    let alpn = ALPNProbe()

    /// Where the attempt's body ends in the part file once what `body` holds is written
    /// (`writeBufferedBody`, before the attempt ends and before the file is read).
    var bytesOnDisk: Int64 { startOffset + bodyBytes }

    init?(request: EngineRequest, attempt: UInt64, file: PartFile, resume: Bool, loop: EngineLoop, cookies: CookieJars,
          redirectsLeft: Int = 10) {
        guard let easy = curl_easy_init() else { return nil }
        self.redirectsLeft = redirectsLeft
        self.request = request
        self.attempt = attempt
        self.file = file
        self.fd = file.fd
        self.loop = loop
        self.easy = easy
        self.sentRange = resume
        self.startOffset = resume ? request.offset : 0
        self.speedLimit = request.speedLimit
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        configure(easy, cookies: cookies)
    }

    deinit {
        if let easy {
            loop.cookies.detach(easy)
            curl_easy_cleanup(easy)
        }
        if let headerList { curl_slist_free_all(headerList) }
        errorBuffer.deallocate()
    }

    private func configure(_ easy: UnsafeMutableRawPointer, cookies: CookieJars) {
        var setup = EasyHandleSetup(easy: easy)
        // Limited from the start: smaller chunks give a smoother pace (about four a second).
        let limited = request.speedLimit > 0 ? Int(clamping: request.speedLimit / 4) : Self.bufferSize
        setup.common(request, url: request.url, receiveBuffer: limited, maxRedirects: redirectsLeft, cookies: cookies)
        if sentRange, let validator = request.ifRange {
            setup.addHeader("If-Range: \(validator)")
            setup.string(CURLOPT_RANGE, "\(request.offset)-")
        }
        setup.installHeaders()
        headerList = setup.headerList
        setup.callbacks(owner: Unmanaged.passUnretained(self).toOpaque(), errorBuffer: errorBuffer,
                        body: curlWriteBody, header: curlHeaderLine)
        setup.probeALPN(alpn)
        setupError = setup.error
    }

    /// A new limit applies from the next chunk on (the loop resumes a throttled
    /// transfer whose limit was lifted).
    func setSpeedLimit(_ bytesPerSecond: UInt64) {
        speedLimit = bytesPerSecond
        paceAllowsAt = min(paceAllowsAt, monotonicNanoseconds() + 1_000_000_000)
    }

    /// Unpauses a throttled transfer; curl may deliver the held chunk right here.
    func resumeAfterThrottle() {
        guard let easy, isThrottled else { return }
        isThrottled = false
        lastDataAt = monotonicNanoseconds()
        _ = curl_easy_pause(easy, 0 /* CURLPAUSE_CONT */)
    }

    /// Removes the handle from the multi (if added) and then cleans it up.
    func releaseHandle() {
        guard let easy else { return }
        if inMulti {
            loop.remove(easy, owner: self)
            inMulti = false
        }
        loop.cookies.detach(easy)
        curl_easy_cleanup(easy)
        self.easy = nil
        if let headerList { curl_slist_free_all(headerList) }
        headerList = nil
    }

    // MARK: - Headers

    /// One header line from curl (status line, field, or the blank line ending a block).
    /// Returns false to abort the transfer.
    func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if responseReady || alreadyComplete { return true } // trailers after the body
        let line = ResponseHead.decode(bytes)
        if line.isEmpty { return endOfHeaderBlock() }
        if let statusLine = ResponseHead.statusLine(line) {
            head = statusLine // a new response (redirect, 1xx, final): start afresh
            return true
        }
        head.add(line)
        return true
    }

    private func endOfHeaderBlock() -> Bool {
        if head.status < 200 { return true } // 1xx: the real response follows
        if head.isFollowedRedirect {
            lastLocation = head.location      // curl follows it; headers of the next response come
            alpn.redirected()
            if let location = head.location, let scheme = URLComponents(string: location)?.scheme?.lowercased(),
               scheme != "http" && scheme != "https" {
                // Refused here rather than by curl, so the core sees the redirect's
                // status with the failure and does not retry it.
                emitResponse(acceptsRanges: false)
                return abort(.network("Redirected to a \(scheme): URL; only http and https are allowed"))
            }
            if !request.headers.isEmpty, let location = head.location,
               let next = CrossOriginRedirect.target(of: location, from: effectiveURL) {
                crossOriginRedirect = next
                return false // curl would send the caller's headers there: stop, the loop follows
            }
            return true
        }
        return acceptFinalResponse()
    }

    private func acceptFinalResponse() -> Bool {
        let status = head.status
        if let length = head.impossibleContentLength, status < 300 {
            return abort(.network("\(hostDescription) sent an impossible Content-Length (\(length))"))
        }
        if status >= 400 {
            if status == 416, sentRange {
                guard head.showsCompleteFile(offset: request.offset, validator: request.ifRange,
                                             knownTotal: request.knownTotal) else {
                    // The range is past the end of what the server has now: the file
                    // changed (or what arrived before was cut short); it starts over.
                    changedOnServer = "it answered a range from byte \(request.offset) with 416 and \(head.contentRange ?? "no Content-Range")"
                    return false
                }
                // The part file is already complete.
                if let error = file.truncate(to: request.offset) { return abort(.disk(error.message)) }
                expectedTotal = request.offset
                alreadyComplete = true
                emitResponse(acceptsRanges: true)
                return false // nothing to read; the loop completes the attempt as succeeded
            }
            // The core takes the status and Retry-After from this response (see EngineResponse).
            emitResponse(acceptsRanges: head.acceptsByteRanges)
            return abort(.http(status: status, head.statusDescription))
        }
        if status == 206 {
            guard sentRange, let rangeText = head.contentRange else {
                return abort(.network("The server sent part of the file (\(head.statusDescription)) without a usable Content-Range"))
            }
            guard let range = ContentRange(rangeText), let first = range.first, first == request.offset else {
                return abort(.network("The server sent an unexpected range (\(rangeText)) instead of bytes from \(request.offset)"))
            }
            if let validator = request.ifRange, !head.isSameFile(as: validator) {
                changedOnServer = "its validator is now \(head.etag ?? head.lastModified ?? "missing")"
                return false
            }
            expectedTotal = range.total ?? -1
            if let error = file.truncate(to: request.offset) { return abort(.disk(error.message)) }
        } else if status < 300 {
            if startOffset > 0 {
                // Range ignored or validator mismatch: the whole file comes, from byte 0.
                startOffset = 0
                if let error = file.truncate(to: 0) { return abort(.disk(error.message)) }
                if hasher != nil { hasher = SHA256() }
            }
            expectedTotal = head.contentLength ?? -1
            if let limit = request.bodyLimit, expectedTotal > limit.bytes { return abort(limit.error) }
        } else {
            return abort(.network("The server answered \(head.statusDescription) instead of sending the file"))
        }
        if expectedTotal > 0, let error = space.reserve(file, from: startOffset, to: expectedTotal) {
            return abort(.disk(error.message))
        }
        responseReady = true
        body = BodyBuffer(startingAt: startOffset)
        lastDataAt = monotonicNanoseconds()
        if file.isRegular, let writeback = PartFileWriteback(fd: fd, from: startOffset) {
            self.writeback = writeback
            nextWritebackAt = writeback.nextRequestAt
        }
        progressPace.start(at: monotonicNanoseconds())
        emitResponse(acceptsRanges: head.acceptsByteRanges || status == 206)
        return true
    }

    private func abort(_ error: CoreError) -> Bool {
        failure = error
        return false
    }

    private func emitResponse(acceptsRanges: Bool) {
        var response = EngineResponse(
            status: head.status, etag: head.etag, lastModified: head.usableLastModified,
            expectedTotal: expectedTotal, startOffset: startOffset,
            contentDisposition: head.contentDisposition, acceptsRanges: acceptsRanges,
            effectiveURL: effectiveURL, retryAfter: head.retryAfter)
        response.spaceReserved = space.covers(upTo: expectedTotal)
        response.multiplexed = EasyHandleSetup.isMultiplexed(easy)
        loop.emit(.response(id, response))
    }

    // MARK: - Body (the hot path: keep it lean)

    /// Writes a chunk of the body to the part file. Returns `count`, or 0 to abort.
    @inline(__always)
    func receiveBody(_ data: UnsafeRawPointer, _ count: Int) -> Int {
        guard responseReady, failure == nil else { return unexpectedBody() }
        let now = monotonicNanoseconds()
        if speedLimit != 0 {
            if now < paceAllowsAt {
                // curl keeps this chunk and hands it over again once unpaused.
                isThrottled = true
                loop.throttled(self)
                return Int(CURL_WRITEFUNC_PAUSE)
            }
            paceAllowsAt = max(paceAllowsAt, now) &+ UInt64(count) &* 1_000_000_000 / speedLimit
        }
        if let error = space.check(file, writing: count, at: bytesOnDisk, held: body.count) {
            failure = .disk(error.message)
            return 0
        }
        if bodyBytes &+ Int64(count) > bodyLimitBytes {
            failure = request.bodyLimit?.error
            return 0
        }
        if file.isRegular {
            if let code = body.append(data, count, toFile: fd) { return writeFailed(code) }
        } else if let code = writeDirectly(data, count) {
            return writeFailed(code)
        }
        if hasher != nil {
            hasher!.update(bufferPointer: UnsafeRawBufferPointer(start: data, count: count))
        }
        bodyBytes += Int64(count)
        unreportedBytes += Int64(count)
        lastDataAt = now
        if bytesOnDisk >= nextWritebackAt { startWriteback() }
        if progressPace.isDue(at: now) {
            reportProgress()
            if failure != nil { return 0 }
        }
        return count
    }

    private func startWriteback() {
        guard let writeback else { return }
        writeback.request(upTo: body.writtenEnd)
        nextWritebackAt = writeback.nextRequestAt
    }

    /// A device or pipe is written as the pieces come (nothing is held back from a
    /// reader). Returns the `errno` of a failed write; `bodyBytes` then counts what went.
    private func writeDirectly(_ data: UnsafeRawPointer, _ count: Int) -> Int32? {
        var p = data
        var left = count
        while left > 0 {
            let n = write(fd, p, left)
            if n > 0 {
                p += n
                left -= n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                bodyBytes += Int64(count - left)
                return n < 0 ? errno : ENOSPC
            }
        }
        return nil
    }

    /// Writes what `body` holds. Called before the attempt ends (and so before its
    /// file is flushed, closed or read); a write that fails becomes the attempt's
    /// failure when it has none yet, and `bytesOnDisk` then counts what was written.
    /// Returns false when a write failed.
    @discardableResult
    func writeBufferedBody() -> Bool {
        let fd = file.fd // -1 once handed over or closed
        guard fd >= 0, body.count > 0, let code = body.flush(toFile: fd) else { return true }
        _ = writeFailed(code)
        return false
    }

    /// A write of the body failed with `code`: the count is what the file holds (what
    /// was not written is dropped), and the attempt fails with `Disk` (unless it had
    /// failed already).
    private func writeFailed(_ code: Int32) -> Int {
        if file.isRegular {
            bodyBytes = body.writtenEnd - startOffset
            body.discard()
        }
        if failure == nil { failure = .disk(PartFileError(code: code, action: "writing", path: file.path).message) }
        return 0
    }

    private func unexpectedBody() -> Int {
        if failure == nil { failure = .network("The server at \(hostDescription) sent data without a valid response") }
        return 0
    }

    /// For a stalled body: reports bytes that came in since the last event once
    /// the interval is over. Returns when it will be due, while bytes wait.
    func reportProgressIfDue(now: UInt64) -> UInt64? {
        guard unreportedBytes > 0, responseReady else { return nil }
        if let due = progressPace.wait(at: now) { return due }
        reportProgress()
        return nil
    }

    /// Emits the bytes written since the last progress event, if any, after writing
    /// what `body` holds: what a `Progress` counts is in the part file (at most every
    /// 250 ms, so a body that comes slowly or stalls is not held in memory longer). A
    /// write that fails sets `failure` (the caller ends the attempt) and is not
    /// reported as progress.
    func reportProgress() {
        guard writeBufferedBody(), unreportedBytes > 0 else { return }
        let written = unreportedBytes
        unreportedBytes = 0
        loop.emit(.progress(id, bytesWritten: written, totalOnDisk: bytesOnDisk, expected: expectedTotal))
        if let writeback {
            let (mailbox, id, attempt, end, epoch) = (loop.mailbox, id, attempt, bytesOnDisk, syncEpoch)
            writeback.syncIfDue(now: monotonicNanoseconds()) { mailbox.post(.synced(.prefix(end), epoch: epoch), to: id, attempt: attempt) }
        }
    }

    /// Lowercase hex of the hash, when one was asked for.
    func finalDigest() -> String? {
        hasher.map { $0.finalize().map { String(format: "%02x", $0) }.joined() }
    }
}

// libcurl's C callbacks; the context pointer is the CurlTransfer (see its ownership note).

private func curlWriteBody(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                           _ context: UnsafeMutableRawPointer?) -> Int {
    let total = size &* count
    guard let data, let context, total > 0 else { return total }
    return Unmanaged<CurlTransfer>.fromOpaque(context)._withUnsafeGuaranteedRef {
        $0.receiveBody(UnsafeRawPointer(data), total)
    }
}

private func curlHeaderLine(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                            _ context: UnsafeMutableRawPointer?) -> Int {
    let total = size &* count
    guard let data, let context else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
    return transfer.receiveHeaderLine(UnsafeRawBufferPointer(start: data, count: total)) ? total : 0
}
