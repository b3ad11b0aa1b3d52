import Dispatch
import Foundation

/// Dedupe (contract v1.2): a download whose fetch (`FetchKey`) matches a queued or
/// running download of the same caller follows it instead of fetching again.
///
/// - A follower holds no connection and never enters the queue; its state and progress
///   mirror its leader's (`mirror`). When the leader's file is complete, verified and in
///   place, each follower gets its own copy (a reflink where the file system can, else
///   a copy written to its `.part`, flushed, then renamed as any download is) and its
///   own events. The copies and their flushes are made off the core's queue
///   (`FetchedCopier`: a GiB copied and synced on ext4 takes seconds, and the core
///   answers every client meanwhile); the follower stays `running` until its copy is
///   back (`copiesEnded`). Paused, cancelled or removed meanwhile, it never takes the
///   copy: its `.part` is removed. ferryd stopping cancels the copies under way and
///   waits for them; killed, it leaves at most a half-made `.part`, never a final name.
/// - The leader fails for a reason of the fetch (network, HTTP status, TLS, timeout,
///   checksum): its followers fail with the same error (a fetch of their own would
///   fail the same way, after its own retries). It fails for a reason of its own file
///   (`Disk`), or is paused or cancelled by its client: the oldest follower takes the
///   fetch over (from byte 0, into its own `.part`) and the others follow it.
/// - A follower paused or cancelled stops following: the leader goes on. Resumed, it
///   fetches on its own.
/// - Memory only: after a restart every follower is a plain download again and fetches
///   on its own (nothing is lost; the store needs no new column).
extension TransferCoordinator {
    /// What makes `t` the same fetch as another; nil when it may not be merged
    /// (`dedupe` false, an upload, a `destination-fd` download, a `metalink` download:
    /// its URL is the document's, not the file's). Mirrors and pieces are part of the
    /// key: a download with pieces never follows one whose pieces were not checked.
    func fetchKey(_ t: TransferRecord) -> FetchKey? {
        guard !t.isUpload, t.options.dedupe, !isDescriptorDownload(t), let s = sessions[t.session] else { return nil }
        guard t.options.metalink == nil else { return nil }
        let config = s.configuration
        let headers = HeaderFields.merge(session: config.headers, transfer: t.options.headers)
            .map { $0.name.lowercased() + ":" + $0.value }.sorted()
        return FetchKey(caller: s.owner, url: t.snapshot.url, headers: headers, sha256: t.options.sha256?.lowercased(),
                        proxy: config.proxy, cookieJar: config.cookies ? s.id : nil,
                        discretionary: t.options.discretionary ?? config.discretionary,
                        mirrors: t.options.mirrors, pieces: t.options.pieces)
    }

    /// A new download (`add`, before it is indexed): it follows the queued or running
    /// leader of its fetch, or leads it. Only a download that starts now from nothing
    /// joins (not one created paused, waiting for `start-after`, or continuing a partial
    /// file from resume data).
    func joinFetch(_ t: TransferRecord) {
        guard t.state == .queued, t.snapshot.bytesTransferred == 0, t.segments == nil, let key = fetchKey(t) else { return }
        if let id = dedupe.leader(for: key), let leader = transfers[id], leader.state == .queued || leader.state == .running {
            dedupe.follow(t.id, leader: id)
            mirror(leader, into: t)
            logger.debug("transfer \(t.id) follows transfer \(id) (same fetch)")
        } else {
            dedupe.lead(t.id, key: key)
        }
    }

    /// Shows the leader's state and counts in the follower (not announced: the caller does).
    private func mirror(_ leader: TransferRecord, into f: TransferRecord) {
        f.life.mirror(leader.life)
        f.syncState()
        f.snapshot.attempts = leader.snapshot.attempts
        f.snapshot.httpStatus = leader.snapshot.httpStatus
        f.snapshot.bytesExpected = leader.snapshot.bytesExpected
        f.snapshot.bytesTransferred = leader.state == .running ? leader.snapshot.bytesTransferred : 0
        if f.state == .running {
            if f.snapshot.started == 0 { f.snapshot.started = environment.now() }
            f.snapshot.rate = leader.snapshot.rate
            f.snapshot.expectedEnd = leader.snapshot.expectedEnd
        }
    }

