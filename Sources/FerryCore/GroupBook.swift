/// A group's id: its object is `/org/ferry/Ferry1/group/N`, N never reused.
public typealias GroupID = UInt64

/// A group's `State` (contract v1.2).
public enum GroupState: String, Sendable, CaseIterable {
    case running, paused, completed, failed, cancelled
}

/// Everything a Group object shows as properties. `transfers` is nil in a change that
/// left the members as they were (a group of 100,000 does not resend them with every
/// count).
public struct GroupSnapshot: Sendable, Equatable {
    public var id: GroupID
    public var session: SessionID
    public var description: String
    public var transfers: [TransferID]?
    public var state: GroupState
    public var succeeded: UInt32
    public var failed: UInt32
    public var cancelled: UInt32
    public var bytesTransferred: Int64
    public var bytesExpected: Int64

    public init(id: GroupID, session: SessionID, description: String, transfers: [TransferID]?, state: GroupState,
                succeeded: UInt32, failed: UInt32, cancelled: UInt32, bytesTransferred: Int64, bytesExpected: Int64) {
        self.id = id; self.session = session; self.description = description; self.transfers = transfers
        self.state = state; self.succeeded = succeeded; self.failed = failed; self.cancelled = cancelled
        self.bytesTransferred = bytesTransferred; self.bytesExpected = bytesExpected
    }
}

/// A group as stored (its members are the transfers stored with its id).
public struct StoredGroup: Sendable, Equatable {
    public var id: GroupID
    public var session: SessionID
    public var description: String
    public var allOrNothing: Bool
    /// `Group.Cancel` was called: the group ends `cancelled`.
    public var cancelRequested: Bool
    /// An all-or-nothing group whose member failed: the rest were cancelled, it ends `failed`.
    public var tripped: Bool
    /// Its `Finished` was sent (it is sent once).
    public var finishedAnnounced: Bool

    public init(id: GroupID, session: SessionID, description: String, allOrNothing: Bool, cancelRequested: Bool = false,
                tripped: Bool = false, finishedAnnounced: Bool = false) {
        self.id = id; self.session = session; self.description = description; self.allOrNothing = allOrNothing
        self.cancelRequested = cancelRequested; self.tripped = tripped; self.finishedAnnounced = finishedAnnounced
    }
}

/// The groups of `Session.DownloadGroup`: their members and running counts. The
/// coordinator tells it of each member's change of state (`memberMoved`, from the
/// index's bookkeeping) and progress; every count is kept incrementally, so a transfer
/// event costs O(1) whatever the group's size. What a change needs announced or done
/// (`takeChanged`, `takeFinished`, `takeTripped`) is taken once per change of the core.
///
/// Used on the coordinator's queue only.
final class GroupBook {
    private final class Group {
        var stored: StoredGroup
        /// Members in the order they were made; `live` says which are still there.
        var members: [TransferID]
        var live: Set<TransferID>
        var succeeded = 0, failed = 0, cancelled = 0, paused = 0, unfinished = 0
        var bytesTransferred: Int64 = 0, bytesExpected: Int64 = 0
        /// `Transfers` changed since last announced.
        var membersChanged = false
        /// When its byte counts were last announced (µs).
        var bytesAnnounced: UInt64 = 0

        init(stored: StoredGroup, members: [TransferID]) {
            self.stored = stored
            self.members = members
            live = Set(members)
        }

        var state: GroupState {
            if unfinished > 0 { return paused == unfinished ? .paused : .running }
            if stored.cancelRequested { return .cancelled }
            if stored.tripped || failed > 0 { return .failed }
            if succeeded == 0 && cancelled > 0 { return .cancelled }
            return .completed
        }

        var liveMembers: [TransferID] {
            if live.count < members.count { members = members.filter(live.contains) } // compacted on the way
            return members
        }
    }

    private var groups: [GroupID: Group] = [:]
    private var bySession: [SessionID: Set<GroupID>] = [:]
    /// Each member's last byte counts (what its group's sums hold of it).
    private var memberBytes: [TransferID: (transferred: Int64, expected: Int64)] = [:]
    /// Groups with something to announce, to finish or to trip (all-or-nothing).
    private var changed: Set<GroupID> = []
    private var tripped: [GroupID] = []
    /// Members of tripped groups that completed afterwards: their files go too.
    private var lateCompletions: [TransferID] = []
    /// The next id to hand out; it only grows (stored with the counters).
    private(set) var nextID: GroupID = 1
    /// How often a group's byte counts are announced at most (µs).
    static let bytesInterval: UInt64 = 500_000

    var count: Int { groups.count }
    var ids: [GroupID] { groups.keys.sorted() }

    func exists(_ id: GroupID) -> Bool { groups[id] != nil }
    func session(of id: GroupID) -> SessionID? { groups[id]?.stored.session }
    func stored(_ id: GroupID) -> StoredGroup? { groups[id]?.stored }
    func members(of id: GroupID) -> [TransferID] { groups[id]?.liveMembers ?? [] }
    func groups(of session: SessionID) -> [GroupID] { (bySession[session] ?? []).sorted() }
    func isFinished(_ id: GroupID) -> Bool { (groups[id]?.unfinished ?? 0) == 0 }

