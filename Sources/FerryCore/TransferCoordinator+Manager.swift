import Dispatch

extension TransferCoordinator {
    /// Opens the session with this identifier, or re-attaches to it (`created` false):
    /// keys present in `configuration` replace the stored values.
    /// - Throws: `.invalidArgument` (identifier, headers, proxy, timeouts, limits),
    ///   `.invalidDestination` (directory).
    /// - Parameter owner: the app id of a sandboxed caller (nil: unconfined); a sandboxed
    ///   caller may re-open only sessions it owns (`.accessDenied` otherwise).
    public func openSession(identifier: String, configuration: SessionConfigurationUpdate,
                            owner: String? = nil) throws -> (id: SessionID, created: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        // A sandboxed caller's session is private whatever it asks for.
        var configuration = configuration
        if owner != nil { configuration.privateSignals = true }
        try SessionValidation.validateIdentifier(identifier)
        try SessionOwnership.checkIdentifier(identifier, by: owner)
        try SessionValidation.validate(configuration, fileManager: fileManager)
        if let proxy = configuration.proxy, !proxy.isEmpty, let refusal = engineRefusal(of: proxy) {
            // As a request URL: refused now, not failed as Network after every retry.
            throw CoreError.invalidArgument("proxy " + refusal)
        }
        return try mutate {
            // A closing session no longer answers to its identifier: opening it again
            // makes a new session.
            if let existing = sessions.values.first(where: { $0.identifier == identifier && !$0.isClosing }) {
                try SessionOwnership.checkReopen(existing, by: owner)
                try SessionValidation.checkHiddenValues(configuration.headers, held: existing.configuration.headers, identifier: identifier)
                var config = existing.configuration
                if config.apply(configuration) {
                    try persistConfiguration(existing, config)
                    schedulingDue.limitChanged()
                    existing.publishedActive = activeCount(existing.id)
                    emit(.sessionChanged(snapshot(of: existing)))
                    // allow-metered and resource-timeout may judge its transfers anew.
                    let own = index.ids(session: existing.id)
                    applyNetworkPolicy(to: own)
                    for id in own { if let t = transfers[id], t.state.isActive { watchDeadline(t) } }
                }
                return (existing.id, false)
            }
            try SessionValidation.checkHiddenValues(configuration.headers, held: [:], identifier: identifier)
            var config = SessionConfiguration()
            _ = config.apply(configuration)
            let session = SessionRecord(id: numbering.nextSessionID, identifier: identifier, configuration: config)
            session.owner = owner
            var next = counters
            next.nextSessionID = max(next.nextSessionID, session.id + 1)
            if config.persistent {
                try writeNow([.saveSession(storedSession(session))], counters: next)
            } else {
                reserveIDs(session: session.id)
            }
            numbering.tookSession(session.id)
            sessions[session.id] = session
            emit(.sessionAdded(snapshot(of: session)))
            return (session.id, true)
        }
    }

    /// Stores a re-opened session's new configuration before it takes effect. A session
    /// that becomes persistent is written with its transfers and pending events; one
    /// that becomes ephemeral is deleted from the store.
    /// - Throws: `StoreError`; then nothing has changed.
    private func persistConfiguration(_ s: SessionRecord, _ config: SessionConfiguration) throws {
        let was = s.configuration.persistent
        let own = index.ids(session: s.id).compactMap { transfers[$0] }
        var updated = storedSession(s)
        updated.configuration = config
        if config.persistent {
            var operations: [StoreOperation] = [.saveSession(updated)]
            if !was {
                operations += own.map { .saveTransfer($0.stored) }
                operations += s.pendingEvents.map { .appendEvent(s.id, $0) }
            }
            try writeNow(operations, counters: counters)
        } else if was {
            try writeNow([.deleteSession(s.id)], counters: counters)
        }
        s.configuration = config
        if config.persistent != was {
            for t in own {
                t.persistedDigest = config.persistent ? t.stored.hashValue : nil
                t.lastCheckpoint = environment.now()
            }
        }
    }

