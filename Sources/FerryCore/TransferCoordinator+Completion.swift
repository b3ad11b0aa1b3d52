import Crypto
import Foundation

extension TransferCoordinator {
    /// The body is complete in the `.part` file: verify it, move it into place, report.
    func finishSucceeded(_ t: TransferRecord, bytesOnDisk: Int64, engineSHA256: String?) {
        if let refusal = finishingRefusal(t) {
            deletePartFiles(t) // unlinks the name only: a link's target stays as it was
            failTransfer(t, refusal)
            return
        }
        t.snapshot.bytesTransferred = bytesOnDisk
        if t.snapshot.bytesExpected < 0 { t.snapshot.bytesExpected = bytesOnDisk }
        var digest = engineSHA256?.lowercased()
        if let size = t.metalink?.document.size, bytesOnDisk != size {
            if tryNextMetalinkSource(t, because: "the file is \(bytesOnDisk) bytes, not the \(size) of the Metalink document") { return }
            deletePartFiles(t)
            failTransfer(t, .checksumMismatch("the downloaded file is \(bytesOnDisk) bytes, not the \(size) the Metalink document gives; the file was deleted"))
            return
        }
        if let wanted = t.expectedSHA256 {
            if digest == nil { digest = FileDigest.sha256(path: t.partPath, within: confinement(of: t)) }
            guard digest == wanted else {
                if tryNextMetalinkSource(t, because: "the file's SHA-256 is \(digest ?? "unreadable"), not \(wanted)") { return }
                // The final name never holds an unverified file; nor is the bad one kept.
                deletePartFiles(t)
                failTransfer(t, .checksumMismatch("the downloaded file's SHA-256 is \(digest ?? "unreadable"), not the expected \(wanted); the file was deleted"))
                return
            }
        }
        if isDescriptorDownload(t) {
            // Copied into the client's descriptor off this queue; it completes when that is done.
            startDelivery(t, bytesOnDisk: bytesOnDisk, digest: digest)
            return
        }
        // On the .part, so the file never appears under its final name without it (a
        // sandboxed application's is given it through its folder, as it is moved).
        if confinement(of: t) == nil {
            OriginURLAttribute.set(path: t.partPath, url: t.snapshot.url)
            PartFileMark.remove(t.partPath) // a finished file is not a partial one
        }
        if lifecycle.isInChange, isPersistent(t.session), sessions[t.session]?.owner == nil {
            // Where it goes is stored with the others that finish in this change, in one
            // write, before any of them moves (`finishPendingMoves`).
            let target = firstTarget(t)
            stageFinishing(t, target: target, digest: digest)
            pendingMoves.queue(PendingMove(transfer: t, target: target, digest: digest, bytesOnDisk: bytesOnDisk))
            return
        }
        let location: String
        do {
            location = try moveIntoSandboxArea(t, digest: digest) ?? moveIntoPlace(t, digest: digest, target: firstTarget(t), recorded: false)
        } catch {
            moveFailed(t, error)
            return
        }
        completeFinished(t, location: location, bytesOnDisk: bytesOnDisk, digest: digest)
    }

    /// At the end of a change (and at the start of one that does not wait, for changes
    /// that waited: `CommitHold`): writes where the downloads that finished go (one
    /// transaction for all), then moves each into place and completes it. So a batch of
    /// small files ending together costs one write before the moves, not one each.
    /// Nothing queued: nothing happens.
    func finishPendingMoves() {
        defer { pendingMoves.endRound() }
        // Whatever a move adds is taken in a next pass, with one more write. (A dedupe
        // leader's followers are not: their copies are made off this queue, and they
        // finish in a later change, `copiesEnded`.)
        while let moves = pendingMoves.takeQueued() {
            flushStore()
            for move in moves {
                let t = move.transfer
                pendingMoves.moving(move)
                guard transfers[t.id] === t, t.state == .running else { continue }
                do {
                    let location = try moveIntoPlace(t, digest: move.digest, target: move.target, recorded: true)
                    completeFinished(t, location: location, bytesOnDisk: move.bytesOnDisk, digest: move.digest)
                } catch {
                    moveFailed(t, error)
                }
            }
        }
    }

