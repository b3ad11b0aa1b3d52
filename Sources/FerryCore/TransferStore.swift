/// Where the core keeps what must survive a restart of the daemon: persistent sessions,
/// their transfers and pending completion events, the id counters and the manager's
/// settings. SQLite in the daemon (`FerryStore`), `InMemoryTransferStore` in tests and
/// when the state directory cannot be used.
///
/// The core calls the store on its own queue only, and writes before it announces a
/// change: when `write` returns, the change must survive a crash of the process.
/// Ephemeral sessions (`persistent = false`) never reach the store.
public protocol TransferStore: AnyObject {
    /// Everything stored, for `TransferCoordinator.restore()`.
    func load() throws -> StoreContents
    /// Applies the operations in order, all or none (one transaction).
    func write(_ operations: [StoreOperation]) throws
}

/// One change to the store.
public enum StoreOperation: Sendable, Equatable {
    /// Inserts or replaces a session.
    case saveSession(StoredSession)
    /// Deletes a session with its transfers and pending events.
    case deleteSession(SessionID)
    /// Inserts or replaces a transfer.
    case saveTransfer(StoredTransfer)
    /// Deletes a transfer (its pending events stay until acknowledged).
    case deleteTransfer(TransferID)
    /// Adds a pending completion event of a session.
    case appendEvent(SessionID, PendingEvent)
    /// Deletes the session's pending events with a serial up to and including `upTo`.
    case acknowledgeEvents(SessionID, upTo: UInt64)
    /// The next ids to hand out; they only ever grow.
    case setCounters(StoreCounters)
    /// The manager's writable properties.
    case setSettings(StoredSettings)
    /// Inserts or replaces a group (`Session.DownloadGroup`).
    case saveGroup(StoredGroup)
    /// Deletes a group (its transfers stay, if still there, outside any group).
    case deleteGroup(GroupID)
}

/// A session as stored.
public struct StoredSession: Sendable, Equatable {
    public var id: SessionID
    public var identifier: String
    public var configuration: SessionConfiguration
    /// `Close(false)` was called; it goes once its transfers are final.
    public var isClosing: Bool
    /// The app id of the sandboxed application that owns it; nil = opened unconfined.
    public var owner: String?

    public init(id: SessionID, identifier: String, configuration: SessionConfiguration, isClosing: Bool = false,
                owner: String? = nil) {
        self.id = id; self.identifier = identifier; self.configuration = configuration; self.isClosing = isClosing
        self.owner = owner
    }
}

/// A transfer as stored: everything needed to rebuild it after a restart.
public struct StoredTransfer: Sendable, Hashable {
    /// Its properties. `bytesTransferred` is a checkpoint (the `.part` file's real size
    /// wins when the transfer is restored); `rate` and `expectedEnd` are not kept (0).
    public var snapshot: TransferSnapshot
    /// The options it was created with (headers included).
    public var options: DownloadOptions
    /// The directory the file goes to.
    public var directory: String
    /// The client gave a directory and no response has fixed the name yet, so a
    /// `Content-Disposition` may still rename it.
    public var serverMayName: Bool
    /// Where the partial file is (normally `destination + ".part"`; it differs for a
    /// moment after a `Content-Disposition` rename).
    public var partPath: String
    /// Validators of the bytes on disk, sent as `If-Range` when resuming.
    public var etag: String?
    public var lastModified: String?
    /// While waiting: not before this time (µs since the epoch).
    public var notBefore: UInt64
    /// Retries made since the transfer was last started by a client.
    public var retriesUsed: UInt32
    /// When the session's `resource-timeout` started counting (µs; 0 = not yet).
    public var resourceStarted: UInt64
    /// Set while the verified `.part` file is being moved to this final path: a restart
    /// that finds the file there (and no `.part`) completes the transfer instead of
    /// downloading it again.
    public var finishingPath: String?
    /// An upload's settings (nil for a download).
    public var upload: UploadSpec?
    /// A segmented download's ranges on disk (under `etag`/`lastModified`).
    public var segments: SegmentMap?
    /// A download asked for several connections whose last attempt ran on one: its part
    /// file is a plain prefix (for the bytes checkpointed in `snapshot`).
    public var partIsPrefix: Bool
    /// The most of the part file a download made from resume data may keep until a
    /// response cuts the file there (the data's offset); nil: all of it.
    public var prefixLimit: Int64?
    /// What of the part file was synced to the disk (`EngineEvent.durable`): all that
    /// is trusted of it after the machine restarted.
    public var durablePart: DurablePart?
    /// Paused because its session's last client left the bus (`on-client-exit` pause):
    /// a client opening the session again resumes it.
    public var pausedByClientExit: Bool