    /// All open sessions (including closing ones), oldest first.
    public var sessionIDs: [SessionID] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return sessions.keys.sorted()
    }

    /// Transfers of one session, or of all when nil; oldest first.
    public func transferIDs(session: SessionID? = nil) throws -> [TransferID] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return try records(in: session).map(\.id)
    }

    /// How many transfers the session holds (any state, until removed); O(1).
    public func transferCount(session: SessionID) throws -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        _ = try sessionRecord(session)
        return index.count(session: session)
    }

    /// Pauses every queued, waiting or running transfer (of one session or all).
    public func pauseAll(session: SessionID? = nil) throws {
        commitWaiting()
        try forEach(.pause, in: session) { pauseTransfer($0) }
    }

    /// Resumes every paused transfer and every failed one (of one session or all), the
    /// failed ones oldest first while their session has room for the event each will
    /// add (`eventRoom`); those beyond it stay failed (`resume` says why).
    public func resumeAll(session: SessionID? = nil) throws {
        commitWaiting()
        try forEach(.resume, in: session) { t in
            // Each resumed failure takes its room at once (the index counts its run).
            if t.state == .failed && eventRoom(session: t.session) < 1 { return }
            resumeTransfer(t)
        }
    }

    /// Cancels every transfer that is not final yet (of one session or all).
    public func cancelAll(session: SessionID? = nil) throws {
        commitWaiting()
        try forEach(.cancel, in: session) { cancelTransfer($0, reason: .cancelled("Cancelled by the user"), deletePart: true) }
    }

    /// `body` on each transfer (of one session or all) that `action` applies to, in one mutation.
    private func forEach(_ action: TransferStateMachine.Action, in session: SessionID?,
                         _ body: (TransferRecord) -> Void) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let targets = try records(in: session)
        mutate {
            for t in targets where action.allowedStates.contains(t.state) { body(t) }
        }
    }

    /// The Manager's properties, current: counts from the index, rates summed over the
    /// running transfers only.
    public var manager: ManagerSnapshot {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        var download: UInt64 = 0, upload: UInt64 = 0
        for id in index.running {
            // A dedupe follower shows its leader's rate: counted once, with the leader.
            guard let t = transfers[id], !t.life.isFollowing else { continue }
            if t.snapshot.kind == .upload { upload &+= t.snapshot.rate } else { download &+= t.snapshot.rate }
        }
        return ManagerSnapshot(activeTransfers: UInt32(index.running.count), queuedTransfers: UInt32(index.queuedOrWaiting),
                               downloadRate: download, uploadRate: upload,
                               maxConcurrentTransfers: managerSettings.maxConcurrentTransfers,
                               speedLimit: managerSettings.speedLimit,
                               notificationsEnabled: managerSettings.notificationsEnabled, schedule: discretion.schedule.windows)
    }

    /// How many transfers may run at once, 1-256; raising it starts queued ones at once,
    /// lowering it lets running ones finish.
    public func setMaxConcurrentTransfers(_ n: UInt32) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        var changed = managerSettings
        try changed.setMaxConcurrentTransfers(n)
        changeSettings { managerSettings = changed }
    }

    /// Bytes/s over all transfers, 0 = none; shared evenly by the running ones.
    public func setSpeedLimit(_ bps: UInt64) {
        commitWaiting()
        changeSettings {
            managerSettings.speedLimit = bps
            schedulingDue.limitChanged()
        }
    }

    /// Whether AllFinished posts a desktop notification (the notifier reads it).
    public func setNotificationsEnabled(_ on: Bool) {
        commitWaiting()
        changeSettings { managerSettings.notificationsEnabled = on }
    }

    /// One change of the manager's settings, stored with them.
    private func changeSettings(_ change: () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        mutate {
            change()
            stageSettings()
        }
    }
}
