/// What the coordinator knows about its transfers without looking at each of them:
/// counts by state per session and overall, the running set, the queue, transfers
/// waiting for the network, each session's transfers and the paths live transfers
/// claim. Every entry is kept up to date as a transfer changes (`update`), so that
/// an event costs O(1) or O(log n), never a pass over all transfers.
struct TransferIndex {
    /// The facts of one transfer the index is built from; `update` diffs the old and
    /// the new facts.
    struct Facts: Equatable {
        var session: SessionID
        var state: TransferState
        var key: HostKey
        var priority: Int32
        /// Queued and no earlier attempt is still stopping: may be started.
        var startable: Bool
        /// Running, and its connections not yet freed (a download whose file is being
        /// flushed holds none): what the connection limits count.
        var holdsConnections: Bool = false
        var waitingForNetwork: Bool
        /// Not ended, and its run began by resuming it after it failed.
        var resumedRun: Bool = false
        /// The final path the transfer owns while it may still write it; its `.part`
        /// beside it is owned with it.
        var claim: String?
        /// Where the engine writes when that is not `claim + ".part"` (for a moment
        /// after a Content-Disposition rename).
        var extraClaim: String?
    }

    private(set) var queue = TransferQueue()
    /// Running transfers.
    private(set) var running: Set<TransferID> = []
    /// Running transfers holding connections, by origin.
    private(set) var runningPerHost: [HostKey: Int] = [:]
    private(set) var runningPerSession: [SessionID: Int] = [:]
    /// Queued, waiting or running (the batch's live transfers).
    private(set) var activeTotal = 0
    private(set) var activePerSession: [SessionID: Int] = [:]
    /// Not completed, failed or cancelled (paused included): a closing session waits for these.
    private(set) var unfinishedPerSession: [SessionID: Int] = [:]
    /// Failed (each may still end once more: resumed, or cancelled).
    private(set) var failedPerSession: [SessionID: Int] = [:]
    /// Not ended, resumed after a failure (each holds room for the event its run adds).
    private(set) var resumedRunsPerSession: [SessionID: Int] = [:]
    /// Queued or waiting (the manager's `QueuedTransfers`).
    private(set) var queuedOrWaiting = 0
    private(set) var waitingForNetwork: Set<TransferID> = []
    private(set) var bySession: [SessionID: Set<TransferID>] = [:]
    /// The owner of each claimed path, and further owners of the same path (rare: a
    /// takeover by resume data, for a moment).
    private var claims: [String: TransferID] = [:]
    private var moreClaims: [String: [TransferID]] = [:]
    /// Origins (a host within a session) last seen answering over HTTP/2: their running
    /// transfers share connections as streams (`Limits.streamsPerConnection` to one).
    private var multiplexing: Set<HostKey> = []
    /// The connections the running transfers take: one each, or one per
    /// `Limits.streamsPerConnection` on a multiplexing origin (a download on several
    /// connections, under its `HostKey.ownConnections` key, is never a stream: one each).
    /// `MaxConcurrentTransfers` and `max-connections-per-host` count these.
    private(set) var connectionsInUse = 0
    /// Bumped whenever the running set changes (the speed limits are shared anew then).
    private(set) var runningChanges: UInt64 = 0
    /// Sessions whose active count changed since `takeChangedSessions`.
    private var changedSessions: Set<SessionID> = []

    /// Records the transfer's new facts (`old` nil: it is new; `new` nil: it is gone).
    mutating func update(_ id: TransferID, from old: Facts?, to new: Facts?) {
        guard old != new else { return }
        if let old { subtract(id, old, keeping: new) }
        if let new { add(id, new, after: old) }
    }

    private mutating func subtract(_ id: TransferID, _ f: Facts, keeping next: Facts?) {
        if f.startable, !(next?.startable == true && next?.key == f.key && next?.priority == f.priority) {
            queue.remove(id)
        }
        if f.holdsConnections {
            let before = runningPerHost[f.key, default: 1]
            connectionsInUse -= connections(f.key, running: before) - connections(f.key, running: before - 1)
            runningPerHost[f.key, default: 1] -= 1
            if runningPerHost[f.key] == 0 { runningPerHost[f.key] = nil }
        }
        if f.state == .running {
            running.remove(id)
            runningChanges &+= 1
            runningPerSession[f.session, default: 1] -= 1
            if runningPerSession[f.session] == 0 { runningPerSession[f.session] = nil }
        }
        if f.state.isActive {
            activeTotal -= 1
            activePerSession[f.session, default: 1] -= 1
            if activePerSession[f.session] == 0 { activePerSession[f.session] = nil }
            changedSessions.insert(f.session)
        }
        if !f.state.isFinal {
            unfinishedPerSession[f.session, default: 1] -= 1
            if unfinishedPerSession[f.session] == 0 { unfinishedPerSession[f.session] = nil }
        }
        if f.state == .failed {
            failedPerSession[f.session, default: 1] -= 1
            if failedPerSession[f.session] == 0 { failedPerSession[f.session] = nil }
        }
        if f.resumedRun {
            resumedRunsPerSession[f.session, default: 1] -= 1
            if resumedRunsPerSession[f.session] == 0 { resumedRunsPerSession[f.session] = nil }
        }
        if f.state == .queued || f.state == .waiting { queuedOrWaiting -= 1 }
        if f.waitingForNetwork { waitingForNetwork.remove(id) }
        if next?.session != f.session {
            bySession[f.session]?.remove(id)
            if bySession[f.session]?.isEmpty == true { bySession[f.session] = nil }
        }
        for path in [f.claim, f.extraClaim].compactMap({ $0 }) { release(path, id) }
    }

