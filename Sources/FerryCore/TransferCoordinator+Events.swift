import Dispatch

/// The outbox: events collected during a change and sent when it ends, after the store
/// has been written once.
extension TransferCoordinator {
    /// Calls `handler` with every event from now on, in order, on `queue`. The handler
    /// must not block; it may call the core (a call that changes something sends its own
    /// events after the current ones).
    public func subscribe(_ handler: @escaping (CoreEvent) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        outbox.subscribe(handler)
    }

    /// Calls `handler` after each round of deliveries (the events of a change, and any
    /// that their subscribers' calls caused), on `queue`: subscribers that collect work
    /// per event hand it on there, once. The handler must not call the core.
    public func subscribeToRoundEnds(_ handler: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        outbox.subscribeToRoundEnds(handler)
    }

    /// Queues an event; outside a change it goes at once.
    func emit(_ event: CoreEvent) {
        outbox.post(event)
        if !lifecycle.isInChange { deliverEvents() }
    }

    /// Makes what is staged durable, then sends the outbox in order.
    func deliverEvents() {
        flushStore()
        startStoredPOSTs()
        guard outbox.beginRound() else { return }
        defer { outbox.endRound() }
        guard outbox.hasPending else { return }
        while outbox.hasPending {
            let events = outbox.takePending()
            for event in events {
                for subscriber in outbox.subscribers { subscriber(event) }
            }
            flushStore()
        }
        for handler in outbox.roundEndHandlers { handler() }
    }

    func emitCompleted(_ t: TransferRecord, serial: UInt64, error: CoreError?) {
        emit(.completed(TransferCompletion(transfer: t.snapshot, serial: serial, errorName: error?.name ?? "",
                                           errorMessage: error?.message ?? "",
                                           notify: sessions[t.session]?.configuration.notify ?? true)))
    }

    /// One more Progress with the transfer's final counts, unless the last one had them
    /// (`evenIfSent`: then too). Its `bytes_written` counts from the last one's total,
    /// or from `base` when there was none.
    func sendFinalProgress(_ t: TransferRecord, from base: Int64, evenIfSent: Bool = false) {
        let total = t.snapshot.bytesTransferred, expected = t.snapshot.bytesExpected
        if !evenIfSent, let last = t.lastProgress, last.total == total, last.expected == expected { return }
        let written = total - (t.lastProgress?.total ?? base)
        t.lastProgress = (total, expected)
        emitProgress(t, bytesWritten: max(written, 0))
    }

    /// A progress event with the transfer's rate and expected end, and the manager's
    /// rates once a second (a sum over the running transfers only).
    func emitProgress(_ t: TransferRecord, bytesWritten: Int64) {
        var rates: ManagerRates?
        let now = environment.now()
        if publishedManager.ratesDue(at: now) {
            let m = manager
            rates = ManagerRates(download: m.downloadRate, upload: m.uploadRate)
        }
        if t.snapshot.group != 0 {
            groupBook.memberProgress(t.snapshot.group, transfer: t.id, transferred: t.snapshot.bytesTransferred,
                                     expected: t.snapshot.bytesExpected, now: now)
        }
        emit(.progress(TransferProgress(id: t.id, bytesWritten: bytesWritten, totalBytesWritten: t.snapshot.bytesTransferred,
                                        totalBytesExpected: t.snapshot.bytesExpected, rate: t.snapshot.rate,
                                        expectedEnd: t.snapshot.expectedEnd, managerRates: rates)))
    }
}
