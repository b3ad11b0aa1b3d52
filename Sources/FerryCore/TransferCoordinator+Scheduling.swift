import Dispatch
import Foundation

extension TransferCoordinator {
    /// Starts what the limits allow and brings every running transfer's speed limit up
    /// to date. Runs at the end of every change (`mutate`). Costs O(log n) per transfer
    /// it starts, plus a look at each host group's head: the queue is an index, not a scan.
    func schedule() {
        guard lifecycle.isRunning else { return }
        judgeNewlyQueued()
        var starting: [TransferRecord] = []
        while let id = index.nextToStart(maxConnections: Int(managerSettings.maxConcurrentTransfers), perHostLimit: { [unowned self] session in
            Int(self.sessions[session]?.configuration.maxConnectionsPerHost ?? 6)
        }), let t = transfers[id] {
            if let reason = networkBlocker(t) {
                waitForNetwork(t, reason)
            } else if let error = startBlocker(t) {
                // Refused at the start (no disk space, resource-timeout over): it fails
                // and frees its place for the next one.
                failTransfer(t, error)
            } else {
                prepareAttempt(t)
                starting.append(t)
            }
        }
        applySpeedLimits(starting: Set(starting.map(\.id)))
        for t in starting {
            publishChanged(t)
            let request = request(for: t)
            t.onSharedConnection = startsAsStream(t, request)
            if t.isPOST {
                commitHold.postStarts.append((t.snapshot.attempts, request))
            } else {
                engine.start(request)
            }
        }
    }

    /// Marks a queued transfer running and decides where its attempt starts: after the
    /// bytes in the part file when the server can resume and a validator is known, else
    /// from zero.
    private func prepareAttempt(_ t: TransferRecord) {
        let now = environment.now()
        var offset: Int64 = 0
        let kind: TransferLife.Attempt.Kind
        if t.isUpload {
            kind = .upload // always from byte 0
            t.enginePartPath = nil
        } else if t.isAwaitingMetalink {
            // This attempt fetches the `metalink` document (into its own file); the
            // file's part, ranges and validators wait for the attempt after it.
            kind = .download
            t.enginePartPath = t.partPath
        } else {
            let size = FileSystemChecks.fileSize(t.partPath, within: confinement(of: t)) ?? 0
            if t.segments != nil && (t.validator == nil || size == 0) { t.segments = nil }
            if let map = t.segments {
                // The engine asks for the missing ranges only.
                offset = map.bytesDone
                logger.debug("transfer \(t.id): continuing \(map.done.count) ranges (\(map.bytesDone) of \(map.total) bytes on disk)")
            } else if t.snapshot.resumable, t.validator != nil, size > 0, t.partIsContinuable {
                offset = t.continuableBytes(ofPartSize: size)
            }
            // (A download with several connections, no range map and no attempt known to
            // have run on one connection starts over: its part file may have holes, so
            // its size says nothing.)
            let connections = connectionCount(t)
            kind = connections > 1 ? .segmented(connections: UInt32(connections)) : .download
            t.snapshot.connectionLimitReason = connections < Int(t.options.connections)
                ? "\(connections) of the \(t.options.connections) connections asked for: the session's max-connections-per-host is \(connections)"
                : ""
            t.enginePartPath = t.partPath
        }
        t.attemptOffset = offset
        // Starting over: what was synced of the old part file says nothing of the new.
        if offset == 0 && t.segments == nil && !t.isAwaitingMetalink { t.durablePart = nil }
        t.connectionsFreed = false
        t.snapshot.attempts += 1
        t.life.start(TransferLife.Attempt(kind: kind, number: t.snapshot.attempts, offset: offset))
        settle(t)
        if t.snapshot.started == 0 { t.snapshot.started = now }
        t.retryAfter = nil
        t.failedResponseStatus = nil
        t.postAccepted = false
        t.attemptBehindPortal = network.portal
        if t.resourceStarted == 0 { t.resourceStarted = now }
        watchDeadline(t)
        t.snapshot.bytesTransferred = offset
        t.rate.reset(at: now)
        t.lastProgress = nil
    }

