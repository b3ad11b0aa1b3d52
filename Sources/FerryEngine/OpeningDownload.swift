import CCurl
import FerryCore

/// A download whose part file a file job is opening (and cutting, unless the attempt
/// resumes): on ext4 without a journal, finding a new inode skips every one deleted in
/// the last minute, which can take a millisecond, and the network of every other
/// transfer would wait for it on the engine thread. When the job is back it hands over
/// to a `SingleDownload` or a `SegmentedDownload` (`EngineLoop.replace`), or ends.
/// Engine thread only.
final class OpeningDownload: EngineAttempt {
    private(set) var request: EngineRequest
    let attempt: UInt64
    var id: TransferID { request.id }
    private unowned let loop: EngineLoop
    /// Opened for several connections (`SegmentedDownload.openPart`).
    private let segmented: Bool
    /// A stop came meanwhile: it is reported when the file job is back.
    private var stopped = false

    init(request: EngineRequest, attempt: UInt64, segmented: Bool, loop: EngineLoop) {
        self.request = request
        self.attempt = attempt
        self.segmented = segmented
        self.loop = loop
    }

    /// Sends the file job.
    func begin() {
        let (request, id, attempt, mailbox) = (request, id, attempt, loop.mailbox)
        if segmented {
            loop.fileJobs.async {
                mailbox.post(.segmentedPartOpened(SegmentedDownload.openPart(for: request)), to: id, attempt: attempt)
            }
        } else {
            loop.fileJobs.async {
                mailbox.post(.partOpened(OpenedPart.open(for: request)), to: id, attempt: attempt)
            }
        }
    }

    func jobDone(_ job: AttemptJob) {
        switch job {
        case .partOpened(let result): partOpened(result)
        case .segmentedPartOpened(let result): segmentedPartOpened(result)
        default: break
        }
    }

    private func partOpened(_ result: Result<OpenedPart, OpenedPart.Failure>) {
        let opened: OpenedPart
        switch result {
        case .success(let part): opened = part
        case .failure(let failure): return endOpening(failed: failure.error, bytesOnDisk: failure.bytesOnDisk)
        }
        let resume = opened.resume
        let kept = resume ? request.offset : 0 // bytes of the part file this attempt keeps
        if stopped { return endStopped(file: opened.file, madeFresh: !resume, bytesKept: kept) }
        if request.offset > 0 && !resume {
            loop.log(id, "cannot resume at \(request.offset) (no validator or short part file); starting over")
        }
        guard let download = SingleDownload.make(request: request, attempt: attempt, file: opened.file, resume: resume,
                                                 loop: loop) else {
            return loop.attemptEnded(self, .failed(.network("Could not set up the download (libcurl)"), bytesOnDisk: kept))
        }
        loop.replace(self, with: download)
        loop.debug(id, "attempt \(attempt) starts at \(kept)")
        download.begin(resume: resume)
    }

    private func segmentedPartOpened(_ result: SegmentedDownload.OpenedPart) {
        switch result {
        case .oneConnection(let single):
            // Not a regular file (a FIFO, a device): one connection writes it in order.
            partOpened(single)
        case .failed(let error):
            endOpening(failed: error, bytesOnDisk: 0)
        case .opened(let file, let plan):
            if stopped { return endStopped(file: file, madeFresh: plan.isFresh, bytesKept: plan.bytesKept) }
            let download = SegmentedDownload(request: request, attempt: attempt, loop: loop)
            loop.replace(self, with: download)
            download.begin(with: file, plan: plan)
        }
    }

    /// The part file could not be opened or cut. A stop that came meanwhile is what the
    /// caller waits for, not the failure.
    private func endOpening(failed error: PartFileError, bytesOnDisk: Int64) {
        loop.attemptEnded(self, stopped ? .stopped(bytesOnDisk: bytesOnDisk) : .failed(.disk(error.message), bytesOnDisk: bytesOnDisk))
    }

    /// Stopped while its part file was being opened: nothing was fetched, and an empty
    /// file it made (`madeFresh`: new or cut to nothing) is not left behind.
    private func endStopped(file: PartFile, madeFresh: Bool, bytesKept: Int64) {
        if madeFresh { file.removeIfEmpty() }
        file.close()
        loop.attemptEnded(self, .stopped(bytesOnDisk: bytesKept))
    }

    // MARK: - EngineAttempt (nothing on the network yet)

    func stop() { stopped = true }
    func setSpeedLimit(_ bytesPerSecond: UInt64) { request.speedLimit = bytesPerSecond }
    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode) {}
    func reportProgressIfDue(now: UInt64) -> UInt64? { nil }
    var stallDue: UInt64? { nil }
    func stalled(now: UInt64) {}
    func abandon() {} // the file closes when the job's result is dropped
    func service() {}
}
