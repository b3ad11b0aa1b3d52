import Foundation

public enum TransferState: String, Sendable, CaseIterable {
    case queued, waiting, running, paused, completed, failed, cancelled

    /// completed, failed, cancelled: nothing more happens unless resumed/removed.
    public var isFinal: Bool { self == .completed || self == .failed || self == .cancelled }
    /// queued, waiting, running: counts as "in the batch".
    public var isActive: Bool { self == .queued || self == .waiting || self == .running }
}

public enum TransferKind: String, Sendable { case download, upload }

public enum WaitingReason: String, Sendable {
    case startAfter = "start-after", metered, offline, retry
    /// (v1.2) A discretionary transfer while the machine runs on battery.
    case battery
    /// (v1.2) A discretionary transfer while the power-saver profile is active.
    case powerSaver = "power-saver"
    /// (v1.2) Outside the schedule's `discretionary-only` windows (discretionary
    /// transfers), or inside one (others, before they start).
    case schedule

    /// Decided by conditions (network, power, schedule) rather than a time.
    var isCondition: Bool { self != .startAfter && self != .retry }
}

/// A session's configuration: the contract's `a{sv}` keys, typed.
public struct SessionConfiguration: Sendable, Equatable {
    public var persistent: Bool = true
    /// nil = the XDG download directory.
    public var directory: String? = nil
    public var headers: [String: String] = [:]
    public var maxConnectionsPerHost: UInt32 = 6
    public var requestTimeout: Double = 60
    public var resourceTimeout: Double = 604_800
    public var allowMetered: Bool = true
    public var notify: Bool = true
    public var speedLimit: UInt64 = 0
    public var retries: UInt32 = 5
    /// nil = from the environment: ferryd's variables, else the desktop's proxy settings
    /// (the engine's `DesktopProxyLookup`).
    public var proxy: String? = nil
    public var applicationID: String = ""
    /// Keep the cookies servers set and send them back (a jar per session).
    public var cookies: Bool = true
    /// The session's signals go unicast to its own clients (and watchers), never
    /// broadcast (`private-signals`; always true for a sandboxed caller's session).
    public var privateSignals: Bool = false
    /// (v1.2) The session's transfers are discretionary unless their own
    /// `discretionary` option says otherwise (see `DiscretionaryPolicy`).
    public var discretionary: Bool = false
    /// What happens to its unfinished transfers when the last bus connection that
    /// opened or used it leaves the bus (`on-client-exit`, contract v1.2).
    public var onClientExit: ClientExitPolicy = .continue
    public init() {}
}

/// `on-client-exit`: what the session's unfinished transfers do when its last client
/// connection leaves the bus.
public enum ClientExitPolicy: String, Sendable, CaseIterable {
    /// They carry on (the default).
    case `continue`
    /// Queued, waiting and running ones pause; a client that opens the session again
    /// resumes them (only those; transfers a user paused stay paused).
    case pause
    /// Every unfinished one is cancelled.
    case cancel
}

/// Keys present replace stored values; nil keeps them (`OpenSession` semantics).
public struct SessionConfigurationUpdate: Sendable, Equatable {
    public var persistent: Bool?
    public var directory: String?
    public var headers: [String: String]?
    public var maxConnectionsPerHost: UInt32?
    public var requestTimeout: Double?
    public var resourceTimeout: Double?
    public var allowMetered: Bool?
    public var notify: Bool?
    public var speedLimit: UInt64?
    public var retries: UInt32?
    public var proxy: String?
    public var applicationID: String?
    public var cookies: Bool?
    public var privateSignals: Bool?
    public var discretionary: Bool?
    public var onClientExit: ClientExitPolicy?
    public init() {}
}

public enum TransferPriority: Int32, Sendable { case low = -1, normal = 0, high = 1 }

/// `Download` options, typed (the service checks keys and D-Bus types; the core
/// checks meaning).
public struct DownloadOptions: Sendable, Hashable {
    /// Absolute file path or existing directory; nil = the session's directory.
    public var destination: String?
    public var headers: [String: String] = [:]
    public var description: String = ""
    /// Lowercase or uppercase hex; verified at the end.
    public var sha256: String?
    /// Microseconds since the epoch; 0 = now.
    public var startAfter: UInt64 = 0
    public var priority: Int32 = 0
    public var speedLimit: UInt64 = 0
    public var connections: UInt32 = 1
    public var overwrite: Bool = false
    public var start: Bool = true
    /// (v1.2) Waits for an unmetered network, mains power and the schedule's
    /// discretionary windows; nil = as the session's `discretionary` key says.
    public var discretionary: Bool?
    /// (v1.2) The URL of a Metalink 4 document (RFC 5854): fetched when the transfer
    /// starts, its URLs, size, SHA-256 and pieces then say where the file comes from and
    /// how it is checked.
    public var metalink: String?
    /// (v1.2) More URLs of the same file: a segmented download spreads its ranges over
    /// the URL and these (at most `DownloadOptionsValidation.maximumMirrors`).
    public var mirrors: [String] = []
    /// (v1.2) The SHA-256 of each piece: every piece is checked as it completes and a
    /// bad one fetched again, from another mirror where there is one.
    public var pieces: PieceList?
    /// (v1.2) Fetched once with a queued or running download of the same caller, URL,
    /// headers and byte-changing options (`FetchKey`): this one follows it and gets its
    /// own copy when the data is complete. False: always fetched on its own.
    public var dedupe: Bool = true
    public init() {}
}

