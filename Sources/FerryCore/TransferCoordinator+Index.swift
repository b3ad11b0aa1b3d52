import Dispatch

/// Keeping the index and the timeline in step with the transfers, and the one timer
/// that serves every due moment.
extension TransferCoordinator {
    /// Applies the result of an input to `t.life`: the snapshot shows the new state,
    /// the index follows, and the actions are carried out. Every state change of a
    /// known transfer ends here.
    func settle(_ t: TransferRecord, _ actions: [TransferLife.Action] = []) {
        t.syncState()
        // A copy into a destination-fd is waited for only while its attempt's end is.
        if let delivery = t.delivery, t.life.attempt?.ended != true {
            delivery.cancel()
            t.delivery = nil
        }
        reindex(t)
        for action in actions {
            switch action {
            case .stopAttempt: if !withdrawUnstartedPOST(t.id) { engine.stop(t.id) }
            case .stopCopy: t.fetchedCopy?.cancel()
            case .wake(let at): timeline.add(t.id, .wake, at: at)
            }
        }
        dedupeSettled(t)
    }

    /// Brings the index up to date with `t` (after a change of state, priority, host,
    /// destination or stop in flight). Costs O(log n); a no-op when nothing it records changed.
    func reindex(_ t: TransferRecord) {
        let new = facts(t)
        guard new != t.indexed else { return }
        let wasStartable = t.indexed?.startable ?? false
        if t.snapshot.group != 0, t.indexed?.state != new.state {
            groupBook.memberMoved(t.snapshot.group, transfer: t.id, from: t.indexed?.state, to: new.state)
        }
        index.update(t.id, from: t.indexed, to: new)
        t.indexed = new
        if new.startable && !wasStartable { schedulingDue.queued(t.id) }
    }

    /// Takes `t` out of the index (it is being forgotten).
    func unindex(_ t: TransferRecord) {
        if t.snapshot.group != 0 { groupBook.memberMoved(t.snapshot.group, transfer: t.id, from: t.indexed?.state, to: nil) }
        index.update(t.id, from: t.indexed, to: nil)
        t.indexed = nil
    }

    /// What `t`'s connections count under (`HostKey`): its origin, or for a download that
    /// asks for several connections, its origin's count of such downloads. Their ranges
    /// go over HTTP/1.1, a connection each, even to an origin that multiplexes: counted
    /// as streams they would pass every limit (a hundred of them, six connections each,
    /// to one host). One that runs on one connection after all (the session's per-host
    /// limit is 1) still counts as a transfer of its own.
    func hostKey(_ t: TransferRecord) -> HostKey {
        HostKey(session: t.session, host: t.host, ownConnections: !t.isUpload && t.options.connections > 1)
    }

    private func facts(_ t: TransferRecord) -> TransferIndex.Facts {
        let claims = claimsNames(t)
        // A dedupe follower is never started and holds no connection: its leader fetches.
        let follower = dedupe.isFollower(t.id)
        return TransferIndex.Facts(session: t.session, state: t.state, key: hostKey(t),
                            priority: t.snapshot.priority, startable: t.life.isStartable && !follower,
                            holdsConnections: t.state == .running && !t.connectionsFreed && !t.life.isFollowing,
                            waitingForNetwork: t.isWaitingForNetwork && !follower,
                            resumedRun: t.runFromFailure && !t.state.isFinal,
                            claim: claims && !t.isUpload ? t.destination : nil,
                            extraClaim: claims ? t.enginePartPath.flatMap { $0 == t.partPath ? nil : $0 } : nil)
    }

    /// Whether `t` owns its final path and `.part` now (`holdsClaim`). A failed download
    /// owns them only while it has a partial file to resume from, or an attempt still
    /// stopping: one that failed before writing anything (a 404) or whose file was
    /// deleted (a checksum mismatch) leaves the name to the next download of it, as a
    /// retried `ferry get -o FILE` expects. Resumed, it takes a name again (`reclaimName`).
    /// One `stat` per change of a failed download; none for the others.
    func claimsNames(_ t: TransferRecord) -> Bool {
        guard t.holdsClaim else { return false }
        guard t.state == .failed, !t.isUpload else { return true }
        return t.stopInFlight || FileSystemChecks.exists(t.enginePartPath ?? t.partPath)
    }

