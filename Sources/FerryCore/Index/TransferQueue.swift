import HeapModule

/// Where per-host limits apply: one host within one session.
struct HostKey: Hashable {
    var session: SessionID
    var host: String
    /// Downloads on several connections (ranges, each an HTTP/1.1 request of its own,
    /// never a stream): counted apart from the origin's other transfers, one each as
    /// on an HTTP/1.1 origin, so that the origin's HTTP/2 mark never makes them count
    /// as streams (`TransferCoordinator.hostKey`).
    var ownConnections = false
}

/// The queued transfers, in start order: high priority first, then the oldest (by id).
/// Grouped by `HostKey`, so a group held back by its per-host limit costs nothing to
/// skip: picking the next transfer looks at one head per group, never at every queued
/// transfer.
///
/// Entries are removed lazily: `remove` forgets the membership, and a stale heap entry
/// is dropped when it reaches the head of its group (or when the group is compacted).
struct TransferQueue {
    struct Entry: Comparable {
        var priority: Int32
        var id: TransferID
        var generation: UInt64
        /// "Smaller" starts first.
        static func < (a: Entry, b: Entry) -> Bool {
            a.priority != b.priority ? a.priority > b.priority : a.id < b.id
        }
    }

    private struct Membership {
        var key: HostKey
        var generation: UInt64
    }

    private var groups: [HostKey: Heap<Entry>] = [:]
    private var live: [HostKey: Int] = [:]
    private var members: [TransferID: Membership] = [:]
    private var nextGeneration: UInt64 = 0

    /// Adds (or re-adds, with a new key or priority) a transfer.
    mutating func insert(_ id: TransferID, key: HostKey, priority: Int32) {
        remove(id)
        nextGeneration += 1
        members[id] = Membership(key: key, generation: nextGeneration)
        groups[key, default: Heap()].insert(Entry(priority: priority, id: id, generation: nextGeneration))
        live[key, default: 0] += 1
    }

    mutating func remove(_ id: TransferID) {
        guard let m = members.removeValue(forKey: id) else { return }
        live[m.key, default: 1] -= 1
        if live[m.key] == 0 {
            live[m.key] = nil
            groups[m.key] = nil
        } else if let heap = groups[m.key], heap.count > 2 * (live[m.key] ?? 0) + 64 {
            compact(m.key)
        }
    }

    /// The best transfer among the groups `eligible` allows, without taking it out.
    mutating func first(where eligible: (HostKey) -> Bool) -> TransferID? {
        var best: Entry?
        for key in Array(groups.keys) where eligible(key) {
            guard let head = validHead(key) else { continue }
            if best == nil || head < best! { best = head }
        }
        return best?.id
    }

    /// The live head of a group, dropping stale entries on the way.
    private mutating func validHead(_ key: HostKey) -> Entry? {
        while let head = groups[key]?.min {
            if members[head.id]?.generation == head.generation { return head }
            _ = groups[key]?.popMin()
        }
        return nil
    }

    private mutating func compact(_ key: HostKey) {
        guard let heap = groups[key] else { return }
        groups[key] = Heap(heap.unordered.filter { members[$0.id]?.generation == $0.generation })
    }
}
