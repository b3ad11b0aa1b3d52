import CCurl
import Crypto
import FerryCore
import Foundation

/// A download on one connection, once its part file is open: one `CurlTransfer` at a
/// time fetches into the file (a redirect to another origin, or a file that changed on
/// the server, goes on in a new handle within the same attempt), then a file job flushes
/// and closes the file before the attempt reports success. Engine thread only.
///
/// Ownership: `EngineLoop`'s table holds the only strong reference to the attempt, and
/// the attempt the only one to its `CurlTransfer`, whose handle carries the transfer
/// unretained (see `CurlTransfer`); the handle is always cleaned up before either goes.
final class SingleDownload: EngineAttempt {
    private enum Phase {
        /// Resuming with SHA-256: a file job hashes the part file's existing prefix first.
        case hashingPrefix(CurlTransfer)
        /// Its handle is in the multi.
        case running(CurlTransfer)
        /// The body is complete; a file job runs fdatasync and close.
        case flushing(CurlTransfer)
        /// Reported; nothing more happens.
        case ended
    }

    let attempt: UInt64
    let id: TransferID
    private unowned let loop: EngineLoop
    private var phase: Phase

    /// The attempt's transfer, whatever the phase (nil once ended).
    private var transfer: CurlTransfer? {
        switch phase {
        case .hashingPrefix(let t), .running(let t), .flushing(let t): return t
        case .ended: return nil
        }
    }

    private init(transfer: CurlTransfer, loop: EngineLoop) {
        self.id = transfer.id
        self.attempt = transfer.attempt
        self.loop = loop
        self.phase = .hashingPrefix(transfer) // until `begin` adds it
    }

    /// Sets up the attempt's first handle on the part file a file job opened; nil (the
    /// file closed) when libcurl cannot make a handle at all.
    static func make(request: EngineRequest, attempt: UInt64, file: PartFile, resume: Bool,
                     loop: EngineLoop) -> SingleDownload? {
        guard let transfer = CurlTransfer(request: request, attempt: attempt, file: file, resume: resume,
                                          loop: loop, cookies: loop.cookies) else {
            file.close()
            return nil
        }
        return SingleDownload(transfer: transfer, loop: loop)
    }

    /// Starts fetching (after hashing the prefix, when a resumed attempt wants SHA-256).
    func begin(resume: Bool) {
        guard case .hashingPrefix(let transfer) = phase else { return }
        if transfer.setupError != CURLE_OK {
            let why = String(cString: curl_easy_strerror(transfer.setupError))
            return finish(transfer, .failed(.network("Could not set up the download: \(why)"), bytesOnDisk: transfer.bytesOnDisk))
        }
        let request = transfer.request
        guard resume && request.computeSHA256 else {
            if request.computeSHA256 { transfer.hasher = SHA256() }
            return add(transfer)
        }
        let (id, attempt, mailbox) = (id, attempt, loop.mailbox)
        let (path, length, reader) = (request.partPath, request.offset, transfer.file.openForReading())
        loop.fileJobs.async {
            mailbox.post(.prefixHashed(PartFile.hashPrefix(reader, path: path, length: length)), to: id, attempt: attempt)
        }
    }

    private func add(_ transfer: CurlTransfer) {
        guard let easy = transfer.easy else { return }
        let rc = loop.add(easy, owner: self)
        guard rc == CURLM_OK else {
            let why = String(cString: curl_multi_strerror(rc))
            return finish(transfer, .failed(.network("Could not start the download: \(why)"), bytesOnDisk: transfer.bytesOnDisk))
        }
        transfer.inMulti = true
        phase = .running(transfer)
    }

