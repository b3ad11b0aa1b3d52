import Dispatch
import Foundation

/// Groups (`Session.DownloadGroup`, contract v1.2): many downloads made in one call, all
/// or none, followed as one. The counts live in `GroupBook`; here are the calls and the
/// rules that act on transfers (all-or-nothing, Pause/Resume/Cancel/Remove).
extension TransferCoordinator {
    /// The most items one `DownloadGroup` call may hold.
    public static let maxGroupItems = 100_000

    /// Drops the downloads prepared since the last add (a group refused part-way):
    /// their ids and names are free again.
    public func discardPreparedDownloads() {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        _ = prepared.takeAll()
    }

    /// Adds the prepared downloads (all of `session`) as one new group: the group and
    /// its transfers are written in one transaction (with the group counter, also for
    /// an ephemeral session, so its id never comes again), then announced together.
    /// - Throws: `StoreError`; then nothing is added.
    public func addPreparedDownloadsAsGroup(session: SessionID, description: String, allOrNothing: Bool) throws -> GroupID {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let members = prepared.takeAll()
        guard let last = members.last else {
            throw CoreError.invalidArgument("a group needs at least one item")
        }
        precondition(members.allSatisfy { $0.session == session }, "a group's downloads are all of its session")
        let id = groupBook.nextID
        for t in members { t.snapshot.group = id }
        let stored = StoredGroup(id: id, session: session, description: description, allOrNothing: allOrNothing)
        var next = counters
        next.nextTransferID = max(next.nextTransferID, last.id + 1)
        next.nextGroupID = max(next.nextGroupID, id + 1)
        let durable = isPersistent(session)
        let rows = durable ? members.map(\.stored) : []
        try writeNow((durable ? [.saveGroup(stored)] : []) + rows.map { .saveTransfer($0) }, counters: next)
        let now = environment.now()
        for (t, s) in zip(members, rows) {
            t.persistedDigest = s.hashValue
            t.lastCheckpoint = now
        }
        if !durable { reserveIDs(transfer: last.id) }
        numbering.tookTransfers(through: last.id)
        _ = groupBook.takeID()
        mutate {
            groupBook.add(stored, members: members.map { ($0.id, $0.snapshot.bytesTransferred, $0.snapshot.bytesExpected) })
            for t in members { add(t) }
            if let snapshot = groupBook.snapshot(id) { emit(.groupAdded(snapshot)) }
        }
        return id
    }

    /// The group's properties; nil when there is no such group.
    public func group(_ id: GroupID) -> GroupSnapshot? {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return groupBook.snapshot(id)
    }

