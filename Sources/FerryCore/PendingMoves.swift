/// A verified download whose final path is staged (`finishingPath`), to be moved
/// there once that is written.
struct PendingMove {
    let transfer: TransferRecord
    let target: String
    let digest: String?
    let bytesOnDisk: Int64
    /// The attempt that finished (`TransferLife.Attempt.number`): a move whose transfer
    /// has moved on meanwhile (paused, cancelled, started again) is void.
    let attempt: UInt32
}

/// Verified downloads waiting for their final path to be written before they move
/// (`finishPendingMoves`), the paths they will take, and the folders finished downloads
/// were moved into since those were last synced.
///
/// Group commit: a move's intent is staged with the rest of its change and goes with
/// that change's one store write; the move is made in the next change (the same round
/// of work as the next events, or a hop of its own), whose write then stores its
/// completion beside the next intents — one write per round instead of one before the
/// moves and one after.
///
/// Rules: a move is `queued` until a store write has carried its intent
/// (`intentsFlushed`), then `due`; a move's target counts as taken from when it is
/// queued until it is moved or dropped; each folder is handed out for syncing once,
/// however many files went there.
struct PendingMoves {
    private var queued: [PendingMove] = []
    private var due: [PendingMove] = []
    private var targets: Set<String> = []
    private var folders: Set<String> = []
    /// A hop to make the due moves is on its way to the core's queue.
    var hopScheduled = false

    /// Queues `move`; its target is taken meanwhile.
    mutating func queue(_ move: PendingMove) {
        queued.append(move)
        targets.insert(move.target)
    }

    /// A store write (or a failed try, after which the change goes on in memory) has
    /// carried the intents of the moves queued so far: they may be made.
    mutating func intentsFlushed() {
        guard !queued.isEmpty else { return }
        due += queued
        queued = []
    }

    /// Whether some move may be made now.
    var hasDue: Bool { !due.isEmpty }

    /// The moves whose intent is written (nil when there are none); their targets stay
    /// taken until each is moved (`moving`).
    mutating func takeDue() -> [PendingMove]? {
        guard !due.isEmpty else { return nil }
        defer { due = [] }
        return due
    }

    /// `move` is being made (or dropped): its target is no longer held for it.
    mutating func moving(_ move: PendingMove) {
        targets.remove(move.target)
    }

    /// The round of moves ended: only the targets of moves still waiting stay held.
    mutating func endRound() {
        targets = Set(queued.map(\.target) + due.map(\.target))
    }

    /// Whether a waiting move will take `path`.
    func holds(_ path: String) -> Bool {
        targets.contains(path)
    }

    /// A finished download was moved into `folder`: it is synced before the next store
    /// write or announcement.
    mutating func movedInto(_ folder: String) {
        folders.insert(folder)
    }

    /// The folders to sync now (none again until another move), in order.
    mutating func takeFoldersToSync() -> [String] {
        defer { folders = [] }
        return folders.sorted()
    }
}
