import CCurl
import FerryCore
import Foundation

/// The body of an upload: the file read (in libcurl's read callback, or ahead on the
/// attempt's source queue), checked to be the one queued, paced, and its progress.
extension UploadAttempt {
    // MARK: - The file

    /// Why the file behind `fd` is no longer the one the upload was asked for, or nil.
    /// On `sourceQueue`.
    static func sourceChange(_ fd: Int32, _ source: EngineUpload) -> CoreError? {
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
    private static func readChunk(_ fd: Int32, at start: Int64, length: Int, of source: EngineUpload) -> Result<[UInt8], CoreError> {
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
    func requestRead(at start: Int64) {
        guard !readPending, failure == nil, fd >= 0 else { return }
        readPending = true
        let length = Int(min(Int64(Self.uploadBufferSize), max(0, source.size - start)))
        let (fd, source, id, attempt, generation, mailbox) = (self.fd, self.source, self.id, self.attempt, readGeneration, loop.mailbox)
        sourceQueue.async {
            let result = Self.readChunk(fd, at: start, length: length, of: source)
            mailbox.post(.uploadChunk(UploadChunk(generation: generation, start: start, result: result)), to: id, attempt: attempt)
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
    func chunkArrived(_ chunk: UploadChunk) {
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
        if progressPace.isDue(at: now, anyway: position == source.size) { reportProgress() }
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
        if let due = progressPace.wait(at: now) { return due }
        reportProgress()
        return nil
    }

    func reportProgress() {
        guard unreportedBytes > 0 else { return }
        let sent = unreportedBytes
        unreportedBytes = 0
        loop.emit(.progress(id, bytesWritten: sent, totalOnDisk: position, expected: source.size))
    }
}