    /// Whether `request` is taken for a stream of its origin's shared (HTTP/2) connection
    /// before its answer: if that connection goes, the loss is not this transfer's
    /// (`attemptFailed`); its response says again (HTTP/1.1: not shared). One request to
    /// an origin that answers over HTTP/2 is, unless the engine tells of that request's
    /// streams itself (the ALPN it negotiated: a request on one handle); several
    /// connections are HTTP/1.1, each a request of its own.
    private func startsAsStream(_ t: TransferRecord, _ request: EngineRequest) -> Bool {
        guard request.connections <= 1, !engine.reportsUnansweredStreams || request.isRanged else { return false }
        return index.isMultiplexing(HostKey(session: t.session, host: t.host))
    }

    func request(for t: TransferRecord) -> EngineRequest {
        if t.isAwaitingMetalink, let url = t.options.metalink { return metalinkDocumentRequest(t, url: url) }
        let config = sessions[t.session]?.configuration ?? SessionConfiguration()
        var request = EngineRequest(id: t.id, url: t.metalink?.currentURL ?? t.snapshot.url,
                                    headers: HeaderFields.merge(session: config.headers, transfer: t.options.headers,
                                                                excluding: t.isUpload ? HeaderFields.uploadBody : []),
                                    partPath: t.partPath, offset: t.attemptOffset,
                                    ifRange: t.attemptOffset > 0 ? t.validator : nil,
                                    speedLimit: t.appliedSpeedLimit, requestTimeout: config.requestTimeout,
                                    proxy: config.proxy, computeSHA256: t.expectedSHA256 != nil)
        request.upload = engineUpload(t)
        if !t.isUpload {
            request.connections = connectionCount(t)
            request.mirrors = t.options.mirrors
            request.pieces = t.options.pieces
            if let resolved = t.metalink {
                // The document's other URLs are the attempt's mirrors, its pieces its
                // pieces (the options' own come first).
                request.mirrors = resolved.mirrors(adding: t.options.mirrors)
                if request.pieces == nil { request.pieces = resolved.pieceList }
            }
            if t.attemptOffset > 0 || t.segments != nil { request.knownTotal = t.snapshot.bytesExpected }
            if let map = t.segments, let validator = t.validator {
                request.segments = map
                request.ifRange = validator
                request.offset = 0
            }
        }
        request.cookieJar = cookieJar(for: t.session)
        request.confinedTo = confinement(of: t)
        return request
    }

    /// Where a sandboxed application's transfer may write by path: its app directory;
    /// nil for an unconfined caller's, and for a `destination-fd` download's partial
    /// file (in ferryd's own folder, not a path the app named).
    func confinement(of t: TransferRecord) -> SandboxArea? {
        confinement(of: t, owner: sessions[t.session]?.owner)
    }

    /// The same for a transfer whose session's owner (its app id, nil for an
    /// unconfined caller) is known (while restoring).
    func confinement(of t: TransferRecord, owner: String?) -> SandboxArea? {
        guard let owner, !isDescriptorDownload(t) else { return nil }
        return SandboxArea(appID: owner)
    }

    /// A download's connections: its `connections` option, at most the session's
    /// `max-connections-per-host` (one transfer never opens more than the host limit).
    /// The transfer counts once against `MaxConcurrentTransfers`.
    func connectionCount(_ t: TransferRecord) -> Int {
        let perHost = Int(sessions[t.session]?.configuration.maxConnectionsPerHost ?? 6)
        return max(1, min(Int(t.options.connections), perHost))
    }

    /// Recomputes each running transfer's share of the limits; tells the engine about
    /// changes for attempts already under way (`starting` ones get it in their request).
    /// O(running transfers), and only when the running set or a limit changed since the
    /// last time (`schedulingDue`): not on every progress event.
    private func applySpeedLimits(starting: Set<TransferID>) {
        guard schedulingDue.sharesLimits(starting: !starting.isEmpty, runningChanges: index.runningChanges) else { return }
        let running = index.running
        for id in running {
            guard let t = transfers[id], !t.life.isFollowing else { continue }
            let limit = SpeedLimitAllocator.effectiveLimit(
                transfer: t.snapshot.speedLimit, session: sessions[t.session]?.configuration.speedLimit ?? 0,
                runningInSession: max(index.runningCount(session: t.session), 1), global: effectiveGlobalSpeedLimit,
                runningOverall: running.count)
            if starting.contains(t.id) {
                t.appliedSpeedLimit = limit
            } else if limit != t.appliedSpeedLimit && !t.stopInFlight {
                t.appliedSpeedLimit = limit
                engine.setSpeedLimit(t.id, bytesPerSecond: limit)
            }
        }
    }
}
