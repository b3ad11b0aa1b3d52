import CCurl
import Crypto
import FerryCore
import Foundation
import Logging

/// The engine thread's body: owns the multi handle and every attempt, runs
/// poll -> perform -> collect finished, and applies commands from the inbox.
/// Everything here runs on the engine thread (background file jobs only post back).
final class EngineLoop {
    /// Idle wait; curl_multi_poll returns sooner for curl's own timers and on wakeup.
    private static let pollTimeoutMs: Int32 = 60_000

    fileprivate let multi: UnsafeMutableRawPointer
    fileprivate let inbox: EngineInbox
    private let logger: Logger
    private var transfers: [TransferID: CurlTransfer] = [:]
    /// Downloads whose part file a file job is opening (on one connection or several).
    private var opening: [TransferID: OpeningPart] = [:]
    /// Uploads and segmented downloads (single-connection downloads are in `transfers`).
    private var otherAttempts: [TransferID: EngineAttempt] = [:]
    /// Attempts whose callbacks asked for work outside libcurl's callbacks.
    fileprivate var needingService: [EngineAttempt] = []
    /// The owner of each easy handle of `otherAttempts`.
    private var handleOwners: [UnsafeMutableRawPointer: EngineAttempt] = [:]
    /// Handles paused by their speed limit, to resume when their pace allows.
    private var throttledTransfers: [ObjectIdentifier: PacedHandle] = [:]
    fileprivate var attempts: UInt64 = 0
    /// One curl share per cookie jar.
    let cookies = CookieJars()
    /// Opening part files, fdatasync and prefix hashing: slow disk work kept off the engine thread.
    let fileJobs = FileJobQueues(label: "org.ferry.engine.files")

    init(multi: UnsafeMutableRawPointer, inbox: EngineInbox, logger: Logger) {
        self.multi = multi
        self.inbox = inbox
        self.logger = logger
    }

    func run() {
        var running: Int32 = 0
        var ready: Int32 = 0
        loop: while true {
            let commands = inbox.take()
            let stoppedBeforeTaken = startsStoppedLater(in: commands)
            for (i, command) in commands.enumerated() {
                if case .shutdown = command { break loop }
                if case .start(let request) = command, stoppedBeforeTaken.contains(i) {
                    // Stopped before it began: its part file is as it was. The stop that
                    // follows finds no attempt and does nothing.
                    emit(.completed(request.id, .stopped(bytesOnDisk: request.offset)))
                    continue
                }
                apply(command)
            }
            curl_multi_perform(multi, &running)
            collectFinished()
            cookies.saveChanged()
            serviceAttempts()
            let timeout = min(resumeThrottledTransfers(), reportStalledProgress())
            curl_multi_poll(multi, nil, 0, timeout, &ready)
        }
        for transfer in transfers.values {
            transfer.releaseHandle(from: multi)
            if transfer.phase != .flushing {
                transfer.writeBufferedBody()
                transfer.file.releaseReservation()
                transfer.file.close()
            }
        }
        for attempt in otherAttempts.values { attempt.abandon() }
        transfers.removeAll()
        opening.removeAll() // their files close when the jobs' results are dropped
        otherAttempts.removeAll()
        throttledTransfers.removeAll()
        cookies.cleanUp() // after every handle: shares in use cannot be freed
        curl_multi_cleanup(multi)
    }

    /// The indices of the starts in `commands` that a later stop of the same transfer
    /// (before any other start of it) already cancels: both came while the thread was
    /// busy. Such a start opens nothing, so it creates no `.part` file that the core
    /// would have to delete again after it has reported the transfer cancelled.
    private func startsStoppedLater(in commands: [EngineCommand]) -> Set<Int> {
        var stopped = Set<TransferID>()
        var starts = Set<Int>()
        for (i, command) in commands.enumerated().reversed() {
            switch command {
            case .stop(let id): stopped.insert(id)
            case .start(let request): if stopped.remove(request.id) != nil { starts.insert(i) }
            default: break
            }
        }
        return starts
    }

