/// One thing that happened in the core, carrying everything its listeners need: they
/// never call back into the core to learn what the event should have said.
///
/// A change collects its events in an outbox; when the change ends the store is
/// written once, then the events go, in order, to every subscriber, on the core's
/// queue. For one transfer the order is: transferAdded, transferChanged…, progress…,
/// resumedAtOffset, progress…, (final) progress, finished (downloads that succeeded),
/// completed; then the session's AllFinished when nothing of it is queued, waiting or
/// running any more, and the manager's once the batch has settled.
public enum CoreEvent: Sendable, Equatable {
    case sessionAdded(SessionSnapshot)
    case sessionChanged(SessionSnapshot)
    case sessionRemoved(SessionID)
    case transferAdded(TransferSnapshot)
    /// Some signalled property changed; the receiver diffs.
    case transferChanged(TransferSnapshot)
    case transferRemoved(TransferID, session: SessionID)
    case progress(TransferProgress)
    case resumedAtOffset(TransferID, offset: Int64, expectedTotal: Int64)
    case finished(TransferID, location: String)
    case completed(TransferCompletion)
    case sessionAllFinished(SessionBatchEnd)
    case managerChanged(ManagerSnapshot)
    case allFinished(BatchEnd)
    /// A group of `Session.DownloadGroup` (after its transfers' transferAdded).
    case groupAdded(GroupSnapshot)
    /// Its counts, state or members changed (bytes: at most every half second).
    case groupChanged(GroupSnapshot)
    case groupRemoved(GroupID, session: SessionID)
    /// Its last unfinished member ended: the `Finished` signal, once.
    case groupFinished(GroupSnapshot)
}

/// Data moved: the `Progress` signal's counts with the properties that change
/// without a signal.
public struct TransferProgress: Sendable, Equatable {
    public var id: TransferID
    public var bytesWritten: Int64
    public var totalBytesWritten: Int64
    public var totalBytesExpected: Int64
    /// Bytes/s and the expected end (µs since the epoch, 0 = unknown).
    public var rate: UInt64
    public var expectedEnd: UInt64
    /// The manager's rates, at most once a second (nil in between).
    public var managerRates: ManagerRates?

    public init(id: TransferID, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpected: Int64,
                rate: UInt64 = 0, expectedEnd: UInt64 = 0, managerRates: ManagerRates? = nil) {
        self.id = id; self.bytesWritten = bytesWritten; self.totalBytesWritten = totalBytesWritten
        self.totalBytesExpected = totalBytesExpected; self.rate = rate; self.expectedEnd = expectedEnd
        self.managerRates = managerRates
    }
}

/// The manager's `DownloadRate` and `UploadRate`.
public struct ManagerRates: Sendable, Equatable {
    public var download: UInt64
    public var upload: UInt64
    public init(download: UInt64, upload: UInt64) { self.download = download; self.upload = upload }
}

/// A transfer reached its final state (`Completed` signal and pending event).
public struct TransferCompletion: Sendable, Equatable {
    /// The transfer as it ended.
    public var transfer: TransferSnapshot
    public var serial: UInt64
    /// "" on success.
    public var errorName: String
    public var errorMessage: String
    /// Its session's `notify`: whether it counts for the desktop notification.
    public var notify: Bool

    public init(transfer: TransferSnapshot, serial: UInt64, errorName: String, errorMessage: String, notify: Bool) {
        self.transfer = transfer; self.serial = serial; self.errorName = errorName
        self.errorMessage = errorMessage; self.notify = notify
    }
}

/// A session has nothing queued, waiting or running any more.
public struct SessionBatchEnd: Sendable, Equatable {
    public var session: SessionID
    public var identifier: String
    public var counts: BatchCounts
    /// The session's `application-id` ("" = none) and whether it has completion
    /// events not yet acknowledged: what the application waker needs.
    public var applicationID: String
    public var hasPendingEvents: Bool

    public init(session: SessionID, identifier: String, counts: BatchCounts, applicationID: String = "",
                hasPendingEvents: Bool = false) {
        self.session = session; self.identifier = identifier; self.counts = counts; self.applicationID = applicationID
        self.hasPendingEvents = hasPendingEvents
    }
}

/// The manager's batch has ended and settled.
public struct BatchEnd: Sendable, Equatable {
    public var counts: BatchCounts
    /// `NotificationsEnabled` at that moment.
    public var notificationsEnabled: Bool
    /// The part of `counts` from sessions whose signals are private: other clients
    /// hear only of the rest.
    public var privateCounts: BatchCounts

    public init(counts: BatchCounts, notificationsEnabled: Bool, privateCounts: BatchCounts = BatchCounts()) {
        self.counts = counts; self.notificationsEnabled = notificationsEnabled; self.privateCounts = privateCounts
    }
}
