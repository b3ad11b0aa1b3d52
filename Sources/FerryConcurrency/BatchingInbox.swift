import Foundation

/// Items handed from any thread to one consumer, in order, in batches: `append` adds
/// under a lock, and the append that finds the inbox empty wakes the consumer (its
/// `wake` runs); the consumer takes everything that has arrived by then with `drain`.
/// One wake-up serves a burst of items, however many threads add them.
///
/// `wake` runs under the lock, so it never races `close`: once `close` has returned, no
/// `wake` runs again (the engine's inbox relies on it: its wake-up uses a handle the
/// consumer frees after the close). It must be quick and must not touch the inbox.
///
/// Items need not be Sendable: each is `sending`, handed over by a thread that keeps
/// no reference to it, and taken by the one consumer.
public final class BatchingInbox<Item>: @unchecked Sendable {
    // @unchecked Sendable: `items` and `closed` are only read and written under `lock`.
    // (Not a `Mutex`: region checking will not let a `sending` item into its state.)
    private let lock = NSLock()
    private var items: [Item] = []
    private var closed = false

    public init() {}

    /// Adds `item`, and runs `wake` when the inbox was empty; false (the item is
    /// dropped) once the inbox is closed.
    @discardableResult
    public func append(_ item: sending Item, wake: () -> Void = {}) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return false }
        items.append(item)
        if items.count == 1 { wake() }
        return true
    }

    /// Adds `last` and refuses every item after it; `wake` runs when the inbox was
    /// empty. False when it was closed already (`last` is dropped).
    @discardableResult
    public func close(with last: sending Item, wake: () -> Void = {}) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return false }
        closed = true
        items.append(last)
        if items.count == 1 { wake() }
        return true
    }

    /// Everything added since the last drain, oldest first; the inbox is empty after.
    public func drain() -> [Item] {
        lock.lock()
        defer { lock.unlock() }
        if items.isEmpty { return [] }
        let taken = items
        items.removeAll(keepingCapacity: true)
        return taken
    }

    /// `close` was called.
    public var isClosed: Bool {
        lock.lock()
        defer { lock.unlock() }
        return closed
    }
}
