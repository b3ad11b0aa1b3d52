/// A property of the bus API as the contract declares it: its name, its D-Bus type,
/// whether clients may set it, and whether it sends `PropertiesChanged`. The daemon
/// builds its interfaces and property values from these, the clients read values by
/// them: no property name is spelled anywhere else.
public struct BusProperty: Sendable, Hashable {
    public let name: String
    /// The D-Bus type signature of its value.
    public let signature: String
    public let writable: Bool
    public let emitsChange: Bool
    /// Never changes while ferryd runs (`EmitsChangedSignal` "const").
    public let constant: Bool

    init(_ name: String, _ signature: String, writable: Bool = false, emitsChange: Bool = true, constant: Bool = false) {
        self.name = name
        self.signature = signature
        self.writable = writable
        self.emitsChange = emitsChange && !constant
        self.constant = constant
    }
}

extension FerryInterface {
    /// `org.ferry.Ferry1.Manager`'s properties.
    public enum ManagerProperty {
        public static let version = BusProperty("Version", "s")
        public static let activeTransfers = BusProperty("ActiveTransfers", "u")
        public static let queuedTransfers = BusProperty("QueuedTransfers", "u")
        public static let downloadRate = BusProperty("DownloadRate", "t", emitsChange: false)
        public static let uploadRate = BusProperty("UploadRate", "t", emitsChange: false)
        public static let maxConcurrentTransfers = BusProperty("MaxConcurrentTransfers", "u", writable: true)
        public static let speedLimit = BusProperty("SpeedLimit", "t", writable: true)
        public static let notificationsEnabled = BusProperty("NotificationsEnabled", "b", writable: true)
        /// (v1.2) Windows of `(days, start, end, speed_limit, extras)`.
        public static let schedule = BusProperty("Schedule", "a(sssta{sv})", writable: true)
        /// (v1.2) Which additions of the contract this daemon has: `currentInterfaceVersion`.
        public static let interfaceVersion = BusProperty("InterfaceVersion", "s", constant: true)

        /// In the contract's order.
        public static let all = [version, activeTransfers, queuedTransfers, downloadRate, uploadRate,
                                 maxConcurrentTransfers, speedLimit, notificationsEnabled, schedule, interfaceVersion]
    }

    /// `org.ferry.Ferry1.Session`'s properties.
    public enum SessionProperty {
        public static let identifier = BusProperty("Identifier", "s")
        public static let configuration = BusProperty("Configuration", "a{sv}")
        public static let activeTransfers = BusProperty("ActiveTransfers", "u")

        public static let all = [identifier, configuration, activeTransfers]
    }

    /// `org.ferry.Ferry1.Transfer`'s properties.
    public enum TransferProperty {
        public static let kind = BusProperty("Kind", "s")
        public static let url = BusProperty("Url", "s")
        public static let session = BusProperty("Session", "o")
        public static let description = BusProperty("Description", "s")
        public static let destination = BusProperty("Destination", "s")
        public static let state = BusProperty("State", "s")
        public static let waitingReason = BusProperty("WaitingReason", "s")
        public static let bytesTransferred = BusProperty("BytesTransferred", "x", emitsChange: false)
        public static let bytesExpected = BusProperty("BytesExpected", "x")
        public static let rate = BusProperty("Rate", "t", emitsChange: false)
        public static let expectedEnd = BusProperty("ExpectedEnd", "t", emitsChange: false)
        public static let error = BusProperty("Error", "(ss)")
        public static let httpStatus = BusProperty("HttpStatus", "u")
        public static let attempts = BusProperty("Attempts", "u")
        public static let resumable = BusProperty("Resumable", "b")
        public static let sha256 = BusProperty("Sha256", "s")
        public static let response = BusProperty("Response", "ay")
        public static let created = BusProperty("Created", "t")
        public static let started = BusProperty("Started", "t")
        public static let completed = BusProperty("Completed", "t")
        public static let priority = BusProperty("Priority", "i", writable: true)
        public static let speedLimit = BusProperty("SpeedLimit", "t", writable: true)
        /// (Addition.) While waiting for a time: when it is tried again (µs), else 0.
        public static let nextAttempt = BusProperty("NextAttempt", "t")
        /// (Addition.) Why a download asked to use several connections uses one, else "".
        public static let singleConnectionReason = BusProperty("SingleConnectionReason", "s")
        /// (v1.2) The group it was made in; `/` when none.
        public static let group = BusProperty("Group", "o")
        /// (Addition.) Why a download uses fewer connections than its `connections` asked
        /// for (the session's `max-connections-per-host`), else "".
        public static let connectionLimitReason = BusProperty("ConnectionLimitReason", "s")
        /// (v1.2 addition) The download's `mirrors` option, without credentials.
        public static let mirrors = BusProperty("Mirrors", "as")
        /// (v1.2 addition) The `pieces` option's piece length and number of pieces; (0, 0) without.
        public static let pieces = BusProperty("Pieces", "(tu)")

        public static let all = [kind, url, session, description, destination, state, waitingReason, bytesTransferred,
                                 bytesExpected, rate, expectedEnd, error, httpStatus, attempts, resumable, sha256,
                                 response, created, started, completed, priority, speedLimit, nextAttempt,
                                 singleConnectionReason, group, connectionLimitReason, mirrors, pieces]
    }

    /// (v1.2) `org.ferry.Ferry1.Group`'s properties.
    public enum GroupProperty {
        public static let session = BusProperty("Session", "o")
        public static let description = BusProperty("Description", "s")
        public static let transfers = BusProperty("Transfers", "ao")
        public static let state = BusProperty("State", "s")
        public static let succeeded = BusProperty("Succeeded", "u")
        public static let failed = BusProperty("Failed", "u")
        public static let cancelled = BusProperty("Cancelled", "u")
        public static let bytesTransferred = BusProperty("BytesTransferred", "x")
        public static let bytesExpected = BusProperty("BytesExpected", "x")

        public static let all = [session, description, transfers, state, succeeded, failed, cancelled,
                                 bytesTransferred, bytesExpected]
    }
}
