import Foundation

extension TransferCoordinator {
    /// Events that arrived together, in order, as one change (progress alone skips the
    /// change, as below).
    func handle(_ events: [EngineEvent]) {
        guard events.contains(where: { if case .progress = $0 { return false } else { return true } }) else {
            for event in events { handle(event) }
            return
        }
        mutate(mayWaitForCommit: true) {
            for event in events { handle(event) }
        }
    }

    /// One engine event, on `queue`.
    func handle(_ event: EngineEvent) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !lifecycle.isShutDown else { return }
        // Progress (4 a second per transfer) changes nothing the scheduler or the
        // aggregate counts read: it skips `mutate`'s rescheduling and recounting.
        if case .progress(let id, let written, let total, let expected) = event {
            handleProgress(id, written, total, expected)
            return
        }
        mutate {
            switch event {
            case .response(let id, let response): handleResponse(id, response)
            case .progress(let id, let written, let total, let expected): handleProgress(id, written, total, expected)
            case .completed(let id, let outcome): handleAttemptEnd(id, outcome)
            case .connectionsFreed(let id): handleConnectionsFreed(id)
            case .unansweredStream(let id): handleUnansweredStream(id)
            case .segments(let id, let map): handleSegments(id, map)
            case .durable(let id, let part): handleDurable(id, part)
            }
        }
    }

    /// The attempt's connections are free while its file is flushed: they no longer
    /// count against the limits, and the next transfer may start.
    private func handleConnectionsFreed(_ id: TransferID) {
        guard let t = transfers[id], t.state == .running, !t.stopInFlight else { return }
        t.connectionsFreed = true
        reindex(t)
    }

    /// Its request was a stream of an HTTP/2 connection, and no answer came before the
    /// attempt failed: if the connection was lost, the transfer is tried again at once
    /// (`attemptFailed`), even on an origin that had not answered before. The origin is
    /// not marked multiplexing here: the connection may have been a redirect target's or
    /// a Metalink mirror's, not `t.host`'s; its first answer says.
    private func handleUnansweredStream(_ id: TransferID) {
        guard let t = transfers[id], t.state == .running, !t.stopInFlight else { return }
        t.onSharedConnection = true
    }

    /// Whether the answer came from the transfer's own origin (`t.host`), not from where
    /// a redirect led or from a Metalink mirror: only then does its HTTP version say how
    /// that origin's transfers share connections. Nearly every answer is to the URL as
    /// given, compared as it is; another URL is parsed.
    private func answeredByOwnOrigin(_ t: TransferRecord, _ r: EngineResponse) -> Bool {
        if r.effectiveURL == t.snapshot.url || r.effectiveURL.isEmpty { return true }
        return (try? RequestURL.validate(r.effectiveURL))?.host == t.host
    }

    private func handleResponse(_ id: TransferID, _ r: EngineResponse) {
        guard let t = transfers[id] else { return }
        if r.rangesRefused, !t.isUpload, t.state == .running || t.stopInFlight {
            // Taken even from an attempt being stopped (paused meanwhile): its range map
            // is void either way, and a Resume must not continue it.
            t.segments = nil
            t.partIsPrefix = false // ranges beyond the connection's bytes may be on disk
            t.snapshot.resumable = false
            t.snapshot.bytesTransferred = max(r.startOffset, 0) // the bytes that still count
            if t.options.connections > 1, let reason = r.singleConnectionReason {
                logger.info("transfer \(t.id): one connection instead of \(t.options.connections): \(reason)")
                t.snapshot.singleConnectionReason = reason
            }
            publishChanged(t, stage: true)
            return
        }
        guard t.state == .running, !t.stopInFlight else { return }
        if r.answeredOnConnection {
            // A stream of a shared (HTTP/2) connection: if that connection goes, the
            // attempt is tried again at once (`attemptFailed`).
            t.onSharedConnection = r.multiplexed && !r.isFailure
        }
        if t.isAwaitingMetalink {
            // The document's response: only a failing status matters (its retry rules).
            // Its origin is not marked: the document is fetched from the `metalink` URL,
            // not `t.host`.
            if r.isFailure {
                t.retryAfter = r.retryAfter
                t.failedResponseStatus = r.status
                t.snapshot.httpStatus = UInt32(clamping: r.status)
            }
            return
        }
        if r.answeredOnConnection, t.options.connections <= 1, answeredByOwnOrigin(t, r) {
            // (Several connections are each one request, HTTP/1.1 by choice: they say
            // nothing of the origin.)
            index.setMultiplexing(HostKey(session: t.session, host: t.host), r.multiplexed)
        }
        if t.isUpload {
            handleUploadResponse(t, r)
            return
        }
        if let reason = r.singleConnectionReason {
            logger.info("transfer \(t.id): one connection instead of \(t.options.connections): \(reason)")
        }
        if r.isFailure {
            // The attempt fails next; keep the validators of the bytes on disk.
            t.retryAfter = r.retryAfter
            t.failedResponseStatus = r.status
            t.snapshot.httpStatus = UInt32(clamping: r.status)
            return
        }
        if r.startOffset == 0 && t.segments != nil {
            // The file changed on the server (or ranges stopped): the engine started over
            // on one connection, and the ranges on disk are void.
            t.segments = nil
            stageTransfer(t)
        }
        if t.options.connections > 1 { t.partIsPrefix = r.connections <= 1 && t.segments == nil }
        t.prefixLimit = nil // the engine cut the part file where this response starts
        t.durablePart = t.durablePart?.cut(at: r.startOffset, rangesKept: t.segments != nil)
        t.etag = r.etag
        t.lastModified = r.lastModified
        t.snapshot.httpStatus = UInt32(clamping: r.status)
        // Said on the bus (`SingleConnectionReason`) as well as in the log: a user who
        // asked for -x 8 sees why it runs on one.
        if t.options.connections > 1 { t.snapshot.singleConnectionReason = r.singleConnectionReason ?? "" }
        t.snapshot.bytesExpected = r.expectedTotal >= 0 ? r.expectedTotal : -1
        t.snapshot.resumable = r.acceptsRanges && t.validator != nil
        t.snapshot.bytesTransferred = max(r.startOffset, 0)
        let destination = t.destination
        if t.serverMayName {
            t.serverMayName = false
            if let header = r.contentDisposition, let name = ContentDisposition.fileName(from: header) {
                adoptServerName(t, name)
                followersTakeServerName(of: t, name, adopt: adoptServerName)
            }
        }
        if r.expectedTotal >= 0, !r.spaceReserved,
           let error = spaceShortage(t, bytesToWrite: r.expectedTotal - max(r.startOffset, 0)) {
            // It cannot fit: stop now rather than fill the disk; the part file stays.
            failTransfer(t, error)
            return
        }
        // The validators are stored at once where a crash that lost them would cost a
        // real download again; a small new file's go with its next write (a crash before
        // that fetches its few bytes again), so a batch of small files pays no write per
        // response. A new name from the server (and where its `.part` is) is always stored.
        let small = r.startOffset <= 0 && r.expectedTotal >= 0 && r.expectedTotal <= Self.smallFileBytes
        publishChanged(t, stage: t.destination != destination || !small)
        if r.startOffset > 0 && t.attemptOffset > 0 {
            emit(.resumedAtOffset(id, offset: r.startOffset, expectedTotal: t.snapshot.bytesExpected))
        }
    }

    /// Renames the download to the server's name (unique in its directory), moving the
    /// `.part` file if the engine has created it already.
    func adoptServerName(_ t: TransferRecord, _ name: String) {
        let newPath = resolver(except: t.id).uniquePath(directory: t.directory, name: name, overwrite: t.options.overwrite,
                                                        own: t.destination)
        guard newPath != t.destination else { return }
        let currentPart = t.enginePartPath ?? t.partPath
        if FileSystemChecks.exists(currentPart) {
            do {
                try movePartFile(from: currentPart, to: newPath + ".part", within: confinement(of: t))
            } catch {
                logger.warning("could not rename partial file to the server's name; keeping the URL's name",
                               metadata: ["transfer": "\(t.id)", "error": "\(error)"])
                return
            }
            t.enginePartPath = newPath + ".part"
        }
        t.snapshot.destination = newPath
        reindex(t)
    }

    private func handleProgress(_ id: TransferID, _ written: Int64, _ total: Int64, _ expected: Int64) {
        guard let t = transfers[id], !t.isAwaitingMetalink else { return } // the document's bytes are not the file's
        guard t.state == .running, !t.stopInFlight else {
            // A stopping attempt's last bytes: keep the count, say nothing.
            if t.state == .paused { t.snapshot.bytesTransferred = total }
            return
        }
        let now = environment.now()
        t.snapshot.bytesTransferred = total
        if expected >= 0 { t.snapshot.bytesExpected = expected }
        t.rate.add(bytes: written, at: now)
        t.snapshot.rate = t.rate.rate
        t.snapshot.expectedEnd = t.rate.expectedEnd(now: now, done: total, total: t.snapshot.bytesExpected)
        t.lastProgress = (total, t.snapshot.bytesExpected)
        checkpointProgress(t)
        emitProgress(t, bytesWritten: written)
        mirrorProgress(t, bytesWritten: written)
    }

    private func handleAttemptEnd(_ id: TransferID, _ outcome: EngineOutcome) {
        attemptEndedReleasingSource(id)
        guard let t = transfers[id] else {
            // A removed transfer's attempt ended: clean up what it may have left (a
            // sandboxed app's relative to its folder as opened and checked, as always).
            if let (paths, area) = detachedStops.removeValue(forKey: id) { removePartFiles(paths, within: area) }
            return
        }
        settlePartFile(t)
        switch t.life.attemptEnded() {
        case nil:
            return
        case .stopped:
            reindex(t) // a transfer queued meanwhile may start now
            // A `metalink` document's attempt: its file goes; the file's part is as it was.
            let documentOnly = t.isAwaitingMetalink
            if documentOnly { removePartFiles([metalinkDocumentPath(t)], within: confinement(of: t)) }
            // Paused or cancelled meanwhile (maybe resumed since): only the bytes count.
            if t.state == .cancelled {
                if !t.partFileHandedOver { deletePartFiles(t) }
            } else {
                // An upload keeps nothing: its next attempt sends the file from byte 0.
                if !documentOnly {
                    t.snapshot.bytesTransferred = t.isUpload ? 0 : t.keptBytes(prefix: outcome.bytesOnDisk)
                }
                stageTransfer(t)
                // A paused download's attempt has stopped: one more Progress with the bytes
                // kept, even when the last one had them. Delivered after the count is
                // stored, it tells a client that the pause has settled: what it shows is
                // what `Resume` continues from, here or after ferryd restarts.
                if t.state == .paused && !t.isUpload {
                    sendFinalProgress(t, from: t.snapshot.bytesTransferred, evenIfSent: true)
                }
            }
            releaseUploadSource(t)
            return
        case .current:
            break
        }
        if t.isAwaitingMetalink {
            metalinkDocumentEnded(t, outcome)
            return
        }
        switch outcome {
        case .succeeded(let bytes, _) where t.isUpload:
            finishUpload(t, bytesSent: bytes)
        case .succeeded(let bytes, let sha256):
            t.segments = nil
            finishSucceeded(t, bytesOnDisk: bytes, engineSHA256: sha256)
        case .failed(let error, let bytes):
            t.snapshot.bytesTransferred = t.isUpload ? bytes : t.keptBytes(prefix: bytes)
            attemptFailed(t, error)
        case .stopped(let bytes):
            // Not asked for (the engine shut down): the transfer waits for its turn again.
            t.snapshot.bytesTransferred = t.isUpload ? bytes : t.keptBytes(prefix: bytes)
            t.life.requeue()
            settle(t)
            publishChanged(t)
        }
    }

    /// A segmented download's ranges on disk: kept with the validator, and stored at
    /// most once a second (what a crash may lose is fetched again).
    private func handleSegments(_ id: TransferID, _ map: SegmentMap) {
        guard let t = transfers[id], !t.isUpload, t.state == .running || t.stopInFlight else { return }
        t.segments = map
        let now = environment.now()
        let interval = UInt64(min(max(environment.checkpointInterval, 0), 1) * 1_000_000)
        if now >= t.lastCheckpoint &+ interval || now < t.lastCheckpoint { stageTransfer(t) }
    }

    /// Bytes of the part file are on the disk itself: kept with the transfer and stored
    /// with its next checkpoint (they come every few seconds of a long download).
    private func handleDurable(_ id: TransferID, _ part: DurablePart) {
        guard let t = transfers[id], !t.isUpload, !t.isAwaitingMetalink, t.state == .running, !t.stopInFlight else { return }
        t.durablePart = part
        stageTransfer(t)
    }

    /// After a Content-Disposition rename the engine may have created the `.part` under
    /// the old name; bring it to the current one.
    private func settlePartFile(_ t: TransferRecord) {
        guard let enginePath = t.enginePartPath, enginePath != t.partPath else { return }
        if FileSystemChecks.exists(enginePath) {
            do {
                try movePartFile(from: enginePath, to: t.partPath, within: confinement(of: t))
            } catch {
                logger.warning("could not move partial file", metadata: ["transfer": "\(t.id)", "error": "\(error)"])
                return
            }
        }
        t.enginePartPath = t.partPath
        reindex(t)
    }
}