/// `Upload` options, typed (the service checks keys and D-Bus types; the core checks
/// meaning).
public struct UploadOptions: Sendable, Hashable {
    /// `PUT` or `POST`.
    public var method: String = "PUT"
    public var headers: [String: String] = [:]
    public var description: String = ""
    public var contentType: String?
    /// POST as `multipart/form-data` with the file under this field name.
    public var formField: String?
    /// Plain `name=value` parts sent before the file's (the `form-values` addition).
    public var formValues: [String: String] = [:]
    public var start: Bool = true
    /// Where the server's answer is saved; nil = its first 64 KiB in `Response`.
    public var responseDestination: String?
    /// (v1.2) As for downloads; nil = the session's `discretionary` key.
    public var discretionary: Bool?
    public init() {}
}

/// What an upload keeps to run each attempt, and to run again after a restart.
public struct UploadSpec: Sendable, Hashable {
    public var method: String
    public var contentType: String?
    public var formField: String?
    public var formValues: [String: String]
    public var responseDestination: String?
    /// The source's size and modification time (ns) when `Upload` was called: a file
    /// that differs later fails the upload rather than sending something else.
    public var size: Int64
    public var modificationTime: Int64
    /// The caller passed `source-fd`: the descriptor lives in memory only.
    public var fromDescriptor: Bool

    public init(method: String, contentType: String?, formField: String?, formValues: [String: String],
                responseDestination: String?, size: Int64, modificationTime: Int64, fromDescriptor: Bool) {
        self.method = method; self.contentType = contentType; self.formField = formField
        self.formValues = formValues; self.responseDestination = responseDestination; self.size = size
        self.modificationTime = modificationTime; self.fromDescriptor = fromDescriptor
    }
}

/// Everything a Transfer object shows as properties.
public struct TransferSnapshot: Sendable, Hashable {
    public var id: TransferID
    public var session: SessionID
    public var kind: TransferKind
    public var url: String
    public var description: String
    /// Final path of a download ("" until chosen).
    public var destination: String
    /// `destination` as clients see it: "" for a `destination-fd` download, whose path
    /// is ferryd's private copy (it has no final path).
    public var shownDestination: String {
        destination.hasPrefix(StateDirectories.descriptorDownloadsPrefix) ? "" : destination
    }
    public var state: TransferState
    /// "" unless state == waiting.
    public var waitingReason: String
    public var bytesTransferred: Int64
    public var bytesExpected: Int64
    public var rate: UInt64
    /// Microseconds since the epoch, 0 = unknown.
    public var expectedEnd: UInt64
    /// ("", "") when none.
    public var errorName: String
    public var errorMessage: String
    public var httpStatus: UInt32
    public var attempts: UInt32
    public var resumable: Bool
    public var sha256: String
    public var created: UInt64
    public var started: UInt64
    public var completed: UInt64
    public var priority: Int32
    public var speedLimit: UInt64
    /// An upload's answer: the first 64 KiB of the response body (empty otherwise).
    public var response: [UInt8] = []
    /// While waiting for a time (`retry`, `start-after`): when it is queued again (µs
    /// since the epoch); 0 otherwise (the `NextAttempt` addition).
    public var nextAttempt: UInt64 = 0
    /// Why a download that asked for several connections runs on one (the server
    /// refused ranges, the file is small, …); "" otherwise (the
    /// `SingleConnectionReason` addition).
    public var singleConnectionReason: String = ""
    /// (v1.2) The `mirrors` option, shown without credentials (the `Mirrors` property).
    public var mirrors: [String] = []
    /// (v1.2) The `pieces` option's piece length and number of pieces; 0 without
    /// (the `Pieces` property).
    public var pieceLength: UInt64 = 0
    public var pieceCount: UInt32 = 0
    /// Why a download runs on fewer connections than it asked for (the session's
    /// `max-connections-per-host`); "" otherwise (the `ConnectionLimitReason` addition).
    public var connectionLimitReason: String = ""
    /// The group it was made in (`Session.DownloadGroup`); 0: none (`Group` is `/`).
    public var group: GroupID = 0

