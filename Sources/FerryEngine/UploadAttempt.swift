import CCurl
import FerryCore
import Foundation

/// One attempt of an upload: the file streamed from the caller's descriptor by
/// libcurl's read callback (PUT or POST raw body, or one part of a multipart/form-data
/// body), the answer kept in memory (first 64 KiB) or saved to `responseDestination`.
///
/// A file on a local disk file system is read in libcurl's read callback, as curl
/// does. One on a FUSE or network file system (`SourceFileSystem`) is read on a queue
/// of the attempt's own, a chunk or two ahead of libcurl, never on the engine thread:
/// the descriptor is the client's, and a FUSE server (a document portal, sshfs, or one
/// written to stall) may not answer a read for as long as it likes, in a wait no signal
/// ends. The engine thread would then hold up every other transfer; now only this
/// upload waits (libcurl paused until the chunk is there), and a stop still ends it at
/// once. Its descriptor is then closed on the same queue, after the read in flight.
///
/// Ownership: `EngineLoop.attempts` holds the only strong reference; the easy handle
/// and the mime part carry this object unretained, which is safe because `release()`
/// cleans the handle up (freeing the mime) before the loop drops the object.
final class UploadAttempt: EngineAttempt, PacedHandle {
    /// Bytes of the answer kept when there is no response destination.
    static let keptResponseBytes = 64 * 1024
    /// libcurl's send buffer: fewer read callbacks than its 64 KiB default.
    static let uploadBufferSize = 512 * 1024

    let request: EngineRequest
    let source: EngineUpload
    let attempt: UInt64
    var id: TransferID { request.id }
    unowned let loop: EngineLoop

    var easy: UnsafeMutableRawPointer?
    private var mime: OpaquePointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer: UnsafeMutablePointer<CChar>
    /// Whether its request went out on an HTTP/2 connection.
    private let alpn = ALPNProbe()
    /// Our own duplicate of the caller's descriptor, for this attempt.
    var fd: Int32 = -1
    /// The core was told of the final answer (`emitResponse`).
    private var answerReported = false
    /// Where the answer goes when saved to a file.
    private var responseFile: UploadResponseFile?

    /// Next byte of the file to hand to libcurl (a rewind moves it back).
    var position: Int64 = 0
    /// The file is on a FUSE or network file system: read on `sourceQueue`.
    let readsAhead: Bool
    /// Where this attempt's reads and the closing of its descriptor run (`readsAhead`).
    lazy var sourceQueue = DispatchQueue(label: "org.ferry.engine.upload-source")
    /// Chunks read ahead, in order, from the one holding `position` on.
    var chunks: [(start: Int64, bytes: [UInt8])] = []
    /// A read is on `sourceQueue` (maybe one a rewind made stale).
    var readPending = false
    /// Bumped by a rewind: chunks read before it are dropped.
    var readGeneration = 0
    /// libcurl is paused until the next chunk is there.
    var waitingForData = false
    /// The handle is in the multi (after the first chunk).
    var connected = false
    var unreportedBytes: Int64 = 0
    var progressPace = ProgressPace()
    let pacer: Pacer
    private var reader = ResponseHeadReader()
    private var finalHead: ResponseHead?
    private var keptBody: [UInt8] = []
    var failure: CoreError?
    private var completed = false

    var speedLimit: UInt64 { pacer.limit }
    var paceAllowsAt: UInt64 { pacer.allowsAt }
    var isThrottled = false
    /// When bytes last moved (sent to libcurl, or of the answer); monotonic ns.
    var lastActivityAt: UInt64 = 0

    init(request: EngineRequest, source: EngineUpload, attempt: UInt64, loop: EngineLoop) {
        self.request = request
        self.source = source
        self.attempt = attempt
        self.loop = loop
        self.pacer = Pacer(limit: request.speedLimit)
        self.readsAhead = SourceFileSystem.readsMayStall(device: source.device)
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        releaseHandle()
        closeFiles()
        errorBuffer.deallocate()
    }

    // MARK: - Life