extension TransferCoordinator {
    /// Gives a download's `.part` file a new name (the server's, or the current one after
    /// a rename cut short) without ever replacing what is there. For a sandboxed
    /// application's download (`area`) both names are taken relative to their folders as
    /// opened and checked, so a folder swapped for a link meanwhile renames nothing
    /// outside the app's directory.
    func movePartFile(from source: String, to target: String, within area: SandboxArea?) throws {
        guard let from = SandboxArea.place(of: source, within: area) else { throw Self.outside(source, area) }
        defer { SandboxArea.release(from.folder) }
        guard let to = SandboxArea.place(of: target, within: area) else { throw Self.outside(target, area) }
        defer { SandboxArea.release(to.folder) }
        if try AtomicReplace.move(from, to: to) == .targetExists {
            throw CoreError.disk("could not move '\(source)' to '\(target)': a file is there")
        }
    }

    private static func outside(_ path: String, _ area: SandboxArea?) -> CoreError {
        .disk("the folder of '\(path)' is no longer inside the application's directory '\(area?.root ?? "")/'")
    }

    /// A download this small whose validators are lost in a crash is fetched again whole
    /// (`handleResponse`): a moment's work on any connection.
    static let smallFileBytes: Int64 = 256 << 10
}

extension EngineOutcome {
    /// The bytes the part file keeps, whatever the outcome.
    public var bytesOnDisk: Int64 {
        switch self {
        case .succeeded(let bytes, _), .failed(_, let bytes), .stopped(let bytes): return bytes
        }
    }
}
