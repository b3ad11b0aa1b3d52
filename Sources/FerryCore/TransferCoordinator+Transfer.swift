import Dispatch

extension TransferCoordinator {
    /// The transfer's properties, current (progress included); nil when unknown.
    public func transfer(_ id: TransferID) -> TransferSnapshot? {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return transfers[id]?.snapshot
    }

    /// Stops a queued, waiting or running transfer, keeping its partial file.
    /// - Returns: resume data for `resumeDownload`; empty when the server cannot resume
    ///   (no range support or no validator).
    public func pause(_ id: TransferID) throws -> [UInt8] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        try TransferStateMachine.check(.pause, state: t.state, transfer: id)
        mutate { pauseTransfer(t) }
        let data = resumeData(for: t)
        if !data.isEmpty { t.resumeDataGiven = true }
        return data
    }

    /// Queues a paused or failed transfer again; it continues from its partial file
    /// when the server's validator allows.
    /// A failed transfer starts a new run, which ends with one more completion event:
    /// it is refused (`LimitExceeded`) when its session has no room for it
    /// (`eventRoom`). A paused one only continues its run.
    public func resume(_ id: TransferID) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        try TransferStateMachine.check(.resume, state: t.state, transfer: id)
        if t.state == .failed { try checkRoomForEvents(session: t.session) }
        mutate { resumeTransfer(t) }
    }

    /// Stops a transfer for good and deletes its partial file.
    public func cancel(_ id: TransferID) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        try TransferStateMachine.check(.cancel, state: t.state, transfer: id)
        mutate { cancelTransfer(t, reason: .cancelled("Cancelled by the user"), deletePart: true) }
    }

    /// Forgets a completed, failed or cancelled transfer. A completed download's file
    /// stays; a failed one's partial file is deleted. Its pending events stay until
    /// acknowledged.
    public func remove(_ id: TransferID) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        try TransferStateMachine.check(.remove, state: t.state, transfer: id)
        mutate {
            forget(t)
            if let s = sessions[t.session] { finishClosingIfDone(s) }
        }
    }

    /// Points a paused or failed download at a new URL, keeping its bytes (used again
    /// if the server's validator still matches).
    public func setURL(_ id: TransferID, url: String) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        try TransferStateMachine.check(.setURL, state: t.state, transfer: id)
        guard t.snapshot.kind == .download else {
            throw CoreError.invalidState("transfer \(id) is an upload; only downloads can be given a new URL")
        }
        let requestURL = try validateRequestURL(url)
        mutate {
            t.snapshot.url = url
            t.host = requestURL.host
            reindex(t)
            publishChanged(t)
        }
    }

    /// -1 low, 0 normal, 1 high; takes effect at the next scheduling.
    public func setPriority(_ id: TransferID, _ p: Int32) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        try DownloadOptionsValidation.validatePriority(p)
        mutate {
            t.snapshot.priority = p
            reindex(t)
            publishChanged(t)
        }
    }

    /// Bytes/s for this transfer, 0 = none (global and session limits still apply).
    public func setTransferSpeedLimit(_ id: TransferID, _ bps: UInt64) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let t = try record(id)
        mutate {
            t.snapshot.speedLimit = bps
            schedulingDue.limitChanged()
            publishChanged(t)
        }
    }

    // MARK: - The actions, without checks (callers checked the state)

    func pauseTransfer(_ t: TransferRecord) {
        settle(t, t.life.pause())
        publishChanged(t)
        if let s = sessions[t.session] { announceEndedBatches(of: s) }
    }

    func resumeTransfer(_ t: TransferRecord) {
        clearClientExitPause(t)
        if t.state == .failed {
            reclaimName(t)
            t.runFromFailure = true
            t.showError(nil)
            t.snapshot.completed = 0
            uncountFailure(t)
        }
        // A client's start: a fresh set of retries and a fresh resource-timeout.
        t.retriesUsed = 0
        t.signInWaits = 0
        t.resourceStarted = 0
        // A start-after still in the future applies again; a retry wait does not (the
        // user asked for it now).
        settle(t, t.life.resume(startAfter: t.options.startAfter, now: environment.now()))
        publishChanged(t)
    }

    /// A failed transfer goes again: its failure leaves the batches that have not
    /// ended yet, so that its next outcome is its only one there (a link renewed with
    /// `SetUrl` and resumed within the settle time is one download, not a failure and
    /// a success).
    func uncountFailure(_ t: TransferRecord) {
        guard let counted = t.failureCountedIn else { return }
        t.failureCountedIn = nil
        managerBatch.uncountFailure(countedIn: counted.manager,
                                    isPrivate: sessions[t.session]?.configuration.privateSignals == true)
        if let s = sessions[t.session], counted.session == s.batchNumber, s.batch.failed > 0 { s.batch.failed -= 1 }
    }

    /// Cancels (user, session close, or takeover by resume data) and reports it as a
    /// completion.
    func cancelTransfer(_ t: TransferRecord, reason: CoreError, deletePart: Bool) {
        let actions = t.life.cancel()
        clearClientExitPause(t)
        // A takeover by resume data keeps the partial file: a stopping attempt's end
        // must not delete what the new transfer now owns.
        t.partFileHandedOver = !deletePart
        if deletePart { deletePartFiles(t) }
        settle(t, actions)
        t.showError(reason)
        t.snapshot.completed = environment.now()
        let serial = appendEvent(PendingEvent(serial: 0, transfer: t.id, kind: .cancelled, errorName: reason.name,
                                              errorMessage: reason.message, bytes: t.snapshot.bytesTransferred),
                                 session: t.session)
        publishChanged(t)
        emitCompleted(t, serial: serial, error: reason)
        reachedFinalState(t)
    }

    /// Drops a final transfer from the core and announces it.
    func forget(_ t: TransferRecord) {
        var leftovers: [String] = []
        if t.state == .failed {
            deletePartFiles(t)
            leftovers = partPaths(t)
        } else if t.state == .cancelled && !t.partFileHandedOver {
            leftovers = partPaths(t)
        }
        if t.stopInFlight { detachedStops[t.id] = (leftovers, confinement(of: t)) }
        releaseUploadSource(t, forgetting: true)
        releaseDestinationFD(t, forgetting: true)
        unindex(t)
        if isPersistent(t.session) { journal.stage(.deleteTransfer(t.id)) }
        transfers[t.id] = nil
        emit(.transferRemoved(t.id, session: t.session))
    }

    /// The `.part` file, and where the engine may still be writing if that differs.
    func partPaths(_ t: TransferRecord) -> [String] {
        if t.isUpload { return [] } // its destination is the source file: never deleted
        var paths = [t.partPath]
        if let enginePath = t.enginePartPath, enginePath != t.partPath { paths.append(enginePath) }
        // A `metalink` download removed or cancelled while it fetched its document.
        if t.isAwaitingMetalink { paths.append(metalinkDocumentPath(t)) }
        return paths
    }

    func deletePartFiles(_ t: TransferRecord) {
        t.segments = nil
        // A sandboxed application's are removed relative to their folder as opened and
        // checked, never through a folder swapped for a link.
        removePartFiles(partPaths(t), within: confinement(of: t))
    }

    /// Removes `.part` files: for a sandboxed application's transfer (`area`), each
    /// relative to its folder as opened and checked, never through a folder swapped
    /// for a link.
    func removePartFiles(_ paths: [String], within area: SandboxArea?) {
        for path in paths where !(area?.removeIfPresent(path) ?? FileSystemChecks.removeIfPresent(path, fileManager: fileManager)) {
            logger.warning("could not delete partial file", metadata: ["path": "\(path)"])
        }
    }

    func resumeData(for t: TransferRecord) -> [UInt8] {
        guard !t.isUpload, t.snapshot.resumable, t.validator != nil, t.partIsContinuable else { return [] }
        let offset = t.continuableBytes(ofPartSize: FileSystemChecks.fileSize(t.partPath, within: confinement(of: t)) ?? 0)
        let data = ResumeData(url: t.snapshot.url, destination: t.destination, partPath: t.partPath, offset: offset,
                              etag: t.etag, lastModified: t.lastModified, expected: t.snapshot.bytesExpected,
                              session: sessions[t.session]?.identifier ?? "", created: t.snapshot.created)
        var withRanges = data
        withRanges.segments = t.segments?.encoded
        let encoded = withRanges.encoded(sealedWith: environment.resumeDataSeal)
        // The client may continue it after this transfer is gone: never removed as forgotten.
        if !encoded.isEmpty { PartFileMark.remove(t.partPath) }
        return encoded
    }
}
