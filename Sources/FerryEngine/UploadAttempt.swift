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
    private unowned let loop: EngineLoop

    private var easy: UnsafeMutableRawPointer?
    private var mime: OpaquePointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer: UnsafeMutablePointer<CChar>
    /// Our own duplicate of the caller's descriptor, for this attempt.
    private var fd: Int32 = -1
    /// Where the answer goes when saved to a file.
    private var responseFD: Int32 = -1
    /// `response-destination` was emptied for this answer (`claimResponseFile`).
    private var responseFileClaimed = false

    /// Next byte of the file to hand to libcurl (a rewind moves it back).
    private var position: Int64 = 0
    /// The file is on a FUSE or network file system: read on `sourceQueue`.
    private let readsAhead: Bool
    /// Where this attempt's reads and the closing of its descriptor run (`readsAhead`).
    private lazy var sourceQueue = DispatchQueue(label: "org.ferry.engine.upload-source")
    /// Chunks read ahead, in order, from the one holding `position` on.
    private var chunks: [(start: Int64, bytes: [UInt8])] = []
    /// A read is on `sourceQueue` (maybe one a rewind made stale).
    private var readPending = false
    /// Bumped by a rewind: chunks read before it are dropped.
    private var readGeneration = 0
    /// libcurl is paused until the next chunk is there.
    private var waitingForData = false
    /// The handle is in the multi (after the first chunk).
    private var connected = false
    private var unreportedBytes: Int64 = 0
    private var nextProgressAt: UInt64 = 0
    private let pacer: Pacer
    private var reader = ResponseHeadReader()
    private var finalHead: ResponseHead?
    private var keptBody: [UInt8] = []
    private var failure: FerryError?
    private var completed = false

    var speedLimit: UInt64 { pacer.limit }
    var paceAllowsAt: UInt64 { pacer.allowsAt }
    private var isThrottled = false
    /// When bytes last moved (sent to libcurl, or of the answer); monotonic ns.
    private var lastActivityAt: UInt64 = 0

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
            // O_NONBLOCK, then only a regular file is kept: a FIFO put there (read by
            // nobody, or by someone who never reads) must not hold up the engine thread.
            // Emptied only once a successful answer comes (`claimResponseFile`): an
            // upload that fails before keeps what the file held.
            // A sandboxed application's file is opened relative to its folder as opened
            // and checked to be inside the app's directory: a folder on the way swapped
            // for a link since the call sends the answer nowhere else.
            guard let (folder, name) = SandboxArea.place(of: destination, within: request.confinedTo) else {
                return finish(.failed(.disk("the response-destination '\(destination)' is no longer inside the application's directory '\(request.confinedTo?.root ?? "")/'; the answer was not written"), bytesOnDisk: 0))
            }
            responseFD = name.withCString {
                openat(folder, $0, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0o644)
            }
            SandboxArea.release(folder)
            guard responseFD >= 0 else {
                let error = PartFileError(code: errno, action: "opening", path: destination)
                return finish(.failed(.disk(error.message), bytesOnDisk: 0))
            }
            var st = stat()
            guard fstat(responseFD, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
                return finish(.failed(.disk("the response-destination '\(destination)' is not a regular file; the answer was not written there"), bytesOnDisk: 0))
            }
            guard DescriptorMode.setNonBlocking(responseFD, false) else {
                let error = PartFileError(code: errno, action: "opening", path: destination)
                return finish(.failed(.disk(error.message), bytesOnDisk: 0))
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
    private func connect() {
        guard let easy, !connected else { return }
        connected = true
        lastActivityAt = monotonicNanoseconds()
        nextProgressAt = lastActivityAt + CurlTransfer.progressInterval
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
        return setup.error
    }

    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode) {
        let error: FerryError?
        if let failure {
            error = failure
        } else if code != CURLE_OK {
            let context = HandleFailureContext(easy: easy, request: request, url: request.url, errorBuffer: errorBuffer,
                                               expectedTotal: source.size, bytesOnDisk: position, lastLocation: reader.lastLocation,
                                               writtenPath: source.responseDestination ?? source.fileName)
            error = CurlFailure.error(for: code, in: context)
        } else if finalHead == nil {
            error = .network("\(EasyHandleSetup.hostDescription(request.url)) ended the response before its headers were complete")
        } else if position != source.size {
            error = .network("Only \(position) of \(source.size) bytes of the file were sent")
        } else {
            // Read ahead, the file was found unchanged after its last chunk was read.
            error = readsAhead ? nil : Self.sourceChange(fd, source)
        }
        if let error { return finish(.failed(error, bytesOnDisk: position)) }
        if responseFD >= 0 {
            if let failure = claimResponseFile() { return finish(.failed(failure, bytesOnDisk: position)) } // an empty answer
            let rc = Glibc.close(responseFD)
            responseFD = -1
            if rc != 0 && errno != EINTR, let path = source.responseDestination {
                return finish(.failed(.disk(PartFileError(code: errno, action: "closing", path: path).message), bytesOnDisk: position))
            }
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

    private func finish(_ outcome: EngineOutcome) {
        guard !completed else { return }
        completed = true
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
        if responseFD >= 0 { Glibc.close(responseFD); responseFD = -1 }
    }

    // MARK: - The file

    /// Why the file behind `fd` is no longer the one the upload was asked for, or nil.
    /// On `sourceQueue`.
    private static func sourceChange(_ fd: Int32, _ source: EngineUpload) -> FerryError? {
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            return .fileNotFound("The file to upload cannot be read any more (\(String(cString: strerror(errno))))")
        }
        let size = Int64(st.st_size)
        if size != source.size {
            return .fileNotFound("\(source.fileName) changed while waiting to be uploaded: it is now \(size) bytes, not \(source.size); nothing more was sent")
        }
        if EngineUpload.nanoseconds(st.st_mtim) != source.modificationTime {
            return .fileNotFound("\(source.fileName) was modified after the upload was queued; nothing more was sent")
        }
        return nil
    }

    /// Reads `length` bytes at `start`, then checks the file: bytes read from a file
    /// that changed are never handed on. On `sourceQueue`; may block for as long as
    /// the file system takes.
    private static func readChunk(_ fd: Int32, at start: Int64, length: Int, of source: EngineUpload) -> Result<[UInt8], FerryError> {
        var readError: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
            count = 0
            while count < length {
                let n = pread(fd, buffer.baseAddress! + count, length - count, off_t(start + Int64(count)))
                if n > 0 { count += n; continue }
                if n < 0 && errno == EINTR { continue }
                if n < 0 { readError = errno }
                break
            }
        }
        if readError != 0 {
            return .failure(.fileNotFound("Reading \(source.fileName) failed: \(String(cString: strerror(readError)))"))
        }
        if let change = sourceChange(fd, source) { return .failure(change) }
        guard bytes.count == length else {
            return .failure(.fileNotFound("\(source.fileName) became shorter while it was uploaded; nothing more was sent"))
        }
        return .success(bytes)
    }

    /// Puts a read of the chunk at `start` on `sourceQueue` (one at a time).
    private func requestRead(at start: Int64) {
        guard !readPending, failure == nil, fd >= 0 else { return }
        readPending = true
        let length = Int(min(Int64(Self.uploadBufferSize), max(0, source.size - start)))
        let (fd, source, id, attempt, generation, loop) = (self.fd, self.source, self.id, self.attempt, readGeneration, self.loop)
        sourceQueue.async {
            let result = Self.readChunk(fd, at: start, length: length, of: source)
            loop.post(.uploadChunk(UploadChunk(generation: generation, start: start, result: result)), to: id, attempt: attempt)
        }
    }

    /// The end of what is read ahead (`position` when nothing is).
    private var readAheadEnd: Int64 { chunks.last.map { $0.start + Int64($0.bytes.count) } ?? position }

    /// Chunks read ahead of what libcurl has taken: one is being read while libcurl
    /// sends the other, so the sending seldom waits for the file.
    static let chunksAhead = 2

    /// Keeps `chunksAhead` chunks ahead of what libcurl has taken.
    private func readAhead() {
        let end = readAheadEnd
        guard end < source.size, end - position < Int64(Self.chunksAhead * Self.uploadBufferSize) else { return }
        requestRead(at: end)
    }

    /// A read came back (engine thread).
    private func chunkArrived(_ chunk: UploadChunk) {
        readPending = false
        if chunk.generation == readGeneration {
            switch chunk.result {
            case .success(let bytes):
                if chunk.start == readAheadEnd && !bytes.isEmpty { chunks.append((chunk.start, bytes)) }
            case .failure(let error):
                failure = error
            }
        }
        readAhead()
        guard connected else {
            if let failure { return finish(.failed(failure, bytesOnDisk: 0)) }
            return connect()
        }
        if waitingForData, let easy {
            waitingForData = false
            lastActivityAt = monotonicNanoseconds() // the wait was ours
            _ = curl_easy_pause(easy, 0 /* CURLPAUSE_CONT */)
        }
    }

    /// Fills libcurl's buffer from the file. Returns the byte count, 0 at the end, or
    /// CURL_READFUNC_PAUSE (no chunk read ahead yet, or the speed limit) /
    /// CURL_READFUNC_ABORT (the file changed or could not be read). Called only once
    /// the handle is in the multi, after the file was found unchanged.
    func readBody(into buffer: UnsafeMutableRawPointer, max: Int) -> Int {
        guard failure == nil else { return Int(CURL_READFUNC_ABORT) }
        guard position < source.size else { return 0 }
        guard readsAhead else { return readInPlace(into: buffer, max: max) }
        while let first = chunks.first, first.start + Int64(first.bytes.count) <= position { chunks.removeFirst() }
        guard let first = chunks.first, first.start <= position, max > 0 else {
            requestRead(at: position)
            waitingForData = true
            return Int(CURL_READFUNC_PAUSE)
        }
        let offset = Int(position - first.start)
        let n = min(max, first.bytes.count - offset, pacedChunk)
        let now = monotonicNanoseconds()
        guard admit(n, now: now) else { return Int(CURL_READFUNC_PAUSE) }
        _ = first.bytes.withUnsafeBytes { memcpy(buffer, $0.baseAddress! + offset, n) }
        handedOn(n, now: now)
        readAhead()
        return n
    }

    /// `readBody` for a file on a local disk: read here, then checked (bytes read from a
    /// file that changed are never handed on).
    private func readInPlace(into buffer: UnsafeMutableRawPointer, max: Int) -> Int {
        let want = Int(min(Int64(max), source.size - position, Int64(pacedChunk)))
        let now = monotonicNanoseconds()
        guard admit(want, now: now) else { return Int(CURL_READFUNC_PAUSE) }
        var n: Int
        repeat { n = pread(fd, buffer, want, off_t(position)) } while n < 0 && errno == EINTR
        if n < 0 {
            failure = .fileNotFound("Reading \(source.fileName) failed: \(String(cString: strerror(errno)))")
            return Int(CURL_READFUNC_ABORT)
        }
        if let change = Self.sourceChange(fd, source) {
            failure = change
            return Int(CURL_READFUNC_ABORT)
        }
        if n == 0 {
            failure = .fileNotFound("\(source.fileName) became shorter while it was uploaded; nothing more was sent")
            return Int(CURL_READFUNC_ABORT)
        }
        handedOn(n, now: now)
        return n
    }

    /// The most one read hands libcurl: under a speed limit a quarter second's worth
    /// (at least 1 KiB), so the limit holds from the first bytes on, as downloads' does;
    /// else all libcurl asks for. (One whole 512 KiB buffer at once would let a small
    /// upload through unlimited.)
    private var pacedChunk: Int {
        let limit = pacer.limit
        return limit == 0 ? Int.max : Int(clamping: Swift.max(1024, limit / 4))
    }

    /// Books `count` bytes against the speed limit; false (libcurl is paused until the
    /// loop lets it go on) when they must wait.
    private func admit(_ count: Int, now: UInt64) -> Bool {
        guard pacer.admit(count, now: now) else {
            isThrottled = true
            loop.throttled(self)
            return false
        }
        return true
    }

    /// `count` bytes of the file went to libcurl.
    private func handedOn(_ count: Int, now: UInt64) {
        lastActivityAt = now
        position += Int64(count)
        unreportedBytes += Int64(count)
        // The last bytes are reported at once: the server's answer, which can come only
        // after them, must not overtake their progress.
        if now >= nextProgressAt || position == source.size {
            nextProgressAt = now + CurlTransfer.progressInterval
            reportProgress()
        }
    }

    /// libcurl rewinds to resend the body (after a redirect or an auth challenge).
    func seek(to offset: Int64) -> Int32 {
        guard offset >= 0, offset <= source.size else { return 1 /* CURL_SEEKFUNC_FAIL */ }
        position = offset
        chunks.removeAll()
        readGeneration += 1
        return 0 // CURL_SEEKFUNC_OK
    }

    func reportProgressIfDue(now: UInt64) -> UInt64? {
        guard unreportedBytes > 0 else { return nil }
        if now >= nextProgressAt {
            nextProgressAt = now + CurlTransfer.progressInterval
            reportProgress()
            return nil
        }
        return nextProgressAt
    }

    private func reportProgress() {
        guard unreportedBytes > 0 else { return }
        let sent = unreportedBytes
        unreportedBytes = 0
        loop.emit(.progress(id, bytesWritten: sent, totalOnDisk: position, expected: source.size))
    }

    // MARK: - The answer

    func receiveHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        lastActivityAt = monotonicNanoseconds()
        if finalHead != nil { return true } // trailers
        switch reader.take(bytes) {
        case .more:
            return true
        case .redirect(let location):
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
        if responseFD >= 0 {
            if let error = claimResponseFile() {
                failure = error
                return 0
            }
            var p = data
            var left = count
            while left > 0 {
                let n = Glibc.write(responseFD, p, left)
                if n > 0 { p += n; left -= n; continue }
                if n < 0 && errno == EINTR { continue }
                let path = source.responseDestination ?? ""
                failure = .disk(PartFileError(code: n < 0 ? errno : ENOSPC, action: "writing", path: path).message)
                return 0
            }
        } else if keptBody.count < Self.keptResponseBytes {
            let take = min(count, Self.keptResponseBytes - keptBody.count)
            keptBody.append(contentsOf: UnsafeRawBufferPointer(start: data, count: take))
        }
        return count
    }

    /// Empties `response-destination` once, when the successful answer's body begins
    /// (or the answer ends without one): the old contents go only for the new answer.
    private func claimResponseFile() -> FerryError? {
        guard !responseFileClaimed else { return nil }
        responseFileClaimed = true
        guard ftruncate(responseFD, 0) == 0 else {
            return .disk(PartFileError(code: errno, action: "writing", path: source.responseDestination ?? "").message)
        }
        return nil
    }

    private func emitResponse(final: Bool) {
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
    let result: Result<[UInt8], FerryError>
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
