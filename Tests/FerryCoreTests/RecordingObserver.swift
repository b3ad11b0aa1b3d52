import Dispatch
@testable import FerryCore

/// Everything the core reported, in order.
final class RecordingObserver: CoreObserver {
    enum Event: Equatable {
        case sessionAdded(SessionID)
        case sessionChanged(SessionID, active: UInt32)
        case sessionRemoved(SessionID)
        case transferAdded(TransferID, TransferState)
        case transferChanged(TransferID, TransferState)
        case transferRemoved(TransferID)
        case progress(TransferID, written: Int64, total: Int64, expected: Int64)
        case resumedAtOffset(TransferID, offset: Int64, expected: Int64)
        case finished(TransferID, location: String)
        case completed(TransferID, serial: UInt64, errorName: String)
        case sessionAllFinished(SessionID, BatchCounts)
        case managerChanged(active: UInt32, queued: UInt32)
        case allFinished(BatchCounts)
    }

    var events: [Event] = [] {
        didSet {
            guard events.count > oldValue.count, let last = events.last else { return }
            if let queue = expectedQueue { dispatchPrecondition(condition: .onQueue(queue)) }
            onEvent?(last)
        }
    }
    /// Every callback must arrive on this queue (the core's).
    var expectedQueue: DispatchQueue?
    /// Called for each new event (on the core's queue).
    var onEvent: ((Event) -> Void)?
    var changedSnapshots: [TransferSnapshot] = []
    var managerSnapshots: [ManagerSnapshot] = []

    func clear() { events = []; changedSnapshots = []; managerSnapshots = [] }

    func sessionAdded(_ session: SessionSnapshot) { events.append(.sessionAdded(session.id)) }
    func sessionChanged(_ session: SessionSnapshot) { events.append(.sessionChanged(session.id, active: session.activeTransfers)) }
    func sessionRemoved(_ id: SessionID) { events.append(.sessionRemoved(id)) }
    func transferAdded(_ transfer: TransferSnapshot) { events.append(.transferAdded(transfer.id, transfer.state)) }
    func transferChanged(_ transfer: TransferSnapshot) {
        events.append(.transferChanged(transfer.id, transfer.state))
        changedSnapshots.append(transfer)
    }
    func transferRemoved(_ id: TransferID, session: SessionID) { events.append(.transferRemoved(id)) }
    func transferProgress(_ id: TransferID, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpected: Int64) {
        events.append(.progress(id, written: bytesWritten, total: totalBytesWritten, expected: totalBytesExpected))
    }
    func transferResumedAtOffset(_ id: TransferID, offset: Int64, expectedTotal: Int64) {
        events.append(.resumedAtOffset(id, offset: offset, expected: expectedTotal))
    }
    func transferFinished(_ id: TransferID, location: String) { events.append(.finished(id, location: location)) }
    func transferCompleted(_ id: TransferID, serial: UInt64, errorName: String, errorMessage: String) {
        events.append(.completed(id, serial: serial, errorName: errorName))
    }
    func sessionAllFinished(_ session: SessionID, counts: BatchCounts) { events.append(.sessionAllFinished(session, counts)) }
    func managerChanged(_ manager: ManagerSnapshot) {
        events.append(.managerChanged(active: manager.activeTransfers, queued: manager.queuedTransfers))
        managerSnapshots.append(manager)
    }
    func allFinished(_ counts: BatchCounts) { events.append(.allFinished(counts)) }

    /// Completion signals: (transfer, serial, error name).
    var completions: [(TransferID, UInt64, String)] {
        events.compactMap { if case .completed(let id, let serial, let name) = $0 { return (id, serial, name) } else { return nil } }
    }
    var allFinishedCounts: [BatchCounts] {
        events.compactMap { if case .allFinished(let c) = $0 { return c } else { return nil } }
    }
    func sessionAllFinishedCounts(_ session: SessionID) -> [BatchCounts] {
        events.compactMap { if case .sessionAllFinished(session, let c) = $0 { return c } else { return nil } }
    }
}