    /// Progress for transfers whose data stopped mid-interval (the write callback
    /// reports only when data comes), and the end of those whose body brought nothing
    /// for `request-timeout`; returns how long the poll may sleep.
    private func reportStalledProgress() -> Int32 {
        let now = monotonicNanoseconds()
        var timeout = Self.pollTimeoutMs
        var stalled: [CurlTransfer] = []
        var unwritten: [CurlTransfer] = []
        for transfer in transfers.values {
            if let due = transfer.reportProgressIfDue(now: now) {
                timeout = min(timeout, Int32(clamping: (due - now + 999_999) / 1_000_000))
            }
            if transfer.phase == .running, transfer.failure != nil, transfer.responseReady {
                unwritten.append(transfer) // its held bytes could not be written (progress writes them)
                continue
            }
            if let due = transfer.stallDue {
                if due <= now {
                    stalled.append(transfer)
                } else {
                    timeout = min(timeout, Int32(clamping: (due - now + 999_999) / 1_000_000))
                }
            }
        }
        for transfer in stalled {
            finish(transfer, .failed(CurlFailure.stalled(transfer), bytesOnDisk: transfer.bytesOnDisk))
        }
        for transfer in unwritten {
            if let failure = transfer.failure { finish(transfer, .failed(failure, bytesOnDisk: transfer.bytesOnDisk)) }
        }
        var stalledAttempts: [EngineAttempt] = []
        for attempt in otherAttempts.values {
            if let due = attempt.reportProgressIfDue(now: now) {
                timeout = min(timeout, Int32(clamping: (due - now + 999_999) / 1_000_000))
            }
            if let due = attempt.stallDue {
                if due <= now {
                    stalledAttempts.append(attempt)
                } else {
                    timeout = min(timeout, Int32(clamping: (due - now + 999_999) / 1_000_000))
                }
            }
        }
        for attempt in stalledAttempts { attempt.stalled(now: now) }
        // A report above may have found a failure (held bytes that could not be
        // written): the attempt ends now, not after the next wait.
        return needingService.isEmpty ? timeout : 0
    }

    /// Called from a write callback that paused its transfer for the speed limit.
    func throttled(_ handle: PacedHandle) {
        throttledTransfers[ObjectIdentifier(handle)] = handle
    }

    /// Forgets a handle that is going away.
    func unthrottle(_ handle: PacedHandle) {
        throttledTransfers[ObjectIdentifier(handle)] = nil
    }

    /// Unpauses the throttled transfers whose time has come; returns how long the
    /// poll may sleep before the next one is due.
    private func resumeThrottledTransfers() -> Int32 {
        guard !throttledTransfers.isEmpty else { return Self.pollTimeoutMs }
        let now = monotonicNanoseconds()
        for (key, transfer) in throttledTransfers where transfer.speedLimit == 0 || transfer.paceAllowsAt <= now {
            throttledTransfers[key] = nil
            transfer.resumeAfterThrottle() // may deliver a chunk and throttle again
        }
        var timeout = Self.pollTimeoutMs
        for transfer in throttledTransfers.values {
            let wait = transfer.paceAllowsAt > now ? (transfer.paceAllowsAt - now + 999_999) / 1_000_000 : 0
            timeout = min(timeout, Int32(clamping: wait))
        }
        return timeout
    }

    /// Delivers an event (dropped once the engine is shutting down).
    func emit(_ event: EngineEvent) {
        inbox.currentHandler?(event)
    }

    // MARK: - Commands

