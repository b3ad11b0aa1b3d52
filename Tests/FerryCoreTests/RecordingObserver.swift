import Dispatch
@testable import FerryCore

/// Everything the core reported, in order (it subscribes to the core's events).
final class RecordingObserver {
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

    private(set) var events: [Event] = []

    /// Records one event (appending without copying the list: tests record thousands).
    private func append(_ event: Event) {
        if let queue = expectedQueue { dispatchPrecondition(condition: .onQueue(queue)) }
        events.append(event)
        onEvent?(event)
    }
    /// Every event must arrive on this queue (the core's).
    var expectedQueue: DispatchQueue?
    /// Called for each new event (on the core's queue).
    var onEvent: ((Event) -> Void)?
    var changedSnapshots: [TransferSnapshot] = []
    var managerSnapshots: [ManagerSnapshot] = []
    /// The core's events as sent.
    var coreEvents: [CoreEvent] = []

    func clear() { events = []; changedSnapshots = []; managerSnapshots = []; coreEvents = [] }

    /// Subscribes to `core` (on its queue).
    func attach(to core: TransferCoordinator) {
        core.queue.sync { core.subscribe { [weak self] event in self?.record(event) } }
    }

    func record(_ event: CoreEvent) {
        coreEvents.append(event)
        switch event {
        case .sessionAdded(let s): append(.sessionAdded(s.id))
        case .sessionChanged(let s): append(.sessionChanged(s.id, active: s.activeTransfers))
        case .sessionRemoved(let id): append(.sessionRemoved(id))
        case .transferAdded(let t): append(.transferAdded(t.id, t.state))
        case .transferChanged(let t):
            changedSnapshots.append(t)
            append(.transferChanged(t.id, t.state))
        case .transferRemoved(let id, _): append(.transferRemoved(id))
        case .progress(let p):
            append(.progress(p.id, written: p.bytesWritten, total: p.totalBytesWritten, expected: p.totalBytesExpected))
        case .resumedAtOffset(let id, let offset, let expected): append(.resumedAtOffset(id, offset: offset, expected: expected))
        case .finished(let id, let location): append(.finished(id, location: location))
        case .completed(let c): append(.completed(c.transfer.id, serial: c.serial, errorName: c.errorName))
        case .sessionAllFinished(let end): append(.sessionAllFinished(end.session, end.counts))
        case .managerChanged(let m):
            managerSnapshots.append(m)
            append(.managerChanged(active: m.activeTransfers, queued: m.queuedTransfers))
        case .allFinished(let end): append(.allFinished(end.counts))
        case .groupAdded, .groupChanged, .groupRemoved, .groupFinished: break // groups: in coreEvents
        }
    }

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
