import HeapModule

/// Moments at which the core has work to do: a waiting transfer's `notBefore` (start-after
/// or a retry) and a transfer's resource deadline. One heap for all transfers, so one
/// timer serves them (no timer per transfer).
///
/// Entries are checked when they come due, not removed when they go stale: the
/// coordinator looks at the transfer and ignores an entry that no longer applies.
struct DueTimeline {
    enum Kind: Int, Comparable {
        /// A waiting transfer's `notBefore`; a resource deadline; the end of a batch's
        /// settle time (transfer id 0); the schedule's next window edge (id 0).
        case wake, deadline, settle, schedule
        static func < (a: Kind, b: Kind) -> Bool { a.rawValue < b.rawValue }
    }

    struct Entry: Comparable {
        /// µs since the epoch, by the environment's clock.
        var due: UInt64
        var id: TransferID
        var kind: Kind
        static func < (a: Entry, b: Entry) -> Bool {
            (a.due, a.id, a.kind) < (b.due, b.id, b.kind)
        }
    }

    private var heap = Heap<Entry>()

    /// The earliest moment anything is due.
    var nextDue: UInt64? { heap.min?.due }

    mutating func add(_ id: TransferID, _ kind: Kind, at due: UInt64) {
        heap.insert(Entry(due: due, id: id, kind: kind))
    }

    /// Takes out every entry due at or before `now`, earliest first.
    mutating func takeDue(now: UInt64) -> [Entry] {
        var due: [Entry] = []
        while let head = heap.min, head.due <= now { due.append(heap.removeMin()) }
        return due
    }
}