    /// Every group, oldest first.
    public var groupIDs: [GroupID] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return groupBook.ids
    }

    /// The session a group belongs to; nil when there is no such group.
    public func groupSession(_ id: GroupID) -> SessionID? {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return groupBook.session(of: id)
    }

    /// Pauses the group's queued, waiting and running transfers.
    public func pauseGroup(_ id: GroupID) throws {
        commitWaiting()
        let members = try groupMembers(id)
        mutate {
            for t in members where TransferStateMachine.Action.pause.allowedStates.contains(t.state) { pauseTransfer(t) }
        }
    }

    /// Resumes the group's paused transfers and its failed ones (while the session has
    /// room for their events, as `resumeAll`). A tripped all-or-nothing group stays as
    /// it ended.
    public func resumeGroup(_ id: GroupID) throws {
        commitWaiting()
        let members = try groupMembers(id)
        if let stored = groupBook.stored(id), stored.tripped || stored.cancelRequested {
            throw CoreError.invalidState("group \(id) has ended (\(stored.tripped ? "a transfer of the all-or-nothing group failed" : "it was cancelled")); make a new one")
        }
        mutate {
            for t in members where TransferStateMachine.Action.resume.allowedStates.contains(t.state) {
                if t.state == .failed && eventRoom(session: t.session) < 1 { continue }
                resumeTransfer(t)
            }
        }
    }

    /// Cancels every unfinished transfer of the group; it ends `cancelled`.
    public func cancelGroup(_ id: GroupID) throws {
        commitWaiting()
        let members = try groupMembers(id)
        mutate {
            if !groupBook.isFinished(id) {
                groupBook.markCancelRequested(id)
                stageGroup(id)
            }
            for t in members where !t.state.isFinal {
                cancelTransfer(t, reason: .cancelled("Cancelled with its group"), deletePart: true)
            }
        }
    }

    /// Forgets a group whose transfers have all ended, with its transfers (a completed
    /// download's file stays).
    public func removeGroup(_ id: GroupID) throws {
        commitWaiting()
        let members = try groupMembers(id)
        guard groupBook.isFinished(id) else {
            throw CoreError.invalidState("group \(id) still has transfers that have not ended; cancel it (Group.Cancel) first")
        }
        mutate {
            for t in members where t.state.isFinal { forget(t) }
            forgetGroup(id)
            if let session = members.first?.session, let s = sessions[session] { finishClosingIfDone(s) }
        }
    }

    private func groupMembers(_ id: GroupID) throws -> [TransferRecord] {
        dispatchPrecondition(condition: .onQueue(queue))
        guard groupBook.exists(id) else {
            throw CoreError.invalidState("there is no group \(id) (it was removed, or never existed)")
        }
        return groupBook.members(of: id).compactMap { transfers[$0] }
    }

    private func forgetGroup(_ id: GroupID) {
        guard let session = groupBook.session(of: id) else { return }
        groupBook.remove(id)
        if isPersistent(session) { journal.stage(.deleteGroup(id)) }
        emit(.groupRemoved(id, session: session))
    }

    /// The session is going: so do its groups (the store drops them with it).
    func forgetGroups(of session: SessionID) {
        for id in groupBook.groups(of: session) {
            groupBook.remove(id)
            emit(.groupRemoved(id, session: session))
        }
    }

    private func stageGroup(_ id: GroupID) {
        guard let stored = groupBook.stored(id), isPersistent(stored.session) else { return }
        journal.stage(.saveGroup(stored))
    }

    /// At the end of each change: all-or-nothing groups whose member failed cancel the
    /// rest and delete their completed files; then what changed is announced, and the
    /// groups that have just finished send `Finished` (once, stored).
    func settleGroups() {
        for id in groupBook.takeTripped() {
            let members = groupBook.members(of: id).compactMap { transfers[$0] }
            let failed = members.first { $0.state == .failed }.map { "transfer \($0.id)" } ?? "a transfer"
            for t in members {
                if !t.state.isFinal {
                    cancelTransfer(t, reason: .cancelled("Cancelled because \(failed) of its all-or-nothing group failed"),
                                   deletePart: true)
                } else if t.state == .completed {
                    removeCompletedFile(t)
                }
            }
            stageGroup(id)
        }
        for id in groupBook.takeLateCompletions() { if let t = transfers[id] { removeCompletedFile(t) } }
        let (changed, finished) = groupBook.takeChanged(now: environment.now())
        for s in changed { emit(.groupChanged(s)) }
        for (s, stored) in finished {
            if isPersistent(stored.session) { journal.stage(.saveGroup(stored)) }
            emit(.groupFinished(s))
        }
    }

    /// An all-or-nothing group failed: a member's finished file goes (a sandboxed
    /// application's within its area).
    private func removeCompletedFile(_ t: TransferRecord) {
        guard !t.isUpload, !t.destination.isEmpty else { return }
        removePartFiles([t.destination], within: confinement(of: t))
        logger.info("removed \(t.destination): its all-or-nothing group failed")
    }

    /// After a restore, before the transfers are indexed: the groups, their members
    /// found by the group id each stored transfer carries.
    func restoreGroups(_ stored: [StoredGroup], counters: StoreCounters) {
        groupBook.reserve(below: counters.nextGroupID)
        var members: [GroupID: [(id: TransferID, transferred: Int64, expected: Int64)]] = [:]
        for t in transfers.values where t.snapshot.group != 0 {
            members[t.snapshot.group, default: []].append((t.id, t.snapshot.bytesTransferred, t.snapshot.bytesExpected))
        }
        for g in stored where sessions[g.session] != nil {
            groupBook.add(g, members: (members[g.id] ?? []).sorted { $0.id < $1.id })
        }
        // A transfer whose group is gone (a write lost with it) is in none.
        for t in transfers.values where t.snapshot.group != 0 && !groupBook.exists(t.snapshot.group) { t.snapshot.group = 0 }
    }
}
