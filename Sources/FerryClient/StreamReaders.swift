/// The streams that read one source of events (a task's, a session's), each under a
/// key of its own so that it can leave when its reader stops. Kept under the owner's
/// lock; the owner yields to `all` and finishes what `takeAll()` gives after letting
/// the lock go (a stream's end runs its `onTermination`, which takes the lock).
struct StreamReaders<Continuation> {
    private var byKey: [Int: Continuation] = [:]
    private var nextKey = 0

    /// Adds a reader; its key removes it.
    mutating func add(_ continuation: Continuation) -> Int {
        let key = nextKey
        nextKey += 1
        byKey[key] = continuation
        return key
    }

    mutating func remove(_ key: Int) { byKey[key] = nil }

    var all: [Continuation] { Array(byKey.values) }

    /// Every reader, leaving none.
    mutating func takeAll() -> [Continuation] {
        defer { byKey = [:] }
        return Array(byKey.values)
    }
}

/// Serials handed out in increasing order and taken in any order: the lowest one not
/// taken yet, in amortised O(1) per serial. A serial not handed out (one of a session
/// the serials were reset for since) is ignored.
struct UntakenSerials {
    private var serials: [UInt64] = []
    private var head = 0
    private var outstanding: Set<UInt64> = []

    mutating func add(_ serial: UInt64) {
        serials.append(serial)
        outstanding.insert(serial)
    }

    mutating func take(_ serial: UInt64) {
        guard outstanding.remove(serial) != nil else { return }
        while head < serials.count, !outstanding.contains(serials[head]) { head += 1 }
        if head > 256 && head * 2 > serials.count {
            serials.removeFirst(head)
            head = 0
        }
    }

    /// The lowest serial not taken, nil when all are.
    var lowest: UInt64? { head < serials.count ? serials[head] : nil }

    mutating func removeAll() { self = UntakenSerials() }
}