    /// Called by `settle` after every state change: a follower that left the active
    /// states stops following; a leader's followers follow its state, or take the fetch
    /// over when it was paused or cancelled. O(followers of that leader).
    func dedupeSettled(_ t: TransferRecord) {
        if dedupe.isFollower(t.id) {
            if !t.state.isActive {
                dedupe.unfollow(t.id)
                reindex(t)
            }
            return
        }
        switch t.state {
        case .queued, .waiting, .running:
            for id in dedupe.followers(of: t.id) {
                guard let f = transfers[id] else { continue }
                mirror(t, into: f)
                reindex(f)
                publishChanged(f)
            }
        case .paused, .cancelled:
            if let entry = dedupe.dissolve(t.id) { handOver(entry.key, to: entry.followers, from: t) }
        case .failed, .completed:
            // `failTransfer` and `completeFinished` decide for the followers.
            break
        }
    }

    /// The oldest live follower fetches `key` from now on, the others follow it.
    private func handOver(_ key: FetchKey, to followers: [TransferID], from leader: TransferRecord) {
        let live = followers.compactMap { transfers[$0] }.filter { $0.state.isActive && !$0.stopInFlight }
        guard let heir = live.first else { return }
        logger.info("transfer \(heir.id) takes over the fetch of transfer \(leader.id) (\(leader.state.rawValue))")
        heir.life.stopFollowing()
        heir.snapshot.bytesTransferred = 0
        dedupe.lead(heir.id, key: key)
        settle(heir)
        publishChanged(heir)
        for f in live.dropFirst() {
            dedupe.follow(f.id, leader: heir.id)
            mirror(heir, into: f)
            reindex(f)
            publishChanged(f)
        }
    }

    /// The leader failed for good (`failTransfer`): see the type's comment.
    func leaderFailed(_ t: TransferRecord, _ error: CoreError) {
        guard let entry = dedupe.dissolve(t.id), !entry.followers.isEmpty else { return }
        switch error {
        case .disk, .cancelled, .invalidDestination, .accessDenied:
            handOver(entry.key, to: entry.followers, from: t)
        default:
            for id in entry.followers {
                guard let f = transfers[id], f.state.isActive, !f.stopInFlight else { continue }
                f.snapshot.httpStatus = t.snapshot.httpStatus
                failTransfer(f, error)
            }
        }
    }

    /// The leader's verified file is at `location` (`completeFinished`): each follower
    /// gets its own copy, made off this queue (`environment.fetchedCopier`, in batches of
    /// `FetchedCopy.batch` flushed together); `copiesEnded` finishes each follower when
    /// its copy is back. Meanwhile the follower is `running` (`copying`), its bytes at
    /// the file's size. The file is opened here, once: the copies read what the leader
    /// verified even if its name changes before they run.
    func leaderFinished(_ t: TransferRecord, location: String, bytesOnDisk: Int64, digest: String?) {
        guard let entry = dedupe.dissolve(t.id), !entry.followers.isEmpty else { return }
        let live = entry.followers.compactMap { transfers[$0] }.filter { $0.state.isActive && !$0.stopInFlight }
        guard !live.isEmpty else { return }
        let fetched = FetchedFile(leader: t.id, digest: digest, httpStatus: t.snapshot.httpStatus,
                                  etag: t.etag, lastModified: t.lastModified)
        let source: FetchedSource
        do {
            source = try FetchedSource(path: location, within: confinement(of: t), bytes: bytesOnDisk)
        } catch {
            for f in live { copyFailed(f, from: t.id, error) }
            return
        }
        let queue = self.queue, coordinator = WeakCoordinator(self)
        for start in stride(from: 0, to: live.count, by: FetchedCopy.batch) {
            var jobs: [FetchedCopyJob] = []
            var waiting: [WaitingCopy] = []
            for f in live[start..<min(start + FetchedCopy.batch, live.count)] {
                let job = FetchedCopyJob(source: source, target: f.partPath, targetArea: confinement(of: f))
                f.life.receiveCopy()
                f.fetchedCopy = job.cancellation
                settle(f)
                f.snapshot.httpStatus = t.snapshot.httpStatus
                f.snapshot.bytesExpected = bytesOnDisk
                f.snapshot.bytesTransferred = bytesOnDisk
                f.snapshot.rate = 0
                f.snapshot.expectedEnd = 0
                if f.snapshot.started == 0 { f.snapshot.started = environment.now() }
                publishChanged(f)
                jobs.append(job)
                waiting.append(WaitingCopy(transfer: f.id, cancellation: job.cancellation))
            }
            let copies = waiting
            environment.fetchedCopier.copy(jobs) { outcomes in
                queue.async { coordinator.coordinator?.copiesEnded(copies, outcomes, of: fetched) }
            }
        }
    }