    func begin() {
        fd = fcntl(source.fd, F_DUPFD_CLOEXEC, 0)
        guard fd >= 0 else {
            return finish(.failed(.fileNotFound("The file to upload cannot be read (\(String(cString: strerror(errno))))"), bytesOnDisk: 0))
        }
        if let destination = source.responseDestination {
            switch UploadResponseFile.open(destination, within: request.confinedTo) {
            case .success(let file): responseFile = file
            case .failure(let error): return finish(.failed(error, bytesOnDisk: 0))
            }
        }
        guard let easy = curl_easy_init() else {
            return finish(.failed(.network("Could not set up the upload (libcurl)"), bytesOnDisk: 0))
        }
        self.easy = easy
        let setupError = configure(easy)
        guard setupError == CURLE_OK else {
            let why = String(cString: curl_easy_strerror(setupError))
            return finish(.failed(.network("Could not set up the upload: \(why)"), bytesOnDisk: 0))
        }
        guard readsAhead else {
            if let problem = Self.sourceChange(fd, source) { return finish(.failed(problem, bytesOnDisk: 0)) }
            return connect()
        }
        // The first chunk (and the check that the file is still the one queued) is
        // read before anything is sent: the handle joins the multi when it is back.
        requestRead(at: 0)
    }

    /// The first chunk is read and the file unchanged: the request goes.
    func connect() {
        guard let easy, !connected else { return }
        connected = true
        lastActivityAt = monotonicNanoseconds()
        progressPace.start(at: lastActivityAt)
        let rc = loop.add(easy, owner: self)
        guard rc == CURLM_OK else {
            let why = String(cString: curl_multi_strerror(rc))
            return finish(.failed(.network("Could not start the upload: \(why)"), bytesOnDisk: 0))
        }
    }

