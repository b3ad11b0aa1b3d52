/// A verified download whose final path is staged (`finishingPath`), to be moved
/// there once that is written.
struct PendingMove {
    let transfer: TransferRecord
    let target: String
    let digest: String?
    let bytesOnDisk: Int64
}

/// Verified downloads of the change under way waiting for their final path to be
/// written before they move (`finishPendingMoves`), the paths they will take, and the
/// folders finished downloads were moved into since those were last synced.
///
/// Rules: a move's target counts as taken from when it is queued until it is moved (or
/// the round ends); each folder is handed out for syncing once, however many files
/// went there.
struct PendingMoves {
    private var queued: [PendingMove] = []
    private var targets: Set<String> = []
    private var folders: Set<String> = []

    /// Moves are queued, not made yet.
    var hasQueued: Bool { !queued.isEmpty }

    /// Queues `move`; its target is taken meanwhile.
    mutating func queue(_ move: PendingMove) {
        queued.append(move)
        targets.insert(move.target)
    }

    /// The moves queued so far (nil when there are none); their targets stay taken
    /// until each is moved (`moving`).
    mutating func takeQueued() -> [PendingMove]? {
        guard !queued.isEmpty else { return nil }
        defer { queued = [] }
        return queued
    }

    /// `move` is being made: its target is no longer held for it.
    mutating func moving(_ move: PendingMove) {
        targets.remove(move.target)
    }

    /// The round of moves ended: no target is held any more.
    mutating func endRound() {
        targets = []
    }

    /// Whether a queued move will take `path`.
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