    private func apply(_ command: EngineCommand) {
        switch command {
        case .start(let request):
            start(request)
        case .stop(let id):
            if let attempt = otherAttempts[id] { return attempt.stop() }
            if opening[id] != nil { opening[id]?.stopped = true; return } // reported once the file job is back
            guard let transfer = transfers[id], transfer.phase != .flushing else { return }
            finish(transfer, .stopped(bytesOnDisk: transfer.bytesOnDisk))
        case .setSpeedLimit(let id, let bytesPerSecond):
            otherAttempts[id]?.setSpeedLimit(bytesPerSecond)
            transfers[id]?.setSpeedLimit(bytesPerSecond) // a lifted limit takes effect in resumeThrottledTransfers
            opening[id]?.request.speedLimit = bytesPerSecond
        case .partOpened(let id, let attempt, let result):
            partOpened(id, attempt: attempt, result)
        case .segmentedPartOpened(let id, let attempt, let result):
            segmentedPartOpened(id, attempt: attempt, result)
        case .attemptFileJob(let id, let attempt, let result):
            guard let owner = otherAttempts[id], owner.attempt == attempt else { return }
            owner.fileJobDone(result)
        case .discardCookies(let jar):
            cookies.discard(jar)
        case .uploadChunk(let id, let attempt, let chunk):
            guard let owner = otherAttempts[id] as? UploadAttempt, owner.attempt == attempt else { return }
            owner.chunkArrived(chunk)
        case .attemptHashed(let id, let attempt, let epoch, let upTo, let result):
            guard let owner = otherAttempts[id] as? SegmentedDownload, owner.attempt == attempt else { return }
            owner.prefixHashed(epoch: epoch, upTo: upTo, result)
        case .prefixHashed(let id, let attempt, let result):
            guard let transfer = transfers[id], transfer.attempt == attempt, transfer.phase == .hashingPrefix else { return }
            switch result {
            case .success(let hasher):
                transfer.hasher = hasher
                add(transfer)
            case .failure(let error):
                finish(transfer, .failed(.disk(error.message), bytesOnDisk: transfer.bytesOnDisk))
            }
        case .flushed(let id, let attempt, let error):
            guard let transfer = transfers[id], transfer.attempt == attempt, transfer.phase == .flushing else { return }
            if let error {
                complete(transfer, .failed(.disk(error.message), bytesOnDisk: transfer.bytesOnDisk))
            } else {
                complete(transfer, .succeeded(bytesOnDisk: transfer.bytesOnDisk, sha256: transfer.finalDigest()))
            }
        case .shutdown:
            break // handled by run()
        }
    }

    private func start(_ request: EngineRequest) {
        guard transfers[request.id] == nil, otherAttempts[request.id] == nil, opening[request.id] == nil else {
            logger.warning("start ignored: transfer \(request.id) already has a running attempt")
            return
        }
        if let kind = startOtherAttempt(request) {
            logger.debug("transfer \(request.id): attempt \(attempts) starts (\(kind))")
            return
        }
        // The part file is opened (and cut, unless the attempt resumes) by a file job:
        // on ext4 without a journal, finding a new inode skips every one deleted in the
        // last minute, which can take a millisecond, and the network of every other
        // transfer would wait for it here.
        attempts += 1
        let (attempt, inbox) = (attempts, self.inbox)
        opening[request.id] = OpeningPart(request: request, attempt: attempt)
        fileJobs.async {
            inbox.post(.partOpened(request.id, attempt: attempt, OpenedPart.open(for: request)))
        }
    }

    /// A file job opened (or could not open) the part file of a starting attempt.
    private func partOpened(_ id: TransferID, attempt: UInt64, _ result: Result<OpenedPart, OpenedPart.Failure>) {
        guard let pending = opening[id], pending.attempt == attempt else { return } // its file closes with it
        opening[id] = nil
        let request = pending.request
        let opened: OpenedPart
        switch result {
        case .success(let part): opened = part
        case .failure(let failure):
            return endOpening(id, failed: failure.error, bytesOnDisk: failure.bytesOnDisk, stopped: pending.stopped)
        }
        let resume = opened.resume
        let kept = resume ? request.offset : 0 // bytes of the part file this attempt keeps
        if pending.stopped {
            return endStoppedOpening(id, file: opened.file, madeFresh: !resume, bytesKept: kept)
        }
        if request.offset > 0 && !resume {
            logger.info("transfer \(id): cannot resume at \(request.offset) (no validator or short part file); starting over")
        }
        let file = opened.file
        guard let transfer = CurlTransfer(request: request, attempt: attempt, file: file, resume: resume, loop: self, cookies: cookies) else {
            file.close()
            emit(.completed(id, .failed(.network("Could not set up the download (libcurl)"), bytesOnDisk: kept)))
            return
        }
        transfers[id] = transfer
        if transfer.setupError != CURLE_OK {
            let why = String(cString: curl_easy_strerror(transfer.setupError))
            finish(transfer, .failed(.network("Could not set up the download: \(why)"), bytesOnDisk: transfer.bytesOnDisk))
            return
        }
        logger.debug("transfer \(id): attempt \(attempt) starts at \(transfer.startOffset)")
        if resume && request.computeSHA256 {
            transfer.phase = .hashingPrefix
            let (path, length, inbox, reader) = (request.partPath, request.offset, self.inbox, file.openForReading())
            fileJobs.async {
                inbox.post(.prefixHashed(id, attempt: attempt, PartFile.hashPrefix(reader, path: path, length: length)))
            }
        } else {
            if request.computeSHA256 { transfer.hasher = SHA256() }
            add(transfer)
        }
    }