    private func moveFailed(_ t: TransferRecord, _ error: Error) {
        t.finishingPath = nil
        failTransfer(t, .disk("could not move the finished download to '\(t.destination)': \(describe(error))"))
    }

    /// The verified file is at `location` ("" for a descriptor download): the transfer
    /// completes, its event stored with its final state, then both announced.
    func completeFinished(_ t: TransferRecord, location: String, bytesOnDisk: Int64, digest: String?) {
        t.finishingPath = nil
        sendFinalProgress(t, from: t.attemptOffset)
        t.snapshot.destination = location
        t.snapshot.sha256 = digest ?? ""
        t.snapshot.completed = environment.now()
        t.life.complete()
        settle(t)
        // The final state and its event are stored together, before either is announced.
        let serial = appendEvent(PendingEvent(serial: 0, transfer: t.id, kind: .finished, location: location,
                                              bytes: bytesOnDisk, sha256: digest), session: t.session)
        publishChanged(t)
        emit(.finished(t.id, location: location))
        emitCompleted(t, serial: serial, error: nil)
        reachedFinalState(t)
        leaderFinished(t, location: location, bytesOnDisk: bytesOnDisk, digest: digest)
    }

    /// Where a verified download goes first: its destination, or (without `overwrite`,
    /// when a file is there now) a free name beside it.
    private func firstTarget(_ t: TransferRecord) -> String {
        guard !t.options.overwrite, FileSystemChecks.exists(t.destination) else { return t.destination }
        return resolver(except: t.id).uniquePath(directory: FileSystemChecks.directoryName(t.destination),
                                                 name: FileSystemChecks.baseName(t.destination), overwrite: false)
    }

    /// Renames `.part` to `target` (from `firstTarget`). Without `overwrite` a file that
    /// appeared there meanwhile is kept and another unique name is chosen; the move
    /// (`RENAME_NOREPLACE`, or link-then-unlink where that is not supported) refuses to
    /// replace a file that appears at the last moment. Each target is stored before the
    /// file moves (`recordFinishing`; `recorded`: the first one already is), so a crash
    /// in between cannot make the download start over into a second copy.
    private func moveIntoPlace(_ t: TransferRecord, digest: String?, target first: String, recorded: Bool) throws -> String {
        let target = try renameIntoPlace(t, digest: digest, target: first, recorded: recorded)
        // The new name is durable once its folder is synced: before the completion is
        // stored or announced (`syncMovedFolders`), once per folder and round.
        pendingMoves.movedInto(FileSystemChecks.directoryName(target))
        return target
    }

    private func renameIntoPlace(_ t: TransferRecord, digest: String?, target first: String, recorded: Bool) throws -> String {
        let part = t.partPath
        if t.options.overwrite {
            if !recorded { recordFinishing(t, target: t.destination, digest: digest) }
            try AtomicReplace.replace(t.destination, with: part)
            return t.destination
        }
        let resolver = self.resolver(except: t.id)
        var target = first
        var stored = recorded
        for _ in 0..<8 {
            if !stored { recordFinishing(t, target: target, digest: digest) }
            stored = false
            var outcome = try AtomicReplace.moveNoReplace(part, to: target)
            if outcome == .unsupported { outcome = try AtomicReplace.moveByLink(part, to: target) }
            if outcome == .unsupported, !FileSystemChecks.exists(target) {
                // Neither: a plain rename, after the check.
                try AtomicReplace.replace(target, with: part)
                return target
            }
            if outcome == .moved { return target }
            // Something appeared at the name meanwhile: it stays, the download takes another.
            target = resolver.uniquePath(directory: FileSystemChecks.directoryName(target),
                                         name: FileSystemChecks.baseName(t.destination), overwrite: false)
        }
        throw CoreError.disk("no free file name")
    }

    /// Stores where the verified file is about to go (persistent sessions only).
    func recordFinishing(_ t: TransferRecord, target: String, digest: String?) {
        guard isPersistent(t.session) else { return }
        stageFinishing(t, target: target, digest: digest)
        flushStore()
    }