    public init(id: TransferID, session: SessionID, kind: TransferKind = .download, url: String,
                description: String = "", destination: String = "", state: TransferState = .queued,
                waitingReason: String = "", bytesTransferred: Int64 = 0, bytesExpected: Int64 = -1,
                rate: UInt64 = 0, expectedEnd: UInt64 = 0, errorName: String = "", errorMessage: String = "",
                httpStatus: UInt32 = 0, attempts: UInt32 = 0, resumable: Bool = false, sha256: String = "",
                created: UInt64 = 0, started: UInt64 = 0, completed: UInt64 = 0, priority: Int32 = 0,
                speedLimit: UInt64 = 0) {
        self.id = id; self.session = session; self.kind = kind; self.url = url
        self.description = description; self.destination = destination; self.state = state
        self.waitingReason = waitingReason; self.bytesTransferred = bytesTransferred
        self.bytesExpected = bytesExpected; self.rate = rate; self.expectedEnd = expectedEnd
        self.errorName = errorName; self.errorMessage = errorMessage; self.httpStatus = httpStatus
        self.attempts = attempts; self.resumable = resumable; self.sha256 = sha256
        self.created = created; self.started = started; self.completed = completed
        self.priority = priority; self.speedLimit = speedLimit
    }
}

public struct SessionSnapshot: Sendable, Equatable {
    public var id: SessionID
    public var identifier: String
    public var configuration: SessionConfiguration
    public var activeTransfers: UInt32
    public init(id: SessionID, identifier: String, configuration: SessionConfiguration, activeTransfers: UInt32) {
        self.id = id; self.identifier = identifier; self.configuration = configuration
        self.activeTransfers = activeTransfers
    }
}

public struct ManagerSnapshot: Sendable, Equatable {
    public var activeTransfers: UInt32
    public var queuedTransfers: UInt32
    public var downloadRate: UInt64
    public var uploadRate: UInt64
    public var maxConcurrentTransfers: UInt32
    public var speedLimit: UInt64
    public var notificationsEnabled: Bool
    /// (v1.2) The `Schedule`, as set.
    public var schedule: [ScheduleWindow]
    public init(activeTransfers: UInt32 = 0, queuedTransfers: UInt32 = 0, downloadRate: UInt64 = 0,
                uploadRate: UInt64 = 0, maxConcurrentTransfers: UInt32 = 6, speedLimit: UInt64 = 0,
                notificationsEnabled: Bool = true, schedule: [ScheduleWindow] = []) {
        self.schedule = schedule
        self.activeTransfers = activeTransfers; self.queuedTransfers = queuedTransfers
        self.downloadRate = downloadRate; self.uploadRate = uploadRate
        self.maxConcurrentTransfers = maxConcurrentTransfers; self.speedLimit = speedLimit
        self.notificationsEnabled = notificationsEnabled
    }
}

public enum CompletionKind: String, Sendable { case finished, failed, cancelled }

/// A completion event kept until the client acknowledges it.
public struct PendingEvent: Sendable, Equatable {
    public var serial: UInt64
    public var transfer: TransferID
    public var kind: CompletionKind
    /// location, error-name, error-message, http-status, bytes, sha256 — where they apply.
    public var location: String?
    public var errorName: String?
    public var errorMessage: String?
    public var httpStatus: UInt32?
    public var bytes: Int64?
    public var sha256: String?
    public init(serial: UInt64, transfer: TransferID, kind: CompletionKind, location: String? = nil,
                errorName: String? = nil, errorMessage: String? = nil, httpStatus: UInt32? = nil,
                bytes: Int64? = nil, sha256: String? = nil) {
        self.serial = serial; self.transfer = transfer; self.kind = kind; self.location = location
        self.errorName = errorName; self.errorMessage = errorMessage; self.httpStatus = httpStatus
        self.bytes = bytes; self.sha256 = sha256
    }

    /// At least the bytes the event takes in a `PendingEvents` reply (its strings, and
    /// room for the numbers, names, alignment and the transfer's path).
    public var wireBytesBound: Int {
        256 + (location?.utf8.count ?? 0) + (errorName?.utf8.count ?? 0) + (errorMessage?.utf8.count ?? 0)
            + (sha256?.utf8.count ?? 0)
    }
}

/// Batch counts for `AllFinished`.
public struct BatchCounts: Sendable, Equatable {
    public var succeeded: UInt32 = 0
    public var failed: UInt32 = 0
    public var cancelled: UInt32 = 0
    public init(succeeded: UInt32 = 0, failed: UInt32 = 0, cancelled: UInt32 = 0) {
        self.succeeded = succeeded; self.failed = failed; self.cancelled = cancelled
    }
}