    /// The part file of a starting attempt could not be opened or cut. A stop that came
    /// meanwhile is what the caller waits for, not the failure.
    private func endOpening(_ id: TransferID, failed error: PartFileError, bytesOnDisk: Int64, stopped: Bool) {
        emit(.completed(id, stopped ? .stopped(bytesOnDisk: bytesOnDisk)
                                    : .failed(.disk(error.message), bytesOnDisk: bytesOnDisk)))
    }

    /// Stopped while its part file was being opened: nothing was fetched, and an empty
    /// file it made (`madeFresh`: new or cut to nothing) is not left behind.
    private func endStoppedOpening(_ id: TransferID, file: PartFile, madeFresh: Bool, bytesKept: Int64) {
        if madeFresh { file.removeIfEmpty() }
        file.close()
        emit(.completed(id, .stopped(bytesOnDisk: bytesKept)))
    }

    /// A file job opened (or could not open) the part file of a starting segmented attempt.
    private func segmentedPartOpened(_ id: TransferID, attempt: UInt64, _ result: SegmentedDownload.OpenedPart) {
        guard let pending = opening[id], pending.attempt == attempt else { return } // its file closes with it
        switch result {
        case .oneConnection(let single):
            // Not a regular file (a FIFO, a device): one connection writes it in order.
            partOpened(id, attempt: attempt, single)
        case .failed(let error):
            opening[id] = nil
            endOpening(id, failed: error, bytesOnDisk: 0, stopped: pending.stopped)
        case .opened(let file, let plan):
            opening[id] = nil
            if pending.stopped {
                return endStoppedOpening(id, file: file, madeFresh: plan.isFresh, bytesKept: plan.bytesKept)
            }
            let download = SegmentedDownload(request: pending.request, attempt: attempt, loop: self)
            otherAttempts[id] = download
            download.begin(with: file, plan: plan)
        }
    }

    private func add(_ transfer: CurlTransfer) {
        guard let easy = transfer.easy else { return }
        let rc = curl_multi_add_handle(multi, easy)
        guard rc == CURLM_OK else {
            let why = String(cString: curl_multi_strerror(rc))
            finish(transfer, .failed(.network("Could not start the download: \(why)"), bytesOnDisk: transfer.bytesOnDisk))
            return
        }
        transfer.inMulti = true
        transfer.phase = .running
    }

    // MARK: - Finished attempts

