/// What the next scheduling pass owes: the transfers that became startable since the
/// last one (the network policy judges them there), and whether the running transfers'
/// speed limits must be shared out again.
///
/// Rules: each newly startable transfer is handed out once, in the order it came; the
/// limits are shared out again when a transfer starts, when the running set changed
/// since they last were (`TransferIndex.runningChanges`), or after a limit changed.
struct SchedulingDue {
    private var newlyQueued: [TransferID] = []
    /// `runningChanges` when the limits were last shared out; nil after a limit changed.
    private var limitsSharedAt: UInt64?

    /// `id` became startable.
    mutating func queued(_ id: TransferID) {
        newlyQueued.append(id)
    }

    /// The transfers that became startable since the last call, oldest first.
    mutating func takeNewlyQueued() -> [TransferID] {
        defer { newlyQueued = [] }
        return newlyQueued
    }

    /// A speed limit changed: the next pass shares them out again.
    mutating func limitChanged() {
        limitsSharedAt = nil
    }

    /// Whether the limits must be shared out now (`starting`: some transfer starts in
    /// this pass); if so, they are taken as shared at `runningChanges`.
    mutating func sharesLimits(starting: Bool, runningChanges: UInt64) -> Bool {
        guard starting || limitsSharedAt != runningChanges else { return false }
        limitsSharedAt = runningChanges
        return true
    }
}
