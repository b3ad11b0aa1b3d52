/// Which queued transfers start now: at most `maxConcurrent` running in all, at most
/// the session's per-host limit running against one host within a session; high
/// priority first, then the oldest (FIFO by creation). A transfer held back by its host
/// limit does not hold back others.
struct TransferScheduler {
    struct Entry: Equatable {
        var id: TransferID
        var session: SessionID
        var host: String
        var priority: Int32
    }

    var maxConcurrent: Int

    /// The ids to start, in start order.
    func select(queued: [Entry], running: [Entry], perHostLimit: (SessionID) -> Int) -> [TransferID] {
        var total = running.count
        guard total < maxConcurrent else { return [] }
        var perHost: [HostKey: Int] = [:]
        for entry in running { perHost[HostKey(session: entry.session, host: entry.host), default: 0] += 1 }
        var picked: [TransferID] = []
        let ordered = queued.sorted { a, b in a.priority != b.priority ? a.priority > b.priority : a.id < b.id }
        for entry in ordered {
            guard total < maxConcurrent else { break }
            let key = HostKey(session: entry.session, host: entry.host)
            guard perHost[key, default: 0] < perHostLimit(entry.session) else { continue }
            perHost[key, default: 0] += 1
            total += 1
            picked.append(entry.id)
        }
        return picked
    }

    private struct HostKey: Hashable {
        var session: SessionID
        var host: String
    }
}
