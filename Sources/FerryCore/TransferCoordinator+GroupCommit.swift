import Dispatch

/// When changes brought by engine events are stored (`CoreEnvironment.commitWindow`).
///
/// Every change's store operations are written before its events leave
/// (`deliverEvents`), and a finished download's final path is written before it is
/// moved (`finishPendingMoves`). A busy batch of small downloads makes a change every
/// few milliseconds, each with one or two transactions and their `fdatasync`s: most of
/// the store's cost. So a change made of engine events, ending within `commitWindow` of
/// the last write, waits: its operations stay staged, its finished downloads unmoved and
/// its events unsent, and one deferred change at the window's end writes, moves and
/// announces for all the changes that waited — the same order, the same promises (nothing
/// is announced before it is stored; no file takes its final name before its path is
/// stored), fewer writes.
///
/// Only engine events wait. Every public call of the core first finishes what waits
/// (`commitWaiting`: reads too, so that no answer reflects what is not stored yet), and
/// any other change (a timer, a restore) does so as it begins; its own change is written
/// and announced as it ends, before the call is answered.
struct CommitHold {
    /// When the store was last written (monotonic nanoseconds); 0: never.
    var lastWrite: UInt64 = 0
    /// A deferred change is scheduled for the end of the window.
    var armed = false
    /// Changes wait (their writes, moves or events): until a change that does not wait
    /// ends, or the deferred one.
    var waiting = false
    /// POST uploads a change started, handed to the engine only once the store holds
    /// them running (`startStoredPOSTs`), with the attempt each was started for.
    var postStarts: [(attempt: UInt32, request: EngineRequest)] = []
}

extension TransferCoordinator {
    /// Notes a store write that worked (the window starts again from it).
    func noteStoreWritten() {
        guard environment.commitWindow > 0 else { return }
        commitHold.lastWrite = DispatchTime.now().uptimeNanoseconds
    }

    /// When the window after the last write ends (monotonic nanoseconds).
    private var windowEnd: UInt64 {
        commitHold.lastWrite &+ UInt64(environment.commitWindow * 1_000_000_000)
    }

    /// At the end of an outermost change brought by engine events: whether it waits for
    /// the deferred write (see `CommitHold`) instead of writing and announcing now.
    func changeWaitsForCommit() -> Bool {
        guard environment.commitWindow > 0, lifecycle.isRunning else { return false }
        guard journal.hasStaged || pendingMoves.hasQueued else { return false }
        return commitHold.lastWrite != 0 && DispatchTime.now().uptimeNanoseconds < windowEnd
    }

    /// Schedules the deferred change at the window's end (once for all that wait).
    func armDeferredCommit() {
        guard !commitHold.armed else { return }
        commitHold.armed = true
        let due = DispatchTime(uptimeNanoseconds: windowEnd)
        queue.asyncAfter(deadline: due) { [weak self] in
            guard let self else { return }
            self.commitHold.armed = false
            guard self.commitHold.waiting, self.lifecycle.isRunning else { return }
            self.mutate {} // finishes the moves, writes, announces
        }
    }

    /// Hands the engine the POST uploads whose start the store now holds (after a
    /// write, or once it has failed and changes live in memory only). Sent before its
    /// `running` was stored, a POST that reached the server would be restored after a
    /// kill as queued and sent again; stored first, the restart counts it as a failed
    /// attempt instead (`failPOSTCutByRestart`). Other requests start at once: sent
    /// again, they do no harm.
    func startStoredPOSTs() {
        for (t, var request) in takeUnsentPOSTs() {
            // Its share of a speed limit may have changed meanwhile (a limit set for an
            // attempt the engine does not have yet is not kept there).
            request.speedLimit = t.appliedSpeedLimit
            engine.start(request)
        }
    }

    /// The POSTs whose start waits for the store, taken out of it: those still running
    /// the attempt they were started for (one stopped since was withdrawn).
    private func takeUnsentPOSTs() -> [(TransferRecord, EngineRequest)] {
        guard !commitHold.postStarts.isEmpty else { return [] }
        let starts = commitHold.postStarts
        commitHold.postStarts.removeAll()
        return starts.compactMap { attempt, request in
            guard let t = transfers[request.id], t.state == .running, t.snapshot.attempts == attempt else { return nil }
            return (t, request)
        }
    }

    /// ferryd stops: the POSTs whose start waits for the store are not sent now. Each
    /// goes back to the queue, its attempt not made (stored `running`, the restart
    /// would count it as cut: `failPOSTCutByRestart`). Within a change.
    func requeueUnsentPOSTs() {
        for (t, _) in takeUnsentPOSTs() {
            t.snapshot.attempts -= 1
            t.life.requeue()
            settle(t)
            publishChanged(t)
        }
    }

    /// A POST whose start waits for the store is stopped before the engine had it: the
    /// engine's part is played here, a `.stopped` that arrives as the engine's would.
    /// Whether `id` was such a POST.
    func withdrawUnstartedPOST(_ id: TransferID) -> Bool {
        guard let i = commitHold.postStarts.firstIndex(where: { $0.request.id == id }) else { return false }
        let request = commitHold.postStarts.remove(at: i).request
        queue.async { [weak self] in self?.handle([.completed(id, .stopped(bytesOnDisk: request.offset))]) }
        return true
    }

    /// Before a public call reads or changes anything: what waits is finished, written
    /// and announced first (a change of its own), so no call sees a state the store does
    /// not hold yet, or a download between its stored path and its move, and no answer
    /// goes out before what it reflects is durable. Not within a change or a round of
    /// deliveries (the subscribers' reads see the state as it is, and the change under
    /// way ends with its own write).
    func commitWaiting() {
        guard commitHold.waiting, !lifecycle.isInChange, !outbox.inRound, lifecycle.isRunning else { return }
        mutate {}
    }
}