    /// Takes an id for a new group.
    func takeID() -> GroupID {
        defer { nextID += 1 }
        return nextID
    }

    /// Ids below `next` are taken (from the store's counters).
    func reserve(below next: GroupID) { nextID = max(nextID, next) }

    /// A new group or one restored, with its members' byte counts now. Their states are
    /// counted as the index first takes them (`memberMoved` from nil), which comes after.
    func add(_ stored: StoredGroup, members: [(id: TransferID, transferred: Int64, expected: Int64)]) {
        let g = Group(stored: stored, members: members.map(\.id))
        for m in members {
            memberBytes[m.id] = (m.transferred, m.expected)
            g.bytesTransferred += m.transferred
            g.bytesExpected += max(0, m.expected)
        }
        groups[stored.id] = g
        bySession[stored.session, default: []].insert(stored.id)
        nextID = max(nextID, stored.id + 1)
    }

    /// A member's state changed (`from`/`to` nil: it was added/removed).
    func memberMoved(_ id: GroupID, transfer: TransferID, from old: TransferState?, to new: TransferState?) {
        guard let g = groups[id] else { return }
        if let old { count(old, in: g, by: -1) }
        if let new {
            count(new, in: g, by: 1)
            if new == .failed && g.stored.allOrNothing && !g.stored.tripped {
                g.stored.tripped = true
                tripped.append(id)
            } else if new == .completed && g.stored.tripped {
                lateCompletions.append(transfer) // it finished moving into place after the trip
            }
        } else {
            g.live.remove(transfer)
            g.membersChanged = true
            if let bytes = memberBytes.removeValue(forKey: transfer) {
                g.bytesTransferred -= bytes.transferred
                g.bytesExpected -= max(0, bytes.expected)
            }
        }
        changed.insert(id)
    }

    /// A member's byte counts; announced at most every `bytesInterval`.
    func memberProgress(_ id: GroupID, transfer: TransferID, transferred: Int64, expected: Int64, now: UInt64) {
        guard let g = groups[id] else { return }
        let before = memberBytes[transfer] ?? (0, 0)
        memberBytes[transfer] = (transferred, expected)
        g.bytesTransferred += transferred - before.transferred
        g.bytesExpected += max(0, expected) - max(0, before.expected)
        if now >= g.bytesAnnounced + Self.bytesInterval { changed.insert(id) }
    }

    /// `Group.Cancel` was called: it ends `cancelled`.
    func markCancelRequested(_ id: GroupID) {
        groups[id]?.stored.cancelRequested = true
        changed.insert(id)
    }

    /// Forgets a group (removed, or its session went).
    func remove(_ id: GroupID) {
        guard let g = groups.removeValue(forKey: id) else { return }
        for m in g.live { memberBytes[m] = nil }
        bySession[g.stored.session]?.remove(id)
        if bySession[g.stored.session]?.isEmpty == true { bySession[g.stored.session] = nil }
        changed.remove(id)
    }

    /// The all-or-nothing groups whose member failed since the last call.
    func takeTripped() -> [GroupID] {
        defer { tripped = [] }
        return tripped.filter { groups[$0] != nil }
    }

    /// Members of tripped groups that completed since the last call.
    func takeLateCompletions() -> [TransferID] {
        defer { lateCompletions = [] }
        return lateCompletions
    }

    /// The groups that changed since the last call: their snapshots, and those that have
    /// just finished (each once, marked so in their stored form).
    func takeChanged(now: UInt64) -> (changed: [GroupSnapshot], finished: [(GroupSnapshot, StoredGroup)]) {
        var snapshots: [GroupSnapshot] = []
        var finished: [(GroupSnapshot, StoredGroup)] = []
        for id in changed.sorted() {
            guard let g = groups[id] else { continue }
            g.bytesAnnounced = now
            let s = snapshot(g, withMembers: g.membersChanged)
            g.membersChanged = false
            snapshots.append(s)
            if g.unfinished == 0 && !g.stored.finishedAnnounced {
                g.stored.finishedAnnounced = true
                finished.append((s, g.stored))
            }
        }
        changed = []
        return (snapshots, finished)
    }

    /// The group's properties, its members included.
    func snapshot(_ id: GroupID) -> GroupSnapshot? {
        groups[id].map { snapshot($0, withMembers: true) }
    }

    private func snapshot(_ g: Group, withMembers: Bool) -> GroupSnapshot {
        GroupSnapshot(id: g.stored.id, session: g.stored.session, description: g.stored.description,
                      transfers: withMembers ? g.liveMembers : nil, state: g.state,
                      succeeded: UInt32(clamping: g.succeeded), failed: UInt32(clamping: g.failed),
                      cancelled: UInt32(clamping: g.cancelled), bytesTransferred: g.bytesTransferred,
                      bytesExpected: g.bytesExpected)
    }

    private func count(_ state: TransferState, in g: Group, by n: Int) {
        switch state {
        case .completed: g.succeeded += n
        case .failed: g.failed += n
        case .cancelled: g.cancelled += n
        case .paused: g.paused += n; g.unfinished += n
        case .queued, .waiting, .running: g.unfinished += n
        }
    }
}