    /// A failed download that left its name (`claimsNames`) is resumed: it takes its name
    /// again if that is still free, else a free one beside it (as a new download would:
    /// another transfer may have the name now, or a file may be there).
    func reclaimName(_ t: TransferRecord) {
        guard !t.isUpload, t.state == .failed, t.indexed?.claim == nil else { return }
        let path = resolver(except: t.id).uniquePath(directory: FileSystemChecks.directoryName(t.destination),
                                                     name: FileSystemChecks.baseName(t.destination), overwrite: t.options.overwrite)
        guard path != t.destination else { return }
        t.snapshot.destination = path
        t.enginePartPath = nil
    }

    // MARK: - The timeline

    /// Puts the transfer's resource deadline on the timeline, unless it is there already.
    func watchDeadline(_ t: TransferRecord) {
        guard let deadline = resourceDeadline(t), deadline != t.deadlineOnTimeline else { return }
        t.deadlineOnTimeline = deadline
        timeline.add(t.id, .deadline, at: deadline)
    }

    /// Does what has come due by the environment's clock: queues waiting transfers whose
    /// time has come, fails those whose resource-timeout ran out, and ends a batch that
    /// has settled. The timer calls it; tests call it after moving a fake clock.
    func wakeDueTransfers() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !lifecycle.isShutDown else { return }
        let now = environment.now()
        let due = timeline.takeDue(now: now)
        guard !due.isEmpty else {
            armTimeline()
            return
        }
        mutate {
            for entry in due {
                if entry.kind == .settle {
                    if entry.due == managerBatch.settleDue { endSettledBatch() }
                    continue
                }
                if entry.kind == .schedule {
                    scheduleEdgeCame(entry.due)
                    continue
                }
                guard let t = transfers[entry.id] else { continue }
                switch entry.kind {
                case .wake:
                    guard t.life.wake(now: now) else { continue }
                    settle(t)
                    publishChanged(t)
                case .deadline:
                    guard t.state.isActive else { continue }
                    if entry.due == t.deadlineOnTimeline { t.deadlineOnTimeline = 0 }
                    guard let deadline = resourceDeadline(t), deadline <= now else {
                        watchDeadline(t) // the session's resource-timeout changed meanwhile
                        continue
                    }
                    failTransfer(t, resourceTimeoutError(t))
                case .settle, .schedule:
                    continue
                }
            }
        }
    }

    /// Arms the one timer for the earliest due moment (real time; the decision when it
    /// fires uses the environment's clock). Nothing due: no timer, no wake-ups.
    func armTimeline() {
        guard lifecycle.isRunning else { return }
        wakeTimer.arm(for: timeline.nextDue, now: environment.now(), makeTimer: makeWakeTimer)
    }

    private func makeWakeTimer() -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            self.wakeTimer.fired()
            self.wakeDueTransfers()
        }
        timer.schedule(deadline: .distantFuture)
        timer.resume()
        return timer
    }

    // MARK: - Batches

    /// Called when the last live transfer may have gone: the manager's batch ends once
    /// nothing has been queued, waiting or running for the settle time (so a script that
    /// queues files one call at a time ends one batch, not many).
    func managerBatchMayHaveEnded() {
        guard managerBatch.hasOutcomes, index.activeTotal == 0 else { return }
        let settle = environment.batchSettleTime
        guard settle > 0 else {
            endSettledBatch()
            return
        }
        let due = environment.now() &+ Self.microseconds(settle)
        managerBatch.settle(at: due)
        timeline.add(0, .settle, at: due)
    }

    /// Sends the manager's AllFinished if the batch is still over.
    func endSettledBatch() {
        managerBatch.stopSettling()
        guard managerBatch.hasOutcomes, index.activeTotal == 0 else { return }
        publishAggregates() // the counts that say so first
        let (counts, privateCounts) = managerBatch.end()
        emit(.allFinished(BatchEnd(counts: counts, notificationsEnabled: managerSettings.notificationsEnabled, privateCounts: privateCounts)))
    }
}