    /// What a follower takes from its leader when its copy is done.
    struct FetchedFile: Sendable {
        let leader: TransferID
        let digest: String?
        let httpStatus: UInt32
        let etag: String?
        let lastModified: String?
    }

    /// A follower whose copy is under way, and the copy's (`TransferRecord.fetchedCopy`).
    struct WaitingCopy: Sendable {
        let transfer: TransferID
        let cancellation: CopyCancellation
    }

    /// A batch of copies is back (`leaderFinished`), as one change: each follower still
    /// waiting for its copy finishes as a download does (verified, moved into place
    /// durably, its own events) or fails with `Disk`. One paused, cancelled or failed
    /// meanwhile (its copy was cancelled: `TransferLife.Action.stopCopy`) never takes
    /// the copy: its `.part` is removed, and, resumed, it fetches on its own; one
    /// removed meanwhile leaves nothing either (`detachedStops`).
    func copiesEnded(_ copies: [WaitingCopy], _ outcomes: [FetchedCopyOutcome], of fetched: FetchedFile) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !lifecycle.isShutDown else { return }
        mutate {
            for (copy, outcome) in zip(copies, outcomes) { copyEnded(copy, outcome, of: fetched) }
        }
    }

    private func copyEnded(_ copy: WaitingCopy, _ outcome: FetchedCopyOutcome, of fetched: FetchedFile) {
        guard let f = transfers[copy.transfer] else {
            if let (paths, area) = detachedStops.removeValue(forKey: copy.transfer) { removePartFiles(paths, within: area) }
            return
        }
        guard f.fetchedCopy === copy.cancellation else { return }
        f.fetchedCopy = nil
        switch f.life.attemptEnded() {
        case nil:
            return
        case .stopped:
            reindex(f) // a follower resumed meanwhile may start now
            if !f.partFileHandedOver { deletePartFiles(f) }
            if f.state != .cancelled {
                // Nothing of the copy counts: a Resume fetches from byte 0.
                f.snapshot.bytesTransferred = 0
                stageTransfer(f)
                if f.state == .paused { sendFinalProgress(f, from: 0, evenIfSent: true) }
            }
        case .current:
            switch outcome {
            case .copied(let bytes):
                f.snapshot.httpStatus = fetched.httpStatus
                f.etag = fetched.etag
                f.lastModified = fetched.lastModified
                f.snapshot.bytesTransferred = bytes
                finishSucceeded(f, bytesOnDisk: bytes, engineSHA256: fetched.digest)
            case .failed(let error):
                copyFailed(f, from: fetched.leader, error)
            case .cancelled:
                // Only ferryd stopping cancels a copy still wanted, and then nothing comes back.
                copyFailed(f, from: fetched.leader, CoreError.disk("the copy was stopped"))
            }
        }
    }

    private func copyFailed(_ f: TransferRecord, from leader: TransferID, _ error: Error) {
        deletePartFiles(f)
        failTransfer(f, .disk("could not copy the download of transfer \(leader) to '\(f.partPath)': \(describe(error))"))
    }

    /// A leader's progress, shown by its followers (each sends its own `Progress`).
    func mirrorProgress(_ t: TransferRecord, bytesWritten: Int64) {
        for id in dedupe.followers(of: t.id) {
            guard let f = transfers[id], f.state == .running else { continue }
            f.snapshot.bytesTransferred = t.snapshot.bytesTransferred
            f.snapshot.bytesExpected = t.snapshot.bytesExpected
            f.snapshot.rate = t.snapshot.rate
            f.snapshot.expectedEnd = t.snapshot.expectedEnd
            f.lastProgress = (f.snapshot.bytesTransferred, f.snapshot.bytesExpected)
            emitProgress(f, bytesWritten: bytesWritten)
        }
    }

    /// The leader's file was named by the server (Content-Disposition): followers that
    /// left the name to the server take the same one (unique in their directory).
    func followersTakeServerName(of t: TransferRecord, _ name: String, adopt: (TransferRecord, String) -> Void) {
        for id in dedupe.followers(of: t.id) {
            guard let f = transfers[id], f.serverMayName else { continue }
            f.serverMayName = false
            adopt(f, name)
            publishChanged(f)
        }
    }
}
