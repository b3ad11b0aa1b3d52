import Dispatch
import FerryCore

/// Listens in on the core's observer for how many transfers run, and passes every
/// callback on unchanged to the observer that was installed before it (the bus
/// service). The core has one observer; this lets another party (the sleep
/// inhibitor) follow `ActiveTransfers` without the service knowing.
///
/// Install it after the service has set itself as the observer. The tap must be kept
/// alive by its owner (the core holds its observer weakly); it keeps the observer it
/// wraps alive.
public final class RunningTransfersTap: CoreObserver {
    private var next: CoreObserver?
    private var running: UInt32?
    private let onChange: (UInt32) -> Void

    /// `onChange`: the number of running transfers, on the core's queue, when it
    /// changes (and once at `install`).
    public init(onChange: @escaping (UInt32) -> Void) {
        self.onChange = onChange
    }

    /// Puts the tap in front of the core's current observer. On the core's queue.
    public func install(on core: TransferCoordinator) {
        dispatchPrecondition(condition: .onQueue(core.queue))
        guard core.observer !== self else { return }
        next = core.observer
        core.observer = self
        note(core.manager.activeTransfers)
    }

    private func note(_ count: UInt32) {
        guard count != running else { return }
        running = count
        onChange(count)
    }

    public func managerChanged(_ manager: ManagerSnapshot) {
        note(manager.activeTransfers)
        next?.managerChanged(manager)
    }

    // Everything else passes straight through.
    public func sessionAdded(_ session: SessionSnapshot) { next?.sessionAdded(session) }
    public func sessionChanged(_ session: SessionSnapshot) { next?.sessionChanged(session) }
    public func sessionRemoved(_ id: SessionID) { next?.sessionRemoved(id) }
    public func transferAdded(_ transfer: TransferSnapshot) { next?.transferAdded(transfer) }
    public func transferChanged(_ transfer: TransferSnapshot) { next?.transferChanged(transfer) }
    public func transferRemoved(_ id: TransferID, session: SessionID) { next?.transferRemoved(id, session: session) }
    public func transferProgress(_ id: TransferID, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpected: Int64) {
        next?.transferProgress(id, bytesWritten: bytesWritten, totalBytesWritten: totalBytesWritten, totalBytesExpected: totalBytesExpected)
    }
    public func transferResumedAtOffset(_ id: TransferID, offset: Int64, expectedTotal: Int64) {
        next?.transferResumedAtOffset(id, offset: offset, expectedTotal: expectedTotal)
    }
    public func transferFinished(_ id: TransferID, location: String) { next?.transferFinished(id, location: location) }
    public func transferCompleted(_ id: TransferID, serial: UInt64, errorName: String, errorMessage: String) {
        next?.transferCompleted(id, serial: serial, errorName: errorName, errorMessage: errorMessage)
    }
    public func sessionAllFinished(_ session: SessionID, counts: BatchCounts) { next?.sessionAllFinished(session, counts: counts) }
    public func allFinished(_ counts: BatchCounts) { next?.allFinished(counts) }
}
