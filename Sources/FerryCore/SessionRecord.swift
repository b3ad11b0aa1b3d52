/// One session as the core keeps it.
final class SessionRecord {
    let id: SessionID
    let identifier: String
    var configuration: SessionConfiguration
    /// The sandboxed application that opened it (its app id), nil when an unconfined
    /// client did: a sandboxed caller sees and controls only its own sessions.
    var owner: String?
    /// `Close(false)` was called: no new downloads; removed once all transfers are final.
    var isClosing = false
    /// Completion events not yet acknowledged, oldest first.
    var pendingEvents: [PendingEvent] = []
    /// Outcomes since this session's last AllFinished.
    var batch = BatchCounts()
    /// Batches this session has ended (which one `batch` counts).
    var batchNumber: UInt64 = 0
    /// The ActiveTransfers value last announced.
    var publishedActive: UInt32 = 0
    /// Its transfers paused by its `on-client-exit` policy, resumed when a client opens
    /// it again (TransferCoordinator+ClientExit.swift).
    var pausedOnClientExit: Set<TransferID> = []

    init(id: SessionID, identifier: String, configuration: SessionConfiguration) {
        self.id = id; self.identifier = identifier; self.configuration = configuration
    }
}

extension BatchCounts {
    mutating func count(_ state: TransferState) {
        switch state {
        case .completed: succeeded += 1
        case .failed: failed += 1
        case .cancelled: cancelled += 1
        default: break
        }
    }
}