    private func configure(_ easy: UnsafeMutableRawPointer) -> CURLcode {
        var setup = EasyHandleSetup(easy: easy)
        // The request's headers hold no Content-Type: the core leaves it out of uploads
        // (`HeaderFields.uploadBody`); the body's type is set below.
        setup.common(request, url: request.url, receiveBuffer: 64 * 1024, cookies: loop.cookies)
        // No "Expect: 100-continue": servers that do not answer it cost a second per attempt.
        setup.addHeader("Expect:")
        let me = Unmanaged.passUnretained(self).toOpaque()
        setup.long(CURLOPT_UPLOAD_BUFFERSIZE, Self.uploadBufferSize)
        switch source.body {
        case .raw:
            setup.addHeader("Content-Type: \(source.contentType ?? "application/octet-stream")")
            if source.method.uppercased() == "POST" {
                setup.long(CURLOPT_POST, 1)
                setup.check(ferry_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(source.size)))
            } else {
                setup.long(CURLOPT_UPLOAD, 1)
                setup.check(ferry_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(source.size)))
                if source.method.uppercased() != "PUT" { setup.string(CURLOPT_CUSTOMREQUEST, source.method) }
            }
            setup.check(ferry_easy_setopt_read_cb(easy, uploadRead))
            setup.pointer(CURLOPT_READDATA, me)
            setup.check(ferry_easy_setopt_seek_cb(easy, uploadSeek))
            setup.pointer(CURLOPT_SEEKDATA, me)
        case .multipart(let field, let fields):
            guard let mime = curl_mime_init(easy) else { return CURLE_OUT_OF_MEMORY }
            self.mime = mime
            for form in fields {
                let part = curl_mime_addpart(mime)
                setup.check(curl_mime_name(part, form.name))
                setup.check(curl_mime_data(part, form.value, -1 /* CURL_ZERO_TERMINATED */))
            }
            let part = curl_mime_addpart(mime)
            setup.check(curl_mime_name(part, field))
            setup.check(curl_mime_filename(part, source.fileName))
            setup.check(curl_mime_type(part, source.contentType ?? "application/octet-stream"))
            setup.check(curl_mime_data_cb(part, curl_off_t(source.size), uploadRead, uploadSeek, nil, me))
            setup.check(ferry_easy_setopt_ptr(easy, CURLOPT_MIMEPOST, UnsafeMutableRawPointer(mime)))
        }
        setup.installHeaders()
        headerList = setup.headerList
        setup.callbacks(owner: me, errorBuffer: errorBuffer, body: uploadResponseBody, header: uploadHeaderLine)
        setup.probeALPN(alpn)
        return setup.error
    }

    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode) {
        let error: CoreError?
        if let failure {
            error = failure
        } else if code != CURLE_OK {
            let context = HandleFailureContext(easy: easy, request: request, url: request.url, errorBuffer: errorBuffer,
                                               expectedTotal: source.size, bytesOnDisk: position, lastLocation: reader.lastLocation,
                                               writtenPath: source.responseDestination ?? source.fileName)
            error = CurlFailure.error(for: code, in: context)
            if finalHead == nil, CurlFailure.isUnansweredStream(alpn, detail: context.curlErrorDetail) {
                loop.emit(.unansweredStream(id))
            }
        } else if finalHead == nil {
            error = .network("\(EasyHandleSetup.hostDescription(request.url)) ended the response before its headers were complete")
        } else if position != source.size {
            error = .network("Only \(position) of \(source.size) bytes of the file were sent")
        } else {
            // Read ahead, the file was found unchanged after its last chunk was read.
            error = readsAhead ? nil : Self.sourceChange(fd, source)
        }
        if let error { return finish(.failed(error, bytesOnDisk: position)) }
        if var file = responseFile {
            responseFile = nil
            // On the disk, under its name, before the upload is reported complete.
            if let failure = file.commit() { return finish(.failed(failure, bytesOnDisk: position)) }
        }
        emitResponse(final: true)
        finish(.succeeded(bytesOnDisk: position, sha256: nil))
    }

    func stop() {
        finish(.stopped(bytesOnDisk: position))
    }

    /// The server took none of the file and sent none of its answer for `request-timeout`
    /// (curl's own low-speed check averages over 5 s and fired up to 3× late). Not while
    /// the speed limit or a read of the file (our side) holds the upload.
    var stallDue: UInt64? {
        guard connected, !completed, !isThrottled, !waitingForData, failure == nil else { return nil }
        return lastActivityAt &+ UInt64(CurlTransfer.stallSeconds(request) * 1_000_000_000)
    }

    func stalled(now: UInt64) {
        finish(.failed(CurlFailure.stalled(host: EasyHandleSetup.hostDescription(request.url), request: request), bytesOnDisk: position))
    }

    func setSpeedLimit(_ bytesPerSecond: UInt64) {
        pacer.setLimit(bytesPerSecond)
    }

    func abandon() {
        completed = true
        releaseHandle()
        closeFiles()
    }

    func jobDone(_ job: AttemptJob) {
        if case .uploadChunk(let chunk) = job { chunkArrived(chunk) }
    }

    func service() {}

    func resumeAfterThrottle() {
        guard let easy, isThrottled else { return }
        isThrottled = false
        lastActivityAt = monotonicNanoseconds() // the wait was ours
        _ = curl_easy_pause(easy, 0 /* CURLPAUSE_CONT */)
    }

    func finish(_ outcome: EngineOutcome) {
        guard !completed else { return }
        completed = true
        if case .failed = outcome, finalHead != nil, !answerReported {
            // Answered with success, and failed before the answer's end (cut, stalled, its
            // file not written): the core hears the answer first (its status: a POST the
            // server took is not sent again; whether it came over HTTP/2, where a lost
            // connection's PUT is sent again at once).
            emitResponse(final: false)
        }
        releaseHandle()
        closeFiles()
        reportProgress()
        loop.attemptEnded(self, outcome)
    }

    private func releaseHandle() {
        guard let easy else { return }
        loop.remove(easy, owner: self)
        loop.cookies.detach(easy)
        curl_easy_cleanup(easy) // frees the mime too
        self.easy = nil
        mime = nil
        if let headerList { curl_slist_free_all(headerList) }
        headerList = nil
    }

    private func closeFiles() {
        if fd >= 0 {
            let fd = self.fd
            self.fd = -1
            // Read ahead: after the read in flight, and off the engine thread (closing a
            // file on FUSE asks its server too).
            if readsAhead { sourceQueue.async { _ = Glibc.close(fd) } } else { Glibc.close(fd) }
        }
        responseFile?.close()
        responseFile = nil
    }

    // MARK: - The answer

    func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastActivityAt = monotonicNanoseconds()
        if finalHead != nil { return true } // trailers
        switch reader.take(bytes) {
        case .more:
            return true
        case .redirect(let location):
            alpn.redirected()
            // curl would take the caller's headers (all but Authorization and Cookie)
            // to another origin along with the file: not followed.
            guard !request.headers.isEmpty, let easy,
                  let next = CrossOriginRedirect.target(of: location, from: EasyHandleSetup.effectiveURL(easy, fallback: request.url))
            else { return true }
            finalHead = reader.head
            emitResponse(final: false)
            failure = .network("The server redirected the upload to another origin (\(EasyHandleSetup.hostDescription(next))); "
                + "it was not followed, as the upload's headers must not go there")
            return false
        case .refusedRedirect(let scheme):
            finalHead = reader.head
            emitResponse(final: false)
            failure = .network("Redirected to a \(scheme): URL; only http and https are allowed")
            return false
        case .final:
            finalHead = reader.head
            let status = reader.head.status
            if status >= 400 {
                emitResponse(final: false)
                failure = .http(status: status, reader.head.statusDescription)
                return false
            }
            if status >= 300 {
                emitResponse(final: false)
                failure = .network("The server answered \(reader.head.statusDescription) to the upload")
                return false
            }
            return true
        }
    }

    func receiveResponseBody(_ data: UnsafeRawPointer, _ count: Int) -> Int {
        lastActivityAt = monotonicNanoseconds()
        guard finalHead != nil, failure == nil else { return 0 }
        if responseFile != nil {
            if let error = responseFile?.write(data, count) {
                failure = error
                return 0
            }
        } else if keptBody.count < Self.keptResponseBytes {
            let take = min(count, Self.keptResponseBytes - keptBody.count)
            keptBody.append(contentsOf: UnsafeRawBufferPointer(start: data, count: take))
        }
        return count
    }

    private func emitResponse(final: Bool) {
        answerReported = true
        let head = finalHead ?? reader.head
        var response = EngineResponse(
            status: head.status, etag: head.etag, lastModified: head.lastModified, expectedTotal: source.size,
            startOffset: 0, contentDisposition: head.contentDisposition, acceptsRanges: false,
            effectiveURL: EasyHandleSetup.effectiveURL(easy, fallback: request.url), retryAfter: head.retryAfter)
        if final && source.responseDestination == nil { response.body = keptBody }
        response.multiplexed = EasyHandleSetup.isMultiplexed(easy)
        loop.emit(.response(id, response))
    }
}

