/// Store operations of persistent sessions not written yet, and whether the last write
/// failed.
///
/// Rules: operations are written in the order they were staged, all in one write with
/// the counters last; a write that works empties the journal; one that fails keeps
/// them, in order, for the next write (within `limit`: a long outage drops the oldest);
/// a failing store is reported once until a write works again.
struct StoreJournal {
    /// What a `flush` did, for the caller's log.
    enum FlushOutcome: Equatable {
        /// Nothing was staged; nothing was written.
        case nothingStaged
        /// Written.
        case written
        /// Written after earlier writes had failed.
        case recovered
        /// Failed, the first time since a write worked.
        case startedFailing(String)
        /// Failed again.
        case stillFailing
    }

    /// Operations staged, oldest first.
    private(set) var staged: [StoreOperation] = []
    /// The last `flush` failed.
    private(set) var isFailing = false
    /// Operations kept at most while the store fails.
    let limit: Int

    init(limit: Int = 100_000) {
        self.limit = limit
    }

    /// Something is staged, not written yet.
    var hasStaged: Bool { !staged.isEmpty }

    mutating func stage(_ operation: StoreOperation) {
        staged.append(operation)
    }

    /// Writes what is staged with `counters` (asked only when something is staged).
    mutating func flush(to store: TransferStore, counters: () -> StoreCounters) -> FlushOutcome {
        guard !staged.isEmpty else { return .nothingStaged }
        let operations = staged + [.setCounters(counters())]
        do {
            try store.write(operations)
            staged = []
            defer { isFailing = false }
            return isFailing ? .recovered : .written
        } catch {
            // Kept for the next try, within reason.
            staged = Array(staged.suffix(limit))
            defer { isFailing = true }
            return isFailing ? .stillFailing : .startedFailing("\(error)")
        }
    }

    /// Writes what is staged followed by `operations` now (the last of them should set
    /// the counters). Throws what the store throws, leaving the staged operations
    /// staged.
    mutating func write(_ operations: [StoreOperation], to store: TransferStore) throws {
        try store.write(staged + operations)
        staged = []
    }
}