    public init(snapshot: TransferSnapshot, options: DownloadOptions, directory: String, serverMayName: Bool,
                partPath: String, etag: String? = nil, lastModified: String? = nil, notBefore: UInt64 = 0,
                retriesUsed: UInt32 = 0, resourceStarted: UInt64 = 0, finishingPath: String? = nil,
                upload: UploadSpec? = nil, segments: SegmentMap? = nil, partIsPrefix: Bool = false,
                prefixLimit: Int64? = nil, durablePart: DurablePart? = nil, pausedByClientExit: Bool = false) {
        self.durablePart = durablePart
        self.pausedByClientExit = pausedByClientExit
        self.upload = upload; self.segments = segments; self.partIsPrefix = partIsPrefix; self.prefixLimit = prefixLimit
        self.snapshot = snapshot; self.options = options; self.directory = directory
        self.serverMayName = serverMayName; self.partPath = partPath; self.etag = etag
        self.lastModified = lastModified; self.notBefore = notBefore; self.retriesUsed = retriesUsed
        self.resourceStarted = resourceStarted; self.finishingPath = finishingPath
    }
}

/// The next ids to hand out. Stored with every write, so an id is never handed out
/// twice, even after the rows that used it are deleted.
public struct StoreCounters: Sendable, Equatable {
    public var nextSessionID: SessionID
    public var nextTransferID: TransferID
    public var nextSerial: UInt64
    public var nextGroupID: GroupID

    public init(nextSessionID: SessionID = 1, nextTransferID: TransferID = 1, nextSerial: UInt64 = 1,
                nextGroupID: GroupID = 1) {
        self.nextSessionID = nextSessionID; self.nextTransferID = nextTransferID; self.nextSerial = nextSerial
        self.nextGroupID = nextGroupID
    }
}

/// The manager's writable properties.
public struct StoredSettings: Sendable, Equatable {
    public var maxConcurrentTransfers: UInt32
    public var speedLimit: UInt64
    public var notificationsEnabled: Bool
    /// (v1.2) The `Schedule`'s windows, in order.
    public var schedule: [ScheduleWindow]

    public init(maxConcurrentTransfers: UInt32 = 6, speedLimit: UInt64 = 0, notificationsEnabled: Bool = true,
                schedule: [ScheduleWindow] = []) {
        self.maxConcurrentTransfers = maxConcurrentTransfers; self.speedLimit = speedLimit
        self.notificationsEnabled = notificationsEnabled; self.schedule = schedule
    }
}

/// What `TransferStore.load` returns.
public struct StoreContents: Sendable, Equatable {
    public var sessions: [StoredSession]
    public var transfers: [StoredTransfer]
    /// Pending events per session, oldest first.
    public var events: [SessionID: [PendingEvent]]
    public var counters: StoreCounters
    /// nil when never written (the defaults apply).
    public var settings: StoredSettings?
    public var groups: [StoredGroup]

    public init(sessions: [StoredSession] = [], transfers: [StoredTransfer] = [],
                events: [SessionID: [PendingEvent]] = [:], counters: StoreCounters = StoreCounters(),
                settings: StoredSettings? = nil, groups: [StoredGroup] = []) {
        self.sessions = sessions; self.transfers = transfers; self.events = events
        self.counters = counters; self.settings = settings; self.groups = groups
    }
}

/// The store could not be read or written. Method calls that must be durable before
/// they answer (`Download`, `OpenSession`) fail with it and change nothing.
public struct StoreError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
