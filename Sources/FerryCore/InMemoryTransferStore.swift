import Foundation

/// A `TransferStore` in memory: for tests, and for a daemon that cannot use its state
/// directory (everything then vanishes with the process).
///
/// `@unchecked Sendable`: every stored property is guarded by `lock` (the core writes
/// on its queue; tests read from their own thread).
public final class InMemoryTransferStore: TransferStore, @unchecked Sendable {
    private let lock = NSLock()
    private var sessions: [SessionID: StoredSession] = [:]
    private var transfers: [TransferID: StoredTransfer] = [:]
    private var events: [SessionID: [PendingEvent]] = [:]
    private var counters = StoreCounters()
    private var groups: [GroupID: StoredGroup] = [:]
    private var settings: StoredSettings?
    private var _writes: [[StoreOperation]] = []
    private var _failure: StoreError?
    private let recordsWrites: Bool

    /// - Parameter recordingWrites: keep every `write` for `writes` (tests); off, memory
    ///   holds only the current contents.
    public init(recordingWrites: Bool = false) {
        recordsWrites = recordingWrites
    }

    public func load() throws -> StoreContents {
        lock.lock(); defer { lock.unlock() }
        return StoreContents(sessions: sessions.values.sorted { $0.id < $1.id },
                             transfers: transfers.values.sorted { $0.snapshot.id < $1.snapshot.id },
                             events: events, counters: counters, settings: settings,
                             groups: groups.values.sorted { $0.id < $1.id })
    }

    public func write(_ operations: [StoreOperation]) throws {
        willWrite?(operations)
        lock.lock(); defer { lock.unlock() }
        if let failure = _failure { throw failure }
        if recordsWrites { _writes.append(operations) }
        for operation in operations { apply(operation) }
    }

    /// Called with each `write`'s operations before they are applied (tests: to change
    /// the world at the moment the core stores something). Set it before the core runs.
    public nonisolated(unsafe) var willWrite: (([StoreOperation]) -> Void)?

    /// Every `write` so far, in order, when made with `recordingWrites`.
    public var writes: [[StoreOperation]] {
        lock.lock(); defer { lock.unlock() }
        return _writes
    }

    /// When set, every `write` throws it (for tests of a full or broken disk).
    public var failure: StoreError? {
        get { lock.lock(); defer { lock.unlock() }; return _failure }
        set { lock.lock(); defer { lock.unlock() }; _failure = newValue }
    }

    private func apply(_ operation: StoreOperation) {
        switch operation {
        case .saveSession(let s):
            sessions[s.id] = s
        case .deleteSession(let id):
            sessions[id] = nil
            transfers = transfers.filter { $0.value.snapshot.session != id }
            groups = groups.filter { $0.value.session != id }
            events[id] = nil
        case .saveTransfer(let t):
            transfers[t.snapshot.id] = t
        case .deleteTransfer(let id):
            transfers[id] = nil
        case .appendEvent(let session, let event):
            events[session, default: []].removeAll { $0.serial == event.serial }
            events[session, default: []].append(event)
        case .acknowledgeEvents(let session, let serial):
            events[session]?.removeAll { $0.serial <= serial }
            if events[session]?.isEmpty == true { events[session] = nil }
        case .setCounters(let c):
            // Like the SQLite store: an id handed out is never handed out again.
            counters = StoreCounters(nextSessionID: max(counters.nextSessionID, c.nextSessionID),
                                     nextTransferID: max(counters.nextTransferID, c.nextTransferID),
                                     nextSerial: max(counters.nextSerial, c.nextSerial),
                                     nextGroupID: max(counters.nextGroupID, c.nextGroupID))
        case .setSettings(let s):
            settings = s
        case .saveGroup(let g):
            groups[g.id] = g
        case .deleteGroup(let id):
            groups[id] = nil
        }
    }
}