    private func stageFinishing(_ t: TransferRecord, target: String, digest: String?) {
        t.finishingPath = target
        t.snapshot.sha256 = digest ?? ""
        stageTransfer(t)
    }

    /// The transfer fails for good (until resumed).
    func failTransfer(_ t: TransferRecord, _ error: CoreError) {
        var status: UInt32?
        if case .http(let code, _) = error {
            status = UInt32(clamping: code)
            t.snapshot.httpStatus = UInt32(clamping: code)
        }
        settle(t, t.life.fail())
        t.metalink = nil // a `Resume` reads the document again, its URLs from the best one
        t.showError(error)
        t.snapshot.completed = environment.now()
        let serial = appendEvent(PendingEvent(serial: 0, transfer: t.id, kind: .failed, errorName: error.name,
                                              errorMessage: error.message, httpStatus: status,
                                              bytes: t.snapshot.bytesTransferred), session: t.session)
        publishChanged(t)
        emitCompleted(t, serial: serial, error: error)
        reachedFinalState(t)
        leaderFailed(t, error)
    }

    /// Counts the outcome into the batches and sends AllFinished where nothing is
    /// queued, waiting or running any more; a closing session may go now.
    func reachedFinalState(_ t: TransferRecord) {
        releaseUploadSource(t)
        releaseDestinationFD(t)
        managerBatch.count(t.state, isPrivate: sessions[t.session]?.configuration.privateSignals == true)
        guard let s = sessions[t.session] else { return }
        s.batch.count(t.state)
        if t.state == .failed { t.failureCountedIn = (managerBatch.number, s.batchNumber) }
        // Within a change the counts go out once, when it ends (a burst of 100 ending
        // downloads is one manager signal, not 100), or before an AllFinished.
        if !lifecycle.isInChange { publishAggregates() }
        announceEndedBatches(of: s)
        finishClosingIfDone(s)
    }

    /// Sends AllFinished for the session when nothing is queued, waiting or running
    /// there any more and the batch has an outcome to report (a batch can also end by
    /// pausing its last live transfer); the manager's follows after its settle time.
    /// The counts (`ActiveTransfers`…) that say so go out first.
    func announceEndedBatches(of s: SessionRecord) {
        if s.batch != BatchCounts(), index.activeCount(session: s.id) == 0 {
            publishAggregates()
            let counts = s.batch
            s.batch = BatchCounts()
            s.batchNumber &+= 1
            emit(.sessionAllFinished(SessionBatchEnd(session: s.id, identifier: s.identifier, counts: counts, applicationID: s.configuration.applicationID,
                                                     hasPendingEvents: !s.pendingEvents.isEmpty)))
        }
        managerBatchMayHaveEnded()
    }

    func describe(_ error: Error) -> String {
        if let ferry = error as? CoreError { return ferry.message }
        if let cocoa = error as? CocoaError, let underlying = cocoa.userInfo[NSUnderlyingErrorKey] as? NSError {
            return underlying.localizedDescription
        }
        return (error as NSError).localizedDescription
    }
}

/// A file read to its end in chunks, for its SHA-256 or its bytes.
enum FileDigest {
    /// nil when the file cannot be read to its end. A sandboxed application's file
    /// (`area`) is opened relative to its folder as opened and checked.
    static func sha256(path: String, within area: SandboxArea? = nil) -> String? {
        var hasher = SHA256()
        guard readChunks(path: path, within: area, chunk: 1 << 20, { hasher.update(data: $0); return true }) else { return nil }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// Calls `body` with each chunk of the file, in order, until it returns false.
    /// - Returns: whether the file was read to its end and `body` never said stop.
    static func readChunks(path: String, within area: SandboxArea?, chunk: Int, _ body: (ArraySlice<UInt8>) -> Bool) -> Bool {
        guard let (folder, name) = SandboxArea.place(of: path, within: area) else { return false }
        defer { SandboxArea.release(folder) }
        // O_NONBLOCK: a FIFO put at the name does not hang the core.
        let fd = openat(folder, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: chunk)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { return false }
            if n == 0 { return true }
            guard body(buffer[0..<n]) else { return false }
        }
    }
}
