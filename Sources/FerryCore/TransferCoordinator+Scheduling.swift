import Dispatch
import Foundation

extension TransferCoordinator {
    /// Starts what the limits allow and brings every running transfer's speed limit up
    /// to date. Runs at the end of every change (`mutate`).
    func schedule() {
        guard isStarted, !isShutDown else { return }
        applyNetworkPolicy()
        // Picks refused at the start (no disk space, resource-timeout over) fail and
        // free their places for the next round.
        var refused = true
        while refused {
            refused = false
            let running = transfers.values.filter { $0.state == .running }
            // A transfer whose previous attempt is still stopping waits for it to end.
            let queued = transfers.values.filter { $0.state == .queued && !$0.stopInFlight }
            let scheduler = TransferScheduler(maxConcurrent: Int(maxConcurrentTransfers))
            let picks = scheduler.select(queued: queued.map(schedulerEntry), running: running.map(schedulerEntry)) { [unowned self] id in
                Int(self.sessions[id]?.configuration.maxConnectionsPerHost ?? 6)
            }
            var starting: [TransferRecord] = []
            for t in picks.compactMap({ transfers[$0] }) {
                if let error = startBlocker(t) {
                    refused = true
                    failTransfer(t, error)
                } else {
                    starting.append(t)
                }
            }
            for t in starting { prepareAttempt(t) }
            applySpeedLimits(starting: Set(starting.map(\.id)))
            for t in starting {
                publishChanged(t)
                engine.start(request(for: t))
            }
        }
    }

    private func schedulerEntry(_ t: TransferRecord) -> TransferScheduler.Entry {
        TransferScheduler.Entry(id: t.id, session: t.session, host: t.host, priority: t.snapshot.priority)
    }

    /// Marks a queued transfer running and decides where its attempt starts: after the
    /// bytes in the part file when the server can resume and a validator is known, else
    /// from zero.
    private func prepareAttempt(_ t: TransferRecord) {
        let now = environment.now()
        var offset: Int64 = 0
        if t.snapshot.resumable, t.validator != nil,
           let size = FileSystemChecks.fileSize(t.partPath, fileManager: fileManager), size > 0 {
            offset = size
        }
        t.attemptOffset = offset
        t.enginePartPath = t.partPath
        t.move(to: .running)
        t.snapshot.attempts += 1
        if t.snapshot.started == 0 { t.snapshot.started = now }
        t.retryAfter = nil
        t.failedResponseStatus = nil
        if t.resourceStarted == 0 { t.resourceStarted = now }
        if t.deadlineTimer == nil { armDeadlineTimer(t) }
        t.snapshot.bytesTransferred = offset
        t.rate.reset(at: now)
        t.lastProgress = nil
    }

    func request(for t: TransferRecord) -> EngineRequest {
        let config = sessions[t.session]?.configuration ?? SessionConfiguration()
        return EngineRequest(id: t.id, url: t.snapshot.url,
                             headers: HeaderFields.merge(session: config.headers, transfer: t.options.headers),
                             partPath: t.partPath, offset: t.attemptOffset,
                             ifRange: t.attemptOffset > 0 ? t.validator : nil,
                             speedLimit: t.appliedSpeedLimit, requestTimeout: config.requestTimeout,
                             proxy: config.proxy, computeSHA256: t.options.sha256 != nil)
    }

    /// Recomputes each running transfer's share of the limits; tells the engine about
    /// changes for attempts already under way (`starting` ones get it in their request).
    private func applySpeedLimits(starting: Set<TransferID>) {
        let running = transfers.values.filter { $0.state == .running }
        var perSession: [SessionID: Int] = [:]
        for t in running { perSession[t.session, default: 0] += 1 }
        for t in running {
            let limit = SpeedLimitAllocator.effectiveLimit(
                transfer: t.snapshot.speedLimit, session: sessions[t.session]?.configuration.speedLimit ?? 0,
                runningInSession: perSession[t.session] ?? 1, global: globalSpeedLimit, runningOverall: running.count)
            if starting.contains(t.id) {
                t.appliedSpeedLimit = limit
            } else if limit != t.appliedSpeedLimit && !t.stopInFlight {
                t.appliedSpeedLimit = limit
                engine.setSpeedLimit(t.id, bytesPerSecond: limit)
            }
        }
    }

    // MARK: - Waiting (start-after, retry)

    /// Wakes `t` at `t.notBefore`. The timer runs on real time; the decision uses the
    /// environment's clock, so tests drive it with a fake clock and `wakeDueTransfers`.
    func armDueTimer(_ t: TransferRecord) {
        t.cancelDueTimer()
        guard !isShutDown else { return }
        let now = environment.now()
        let delayMicros = t.notBefore > now ? t.notBefore - now : 0
        // Clamp far-off times to a year; the timer re-arms when it fires early.
        let delay = Int(min(delayMicros, 365 * 86_400 * 1_000_000))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .microseconds(delay), leeway: .milliseconds(100))
        let id = t.id
        timer.setEventHandler { [weak self] in self?.dueTimerFired(id) }
        timer.resume()
        t.dueTimer = timer
    }

    private func dueTimerFired(_ id: TransferID) {
        guard let t = transfers[id], t.state == .waiting, !isShutDown else { return }
        if t.notBefore <= environment.now() {
            wakeDueTransfers()
        } else {
            armDueTimer(t)
        }
    }

    /// Queues every waiting transfer whose time has come (by the environment's clock).
    func wakeDueTransfers() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isShutDown else { return }
        let now = environment.now()
        mutate {
            for t in transfers.values.sorted(by: { $0.id < $1.id }) where t.state == .waiting && t.notBefore <= now {
                t.cancelDueTimer()
                t.move(to: .queued)
                publishChanged(t)
            }
        }
    }
}
