import Foundation

/// A `TransferStore` in memory: for tests, and for a daemon that cannot use its state
/// directory (everything then vanishes with the process).
///
/// `@unchecked Sendable`: every stored property is guarded by `lock` (the core writes
/// on its queue; tests read from their own thread).
public final class InMemoryTransferStore: TransferStore, @unchecked Sendable {
    private let lock = NSLock()
    private var contents = StoreContents()
    private var _writes: [[StoreOperation]] = []
    private var _failure: StoreError?

    public init() {}

    public func load() throws -> StoreContents {
        lock.lock(); defer { lock.unlock() }
        return contents
    }

    public func write(_ operations: [StoreOperation]) throws {
        lock.lock(); defer { lock.unlock() }
        if let failure = _failure { throw failure }
        _writes.append(operations)
        for operation in operations { apply(operation) }
    }

    /// Every `write` so far, in order (for tests).
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
            if let i = contents.sessions.firstIndex(where: { $0.id == s.id }) {
                contents.sessions[i] = s
            } else {
                contents.sessions.append(s)
                contents.sessions.sort { $0.id < $1.id }
            }
        case .deleteSession(let id):
            contents.sessions.removeAll { $0.id == id }
            contents.transfers.removeAll { $0.snapshot.session == id }
            contents.events[id] = nil
        case .saveTransfer(let t):
            if let i = contents.transfers.firstIndex(where: { $0.snapshot.id == t.snapshot.id }) {
                contents.transfers[i] = t
            } else {
                contents.transfers.append(t)
                contents.transfers.sort { $0.snapshot.id < $1.snapshot.id }
            }
        case .deleteTransfer(let id):
            contents.transfers.removeAll { $0.snapshot.id == id }
        case .appendEvent(let session, let event):
            contents.events[session, default: []].append(event)
        case .acknowledgeEvents(let session, let serial):
            contents.events[session]?.removeAll { $0.serial <= serial }
            if contents.events[session]?.isEmpty == true { contents.events[session] = nil }
        case .setCounters(let counters):
            contents.counters = counters
        case .setSettings(let settings):
            contents.settings = settings
        }
    }
}