    // MARK: - EngineAttempt

    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode) {
        guard case .running(let transfer) = phase, transfer.easy == easy else { return }
        if let next = transfer.crossOriginRedirect { return follow(transfer, to: next) }
        if let reason = transfer.changedOnServer { return startOver(transfer, because: reason) }
        transfer.writeBufferedBody() // before the count is compared and the file flushed
        let error: CoreError?
        if transfer.alreadyComplete {
            error = nil
        } else if let failure = transfer.failure {
            error = failure
        } else if code != CURLE_OK {
            error = CurlFailure.error(for: code, in: transfer)
            if !transfer.responseReady, CurlFailure.isUnansweredStream(transfer.alpn, detail: transfer.curlErrorDetail) {
                loop.emit(.unansweredStream(id))
            }
        } else if !transfer.responseReady {
            error = .network("\(transfer.hostDescription) ended the response before its headers were complete")
        } else if transfer.expectedTotal >= 0 && transfer.bytesOnDisk != transfer.expectedTotal {
            error = .network("\(transfer.hostDescription) sent \(transfer.bytesOnDisk) of \(transfer.expectedTotal) bytes")
        } else {
            error = nil
        }
        if let error { return finish(transfer, .failed(error, bytesOnDisk: transfer.bytesOnDisk)) }
        // Complete: flush and close off the engine thread, then report (`jobDone(.flushed)`).
        transfer.releaseHandle()
        phase = .flushing(transfer)
        loop.emit(.connectionsFreed(id)) // the next transfer need not wait for the sync
        let (id, attempt, mailbox) = (id, attempt, loop.mailbox)
        let (fd, path, isRegular) = (transfer.file.handOver(), transfer.file.path, transfer.file.isRegular)
        let writebackFD = transfer.handOverWriteback()
        loop.fileJobs.async {
            PartFileWriteback.close(afterQueuedWriteback: writebackFD)
            mailbox.post(.flushed(PartFile.flushAndClose(fd: fd, path: path, isRegular: isRegular)), to: id, attempt: attempt)
        }
    }

    func jobDone(_ job: AttemptJob) {
        switch (job, phase) {
        case (.prefixHashed(.success(let hasher)), .hashingPrefix(let transfer)):
            transfer.hasher = hasher
            add(transfer)
        case (.prefixHashed(.failure(let error)), .hashingPrefix(let transfer)):
            finish(transfer, .failed(.disk(error.message), bytesOnDisk: transfer.bytesOnDisk))
        case (.flushed(let error?), .flushing(let transfer)):
            complete(transfer, .failed(.disk(error.message), bytesOnDisk: transfer.bytesOnDisk))
        case (.flushed(nil), .flushing(let transfer)):
            complete(transfer, .succeeded(bytesOnDisk: transfer.bytesOnDisk, sha256: transfer.finalDigest()))
        case (.synced(let part, let epoch), .running(let transfer)) where epoch == transfer.syncEpoch,
             (.synced(let part, let epoch), .flushing(let transfer)) where epoch == transfer.syncEpoch:
            loop.emit(.durable(id, part))
        default:
            break // not this attempt's job, or a phase it no longer is in
        }
    }

    func stop() {
        switch phase {
        case .hashingPrefix(let transfer), .running(let transfer):
            finish(transfer, .stopped(bytesOnDisk: transfer.bytesOnDisk))
        case .flushing, .ended:
            break // the flush reports
        }
    }

    func setSpeedLimit(_ bytesPerSecond: UInt64) {
        transfer?.setSpeedLimit(bytesPerSecond) // a lifted limit takes effect in the loop's throttle pass
    }

    func reportProgressIfDue(now: UInt64) -> UInt64? {
        transfer?.reportProgressIfDue(now: now)
    }

    var stallDue: UInt64? {
        guard case .running(let transfer) = phase else { return nil }
        // Bytes it holds could not be written (a progress report found it): due at once.
        if transfer.failure != nil, transfer.responseReady { return 0 }
        return transfer.stallDue
    }

    func stalled(now: UInt64) {
        guard case .running(let transfer) = phase else { return }
        let error = transfer.failure ?? CurlFailure.stalled(transfer)
        finish(transfer, .failed(error, bytesOnDisk: transfer.bytesOnDisk))
    }

    func abandon() {
        switch phase {
        case .hashingPrefix(let transfer), .running(let transfer):
            transfer.releaseHandle()
            transfer.writeBufferedBody()
            transfer.file.releaseReservation()
            transfer.file.close()
        case .flushing, .ended:
            break // the flush job owns the file
        }
        phase = .ended
    }

    func service() {}

    // MARK: - Going on in a new handle

    /// Follows a redirect to another origin in a new handle that sends none of the
    /// caller's headers (an API key or a token stays with the origin it was meant for);
    /// same part file, same range, same attempt.
    private func follow(_ old: CurlTransfer, to url: String) {
        let left = old.redirectsLeft - old.redirectCount - 1
        old.releaseHandle()
        var request = old.request
        request.url = url
        request.headers = []
        guard left >= 0 else {
            let host = URLComponents(string: old.request.url)?.host ?? "the server"
            return finish(old, .failed(.tooManyRedirects("More than 10 redirects, starting at \(host)"), bytesOnDisk: old.bytesOnDisk))
        }
        loop.debug(id, "redirect to another origin, followed without the caller's headers")
        replace(old, request: request, resume: old.sentRange, redirectsLeft: left, hasher: old.hasher,
                unusable: "Could not set up the redirected download (libcurl)", bytesOnDisk: old.bytesOnDisk)
    }

    /// The range the server sent is of a changed file (`CurlTransfer.changedOnServer`):
    /// the same attempt fetches the whole file in a new handle, without a range, into
    /// the part file cut to 0 (nothing of the old file is kept, nothing of the new one
    /// was written).
    private func startOver(_ old: CurlTransfer, because reason: String) {
        old.releaseHandle()
        loop.log(id, "the file changed on the server (\(reason)); starting over")
        var request = old.request
        request.offset = 0
        request.ifRange = nil
        request.segments = nil
        request.knownTotal = -1
        if let error = old.file.truncate(to: 0) {
            return finish(old, .failed(.disk(error.message), bytesOnDisk: old.bytesOnDisk))
        }
        replace(old, request: request, resume: false, redirectsLeft: old.redirectsLeft,
                hasher: request.computeSHA256 ? SHA256() : nil,
                unusable: "Could not set up the download again (libcurl)", bytesOnDisk: 0)
    }

    /// Goes on in a new handle for `request` (same part file, same attempt, `old`'s
    /// handle already released); ends the attempt if curl cannot set one up.
    private func replace(_ old: CurlTransfer, request: EngineRequest, resume: Bool, redirectsLeft: Int, hasher: SHA256?,
                         unusable: String, bytesOnDisk: Int64) {
        guard let next = CurlTransfer(request: request, attempt: attempt, file: old.file, resume: resume,
                                      loop: loop, cookies: loop.cookies, redirectsLeft: redirectsLeft),
              next.setupError == CURLE_OK else {
            return finish(old, .failed(.network(unusable), bytesOnDisk: bytesOnDisk))
        }
        next.hasher = hasher
        loop.unthrottle(old)
        add(next)
    }

    // MARK: - Ending

    /// Ends an attempt that is not flushing: handle gone, the body's held bytes written,
    /// file closed, events out. The outcome is read after that write, so the bytes it
    /// counts are those the file holds.
    private func finish(_ transfer: CurlTransfer, _ outcome: @autoclosure () -> EngineOutcome) {
        transfer.releaseHandle()
        transfer.writeBufferedBody()
        let outcome = outcome()
        transfer.file.releaseReservation()
        if case .failed(_, 0) = outcome { transfer.file.removeIfEmpty() }
        transfer.file.close()
        complete(transfer, outcome)
    }

    private func complete(_ transfer: CurlTransfer, _ outcome: EngineOutcome) {
        phase = .ended
        loop.unthrottle(transfer)
        transfer.reportProgress()
        loop.attemptEnded(self, outcome)
    }
}