    private func collectFinished() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            if let owner = handleOwners[easy] {
                owner.handleDone(easy, code: ferry_msg_result(message))
                continue
            }
            var context: UnsafeMutableRawPointer?
            guard ferry_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &context) == CURLE_OK, let context else { continue }
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
            attemptEnded(transfer, code: ferry_msg_result(message))
        }
    }

    private func attemptEnded(_ transfer: CurlTransfer, code: CURLcode) {
        if let next = transfer.crossOriginRedirect {
            follow(transfer, to: next)
            return
        }
        if let reason = transfer.changedOnServer {
            startOver(transfer, because: reason)
            return
        }
        transfer.writeBufferedBody() // before the count is compared and the file flushed
        let error: FerryError?
        if transfer.alreadyComplete {
            error = nil
        } else if let failure = transfer.failure {
            error = failure
        } else if code != CURLE_OK {
            error = CurlFailure.error(for: code, in: transfer)
        } else if !transfer.responseReady {
            error = .network("\(transfer.hostDescription) ended the response before its headers were complete")
        } else if transfer.expectedTotal >= 0 && transfer.bytesOnDisk != transfer.expectedTotal {
            error = .network("\(transfer.hostDescription) sent \(transfer.bytesOnDisk) of \(transfer.expectedTotal) bytes")
        } else {
            error = nil
        }
        if let error {
            finish(transfer, .failed(error, bytesOnDisk: transfer.bytesOnDisk))
            return
        }
        // Complete: flush and close off the engine thread, then report (see .flushed).
        transfer.releaseHandle(from: multi)
        transfer.phase = .flushing
        let (id, attempt, inbox) = (transfer.id, transfer.attempt, self.inbox)
        let (fd, path, isRegular) = (transfer.file.handOver(), transfer.file.path, transfer.file.isRegular)
        let writebackFD = transfer.handOverWriteback()
        fileJobs.async {
            PartFileWriteback.close(afterQueuedWriteback: writebackFD)
            inbox.post(.flushed(id, attempt: attempt, PartFile.flushAndClose(fd: fd, path: path, isRegular: isRegular)))
        }
    }

    /// Follows a redirect to another origin in a new handle that sends none of the
    /// caller's headers (an API key or a token stays with the origin it was meant for);
    /// same part file, same range, same attempt.
    private func follow(_ old: CurlTransfer, to url: String) {
        let left = old.redirectsLeft - old.redirectCount - 1
        old.releaseHandle(from: multi)
        var request = old.request
        request.url = url
        request.headers = []
        guard left >= 0 else {
            return finish(old, .failed(.tooManyRedirects("More than 10 redirects, starting at \(URLComponents(string: old.request.url)?.host ?? "the server")"),
                                       bytesOnDisk: old.bytesOnDisk))
        }
        logger.debug("transfer \(old.id): redirect to another origin, followed without the caller's headers")
        replace(old, request: request, resume: old.sentRange, redirectsLeft: left, hasher: old.hasher,
                unusable: "Could not set up the redirected download (libcurl)", bytesOnDisk: old.bytesOnDisk)
    }

    /// The range the server sent is of a changed file (`CurlTransfer.changedOnServer`):
    /// the same attempt fetches the whole file in a new handle, without a range, into
    /// the part file cut to 0 (nothing of the old file is kept, nothing of the new one
    /// was written).
    private func startOver(_ old: CurlTransfer, because reason: String) {
        old.releaseHandle(from: multi)
        logger.info("transfer \(old.id): the file changed on the server (\(reason)); starting over")
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

    /// Goes on with `old`'s attempt in a new handle for `request` (same part file, same
    /// attempt, `old`'s handle already released); ends the attempt if curl cannot set
    /// one up.
    private func replace(_ old: CurlTransfer, request: EngineRequest, resume: Bool, redirectsLeft: Int, hasher: SHA256?,
                         unusable: String, bytesOnDisk: Int64) {
        guard let next = CurlTransfer(request: request, attempt: old.attempt, file: old.file, resume: resume,
                                      loop: self, cookies: cookies, redirectsLeft: redirectsLeft), next.setupError == CURLE_OK else {
            return finish(old, .failed(.network(unusable), bytesOnDisk: bytesOnDisk))
        }
        next.hasher = hasher
        transfers[old.id] = next
        unthrottle(old)
        add(next)
    }

    /// Ends an attempt that is not flushing: handle gone, the body's held bytes
    /// written, file closed, events out. The outcome is read after that write, so the
    /// bytes it counts are those the file holds.
    private func finish(_ transfer: CurlTransfer, _ outcome: @autoclosure () -> EngineOutcome) {
        transfer.releaseHandle(from: multi)
        transfer.writeBufferedBody()
        let outcome = outcome()
        transfer.file.releaseReservation()
        if case .failed(_, 0) = outcome { transfer.file.removeIfEmpty() }
        transfer.file.close()
        complete(transfer, outcome)
    }

    private func complete(_ transfer: CurlTransfer, _ outcome: EngineOutcome) {
        transfers[transfer.id] = nil
        unthrottle(transfer)
        transfer.reportProgress()
        cookies.saveChanged() // a finished attempt's cookies are on disk before it is reported
        emit(.completed(transfer.id, outcome))
        logger.debug("transfer \(transfer.id): attempt \(transfer.attempt) completed: \(outcome)")
    }
}

// MARK: - Uploads and segmented downloads

extension EngineLoop {
    /// Starts an upload or a segmented download; nil for a single-connection download.
    fileprivate func startOtherAttempt(_ request: EngineRequest) -> String? {
        if let upload = request.upload {
            attempts += 1
            let attempt = UploadAttempt(request: request, source: upload, attempt: attempts, loop: self)
            otherAttempts[request.id] = attempt
            attempt.begin()
            return "upload"
        }
        guard request.connections > 1 || (request.segments.map { !$0.done.isEmpty } ?? false) else { return nil }
        // Its part file is looked at and opened by a file job, as a single connection's
        // is (see `start`); one that is not a regular file gets one connection.
        attempts += 1
        let (attempt, inbox) = (attempts, self.inbox)
        opening[request.id] = OpeningPart(request: request, attempt: attempt)
        fileJobs.async {
            inbox.post(.segmentedPartOpened(request.id, attempt: attempt, SegmentedDownload.openPart(for: request)))
        }
        return "up to \(min(max(request.connections, 1), SegmentedDownload.maximumConnections)) connections, once its file is open"
    }