    private mutating func add(_ id: TransferID, _ f: Facts, after previous: Facts?) {
        if f.startable, !(previous?.startable == true && previous?.key == f.key && previous?.priority == f.priority) {
            queue.insert(id, key: f.key, priority: f.priority)
        }
        if f.holdsConnections {
            let before = runningPerHost[f.key, default: 0]
            connectionsInUse += connections(f.key, running: before + 1) - connections(f.key, running: before)
            runningPerHost[f.key, default: 0] += 1
        }
        if f.state == .running {
            running.insert(id)
            runningChanges &+= 1
            runningPerSession[f.session, default: 0] += 1
        }
        if f.state.isActive {
            activeTotal += 1
            activePerSession[f.session, default: 0] += 1
            changedSessions.insert(f.session)
        }
        if !f.state.isFinal { unfinishedPerSession[f.session, default: 0] += 1 }
        if f.state == .failed { failedPerSession[f.session, default: 0] += 1 }
        if f.resumedRun { resumedRunsPerSession[f.session, default: 0] += 1 }
        if f.state == .queued || f.state == .waiting { queuedOrWaiting += 1 }
        if f.waitingForNetwork { waitingForNetwork.insert(id) }
        bySession[f.session, default: []].insert(id)
        for path in [f.claim, f.extraClaim].compactMap({ $0 }) {
            if claims[path] == nil { claims[path] = id } else { moreClaims[path, default: []].append(id) }
        }
    }

    /// Takes the next transfer to start, if the connection limits allow one. A
    /// multiplexing origin's transfers share one connection, up to
    /// `Limits.streamsPerConnection` of them at once.
    mutating func nextToStart(maxConnections: Int, perHostLimit: (SessionID) -> Int) -> TransferID? {
        let inUse = connectionsInUse
        guard inUse < maxConnections || !multiplexing.isEmpty else { return nil }
        let (perHost, multiplexing) = (runningPerHost, multiplexing)
        return queue.first { key in
            // An origin's limit covers its transfers that may share connections and its
            // downloads on connections of their own (`HostKey.ownConnections`) together.
            var origin = key
            origin.ownConnections = false
            var apart = key
            apart.ownConnections = true
            let shared = multiplexing.contains(origin)
            let (streams, own) = (perHost[origin, default: 0], perHost[apart, default: 0])
            let sharedNow = Self.connections(running: streams, multiplexed: shared)
            let sharedAfter = key.ownConnections ? sharedNow : Self.connections(running: streams + 1, multiplexed: shared)
            let ownAfter = key.ownConnections ? own + 1 : own
            // A multiplexing origin gets one connection's worth of streams: past that,
            // libcurl would open more connections than it needs, several at once.
            return inUse + (sharedAfter - sharedNow) + (ownAfter - own) <= maxConnections
                && sharedAfter + ownAfter <= perHostLimit(key.session)
                && (!shared || sharedAfter <= 1)
        }
    }

    /// Connections `running` transfers of an origin take.
    func connections(_ key: HostKey, running: Int) -> Int {
        Self.connections(running: running, multiplexed: multiplexing.contains(key))
    }

    private static func connections(running: Int, multiplexed: Bool) -> Int {
        multiplexed ? (running + Limits.streamsPerConnection - 1) / Limits.streamsPerConnection : running
    }

    /// What the origin's last response said of its connection: HTTP/2 or later
    /// (streams share a connection) or not.
    mutating func setMultiplexing(_ key: HostKey, _ multiplexes: Bool) {
        guard multiplexing.contains(key) != multiplexes else { return }
        let running = runningPerHost[key, default: 0]
        connectionsInUse -= connections(key, running: running)
        if multiplexes { multiplexing.insert(key) } else { multiplexing.remove(key) }
        connectionsInUse += connections(key, running: running)
    }

    /// Whether the origin's last response came over a connection shared as streams.
    func isMultiplexing(_ key: HostKey) -> Bool { multiplexing.contains(key) }

    func activeCount(session: SessionID) -> Int { activePerSession[session] ?? 0 }
    func unfinishedCount(session: SessionID) -> Int { unfinishedPerSession[session] ?? 0 }
    func failedCount(session: SessionID) -> Int { failedPerSession[session] ?? 0 }
    func resumedRunCount(session: SessionID) -> Int { resumedRunsPerSession[session] ?? 0 }
    func runningCount(session: SessionID) -> Int { runningPerSession[session] ?? 0 }

    /// How many transfers the session holds.
    func count(session: SessionID) -> Int { bySession[session]?.count ?? 0 }

    /// The transfers of a session, or of all sessions; oldest first.
    func ids(session: SessionID) -> [TransferID] { (bySession[session] ?? []).sorted() }

    /// Transfers (other than `except`) that own `path` as their final path or `.part`.
    func owners(of path: String, except: TransferID? = nil) -> [TransferID] {
        var ids = claimants(path)
        if path.hasSuffix(".part") { ids += claimants(String(path.dropLast(5))) }
        return ids.filter { $0 != except }
    }

    private func claimants(_ path: String) -> [TransferID] {
        guard let first = claims[path] else { return [] }
        return [first] + (moreClaims[path] ?? [])
    }

    private mutating func release(_ path: String, _ id: TransferID) {
        if claims[path] == id {
            if var more = moreClaims[path], !more.isEmpty {
                claims[path] = more.removeFirst()
                moreClaims[path] = more.isEmpty ? nil : more
            } else {
                claims[path] = nil
            }
        } else {
            moreClaims[path]?.removeAll { $0 == id }
            if moreClaims[path]?.isEmpty == true { moreClaims[path] = nil }
        }
    }

    /// The sessions whose active count changed since the last call.
    mutating func takeChangedSessions() -> Set<SessionID> {
        defer { changedSessions = [] }
        return changedSessions
    }
}
