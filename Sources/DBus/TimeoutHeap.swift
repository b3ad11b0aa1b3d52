/// The armed timeouts by deadline: a binary min-heap whose entries go stale when
/// their handle is disarmed (its generation moves on) and are dropped when they
/// reach the top, or all at once when most of the heap is stale.
struct TimeoutHeap {
    struct Entry {
        let deadline: UInt64
        let generation: UInt64
        let handle: TimeoutHandle
        var isCurrent: Bool { handle.deadline == deadline && handle.generation == generation }
    }

    private(set) var entries: [Entry] = []
    /// Handles armed now (each has exactly one current entry).
    var live = 0

    mutating func push(_ e: Entry) {
        entries.append(e)
        siftUp(entries.count - 1)
    }

    /// The earliest current entry if it is due by `now`, taken off; stale entries on
    /// the way are dropped.
    mutating func popCurrent(dueBy now: UInt64) -> Entry? {
        dropStaleTop()
        guard let top = entries.first, top.deadline <= now else { return nil }
        return popTop()
    }

    mutating func nextDeadline() -> UInt64? {
        dropStaleTop()
        return entries.first?.deadline
    }

    mutating func removeAll() { entries.removeAll(keepingCapacity: false) }

    /// Rebuilds the heap from its current entries when stale ones are over two thirds.
    mutating func compactIfMostlyStale() {
        guard entries.count > 64, entries.count > 3 * live else { return }
        let current = entries.filter(\.isCurrent)
        entries = []
        entries.reserveCapacity(current.count)
        for e in current { push(e) }
    }

    private mutating func dropStaleTop() {
        while let top = entries.first, !top.isCurrent { _ = popTop() }
    }

    private mutating func popTop() -> Entry {
        let top = entries[0]
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            siftDown(0)
        }
        return top
    }

    private mutating func siftUp(_ start: Int) {
        var i = start
        while i > 0 {
            let parent = (i - 1) / 2
            guard entries[i].deadline < entries[parent].deadline else { return }
            entries.swapAt(i, parent)
            i = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var smallest = i
            if l < entries.count && entries[l].deadline < entries[smallest].deadline { smallest = l }
            if r < entries.count && entries[r].deadline < entries[smallest].deadline { smallest = r }
            if smallest == i { return }
            entries.swapAt(i, smallest)
            i = smallest
        }
    }
}
