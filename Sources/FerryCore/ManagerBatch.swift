/// The manager's batch: outcomes since the last manager-wide AllFinished, the part of
/// them from sessions whose signals are private, which batch this is, and when it
/// settles if it is settling.
///
/// Rules: the private counts are a part of the counts; a failure leaves the batch it
/// was counted in only while that batch has not ended; ending a batch starts the next
/// one empty, with the next number.
struct ManagerBatch {
    /// Outcomes since the last manager-wide AllFinished.
    private(set) var counts = BatchCounts()
    /// The part of `counts` from sessions whose signals are private (`privateSignals`).
    private(set) var privateCounts = BatchCounts()
    /// Batches the manager has ended (which one `counts` counts).
    private(set) var number: UInt64 = 0
    /// When the batch settles, if it is settling.
    private(set) var settleDue: UInt64?

    /// Whether any outcome was counted since the last end.
    var hasOutcomes: Bool { counts != BatchCounts() }

    /// Counts a final state (`isPrivate`: its session's signals are private).
    mutating func count(_ state: TransferState, isPrivate: Bool) {
        counts.count(state)
        if isPrivate { privateCounts.count(state) }
    }

    /// A failure counted in batch `counted` goes again: it leaves the counts if that
    /// batch is this one.
    mutating func uncountFailure(countedIn counted: UInt64, isPrivate: Bool) {
        guard counted == number, counts.failed > 0 else { return }
        counts.failed -= 1
        if isPrivate, privateCounts.failed > 0 { privateCounts.failed -= 1 }
    }

    /// The batch ends at `due` unless something starts first.
    mutating func settle(at due: UInt64) {
        settleDue = due
    }

    /// It is not settling (any more).
    mutating func stopSettling() {
        settleDue = nil
    }

    /// Ends the batch: its counts (and their private part); the next one starts empty.
    mutating func end() -> (counts: BatchCounts, privateCounts: BatchCounts) {
        defer {
            counts = BatchCounts()
            privateCounts = BatchCounts()
            number &+= 1
        }
        return (counts, privateCounts)
    }
}