    /// Adds one of an attempt's easy handles to the multi.
    func add(_ easy: UnsafeMutableRawPointer, owner: EngineAttempt) -> CURLMcode {
        let rc = curl_multi_add_handle(multi, easy)
        if rc == CURLM_OK { handleOwners[easy] = owner }
        return rc
    }

    /// Takes a handle out of the multi (if it is in); the owner then cleans it up.
    func remove(_ easy: UnsafeMutableRawPointer, owner: AnyObject) {
        if handleOwners.removeValue(forKey: easy) != nil {
            curl_multi_remove_handle(multi, easy)
        }
        if let paced = owner as? PacedHandle { unthrottle(paced) }
    }

    /// An upload or segmented download ended: the last events go out.
    func attemptEnded(_ attempt: EngineAttempt, _ outcome: EngineOutcome) {
        guard otherAttempts[attempt.id] === attempt else { return }
        otherAttempts[attempt.id] = nil
        cookies.saveChanged()
        emit(.completed(attempt.id, outcome))
        logger.debug("transfer \(attempt.id): attempt \(attempt.attempt) completed: \(outcome)")
    }

    func log(_ id: TransferID, _ message: String) {
        logger.info("transfer \(id): \(message)")
    }

    /// Asks for `attempt.service()` once the current curl call has returned.
    func requestService(_ attempt: EngineAttempt) {
        if !needingService.contains(where: { $0 === attempt }) { needingService.append(attempt) }
    }

    fileprivate func serviceAttempts() {
        while !needingService.isEmpty {
            let due = needingService
            needingService.removeAll()
            for attempt in due where otherAttempts[attempt.id] === attempt { attempt.service() }
        }
    }

    func postHashResult(_ id: TransferID, attempt: UInt64, epoch: Int, upTo: Int64, _ result: Result<SHA256, PartFileError>) {
        inbox.post(.attemptHashed(id, attempt: attempt, epoch: epoch, upTo: upTo, result))
    }

    /// Lets an upload's reader queue hand a chunk to the engine thread.
    func postUploadChunk(_ id: TransferID, attempt: UInt64, _ chunk: UploadChunk) {
        inbox.post(.uploadChunk(id, attempt: attempt, chunk))
    }

    /// Lets an attempt's background job report back on the engine thread.
    func postFileJobResult(_ id: TransferID, attempt: UInt64, _ result: Result<String?, PartFileError>) {
        inbox.post(.attemptFileJob(id, attempt: attempt, result))
    }
}

/// A download (on one connection or several) waiting for its part file.
private struct OpeningPart {
    var request: EngineRequest
    let attempt: UInt64
    /// A stop came meanwhile: it is reported when the file job is back.
    var stopped = false
}

/// A part file opened for an attempt, and whether the attempt resumes in it.
struct OpenedPart {
    let file: PartFile
    let resume: Bool

    /// Opens the part file; resumes only with a validator and a part file that holds the
    /// bytes claimed, else cuts it to nothing. Runs on a file job.
    static func open(for request: EngineRequest) -> Result<OpenedPart, Failure> {
        let file: PartFile
        switch PartFile.open(request.partPath, within: request.confinedTo) {
        case .success(let opened): file = opened
        case .failure(let error): return .failure(Failure(error: error, bytesOnDisk: 0))
        }
        let resume = request.offset > 0 && request.ifRange != nil && file.isRegular && file.initialSize >= request.offset
        if !resume, let error = file.truncate(to: 0) {
            file.close()
            return .failure(Failure(error: error, bytesOnDisk: file.initialSize))
        }
        return .success(OpenedPart(file: file, resume: resume))
    }

    /// The part file could not be opened or cut; what it holds.
    struct Failure: Error {
        let error: PartFileError
        let bytesOnDisk: Int64
    }
}