/// A chunk of an upload's file read on its source queue, or why it could not be.
struct UploadChunk: Sendable {
    let generation: Int
    let start: Int64
    let result: Result<[UInt8], CoreError>
}

// libcurl's C callbacks; the context pointer is the UploadAttempt (see its ownership note).

private func uploadRead(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                        _ context: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let context else { return Int(CURL_READFUNC_ABORT) }
    return Unmanaged<UploadAttempt>.fromOpaque(context).takeUnretainedValue().readBody(into: buffer, max: size &* count)
}

private func uploadSeek(_ context: UnsafeMutableRawPointer?, _ offset: curl_off_t, _ origin: Int32) -> Int32 {
    guard let context, origin == SEEK_SET else { return 2 /* CURL_SEEKFUNC_CANTSEEK */ }
    return Unmanaged<UploadAttempt>.fromOpaque(context).takeUnretainedValue().seek(to: Int64(offset))
}

private func uploadHeaderLine(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                              _ context: UnsafeMutableRawPointer?) -> Int {
    let total = size &* count
    guard let data, let context else { return 0 }
    let upload = Unmanaged<UploadAttempt>.fromOpaque(context).takeUnretainedValue()
    return upload.receiveHeaderLine(UnsafeRawBufferPointer(start: data, count: total)) ? total : 0
}

private func uploadResponseBody(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int,
                                _ context: UnsafeMutableRawPointer?) -> Int {
    let total = size &* count
    guard let data, let context, total > 0 else { return total }
    return Unmanaged<UploadAttempt>.fromOpaque(context).takeUnretainedValue().receiveResponseBody(UnsafeRawPointer(data), total)
}
