import Foundation
internal import DBus
internal import FerryInterface

private typealias DownloadKey = FerryInterface.DownloadOption
private typealias SessionKey = FerryInterface.SessionOption
private typealias UploadKey = FerryInterface.UploadOption

extension FerrySession {
    /// How a session behaves: the contract's session configuration, typed, in
    /// `URLSessionConfiguration`'s words. A property left `nil` keeps what the
    /// service has stored for the session (or its default).
    public struct Configuration: Sendable, Equatable {
        /// The stable identifier the session is found by again (1-255 characters of
        /// `[A-Za-z0-9._-]`, reverse-DNS recommended).
        public var identifier: String
        /// false: an ephemeral session; its transfers and events live in memory only.
        public var isPersistent: Bool
        /// Where downloads go when no destination is given (default: the XDG download directory).
        public var downloadDirectory: URL?
        /// Added to every request (`HTTPAdditionalHeaders`).
        public var httpAdditionalHeaders: [String: String]?
        /// `HTTPMaximumConnectionsPerHost` (default 6).
        public var httpMaximumConnectionsPerHost: Int?
        /// Seconds without data before a try fails (default 60).
        public var timeoutIntervalForRequest: TimeInterval?
        /// Seconds a transfer may take in all, retries included (default 7 days).
        public var timeoutIntervalForResource: TimeInterval?
        /// false: wait while the network is metered (default true).
        public var allowsExpensiveNetworkAccess: Bool?
        /// Whether the session's transfers count for the desktop notification (default true).
        public var sendsNotifications: Bool?
        /// Bytes/s over the session's transfers; 0 = none.
        public var speedLimit: UInt64?
        /// Retries after transient errors, with backoff (default 5).
        public var retries: Int?
        /// A proxy for the session's requests (`http://`, `socks5h://`); default from the
        /// environment: ferryd's `http_proxy` and the like, else the desktop's proxy settings.
        public var proxy: URL?
        /// Keep cookies servers set and send them back (default true).
        public var httpShouldSetCookies: Bool?
        /// A DBusActivatable application id: Ferry wakes the application when events
        /// are pending and none of its clients is on the bus (`sessionSendsLaunchEvents`).
        /// See ``FerryWakeUp``.
        public var applicationID: String?
        /// true: the session's signals go only to its own clients (and to watchers),
        /// never broadcast (`private-signals`, contract v1.2; default false, always
        /// true for a sandboxed application's session).
        public var privateSignals: Bool?
        /// true: the session's transfers are discretionary (`discretionary`, contract
        /// v1.2; default false): they wait while the network is metered, the machine
        /// runs on battery, the power-saver profile is active, or outside the service's
        /// discretionary-only schedule windows (`isDiscretionary`). A download's own
        /// ``DownloadOptions/isDiscretionary`` wins over it.
        public var isDiscretionary: Bool?
        /// What the session's unfinished transfers do when the last bus connection that
        /// opened or used the session leaves the bus (`on-client-exit`, contract v1.2;
        /// default ``ClientExitPolicy/continue``).
        public var onClientExit: ClientExitPolicy?
        /// The D-Bus address to reach Ferry at; nil = the session bus.
        public var busAddress: String?
        /// Whether `OpenSession` says `persistent` (``isPersistent``); false keeps what
        /// the service has (a woken session stays as it was opened).
        var sendsPersistence = true
        /// Settings to set back to the service's default (``resetToDefault(_:)``).
        var resets: Set<ResettableSetting> = []

        /// A setting that ``resetToDefault(_:)`` can set back to the service's default
        /// (a `nil` property keeps what the service has, so it cannot).
        public enum ResettableSetting: Sendable, Hashable, CaseIterable {
            /// The XDG download directory again.
            case downloadDirectory
            /// The proxy from the environment again.
            case proxy
            /// No application to wake.
            case applicationID
        }

        /// Sets `setting` back to the service's default when a session is made with
        /// this configuration (the property becomes nil here). Setting the property
        /// afterwards sends that value instead.
        public mutating func resetToDefault(_ setting: ResettableSetting) {
            resets.insert(setting)
            switch setting {
            case .downloadDirectory: downloadDirectory = nil
            case .proxy: proxy = nil
            case .applicationID: applicationID = nil
            }
        }
        /// The headers and proxy as `storedConfiguration()` read them (values hidden,
        /// credentials dropped): sent back unchanged, they would replace the real ones,
        /// so they are not sent unless changed.
        var readHeaders: [String: String]?
        var readProxy: URL?

        /// Equal when every public property is, and the same settings are reset (what
        /// the library remembers of a `storedConfiguration()` read does not count).
        public static func == (a: Configuration, b: Configuration) -> Bool {
            a.identifier == b.identifier && a.isPersistent == b.isPersistent && a.downloadDirectory == b.downloadDirectory
                && a.httpAdditionalHeaders == b.httpAdditionalHeaders
                && a.httpMaximumConnectionsPerHost == b.httpMaximumConnectionsPerHost
                && a.timeoutIntervalForRequest == b.timeoutIntervalForRequest
                && a.timeoutIntervalForResource == b.timeoutIntervalForResource
                && a.allowsExpensiveNetworkAccess == b.allowsExpensiveNetworkAccess
                && a.sendsNotifications == b.sendsNotifications && a.speedLimit == b.speedLimit && a.retries == b.retries
                && a.proxy == b.proxy && a.httpShouldSetCookies == b.httpShouldSetCookies
                && a.applicationID == b.applicationID && a.busAddress == b.busAddress && a.resets == b.resets
                && a.isDiscretionary == b.isDiscretionary
                && a.privateSignals == b.privateSignals && a.onClientExit == b.onClientExit
        }

        /// A session whose transfers go on when the app exits, and survive restarts.
        public static func background(identifier: String) -> Configuration {
            Configuration(identifier: identifier, isPersistent: true)
        }

        /// A session kept in memory only: its transfers vanish with the service.
        public static func ephemeral(identifier: String) -> Configuration {
            Configuration(identifier: identifier, isPersistent: false)
        }

        public init(identifier: String, isPersistent: Bool = true) {
            self.identifier = identifier
            self.isPersistent = isPersistent
        }

        /// From the service's `Configuration` property (every key set; an empty proxy
        /// or application id is none).
        init(identifier: String, stored c: [String: DBusValue]) {
            self.init(identifier: identifier, isPersistent: c[SessionKey.persistent.name]?.bool ?? true)
            downloadDirectory = c[SessionKey.directory.name]?.string.flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0, isDirectory: true) }
            httpAdditionalHeaders = c[SessionKey.headers.name]?.stringDict
            httpMaximumConnectionsPerHost = c[SessionKey.maxConnectionsPerHost.name]?.uint32.map(Int.init)
            timeoutIntervalForRequest = c[SessionKey.requestTimeout.name]?.double
            timeoutIntervalForResource = c[SessionKey.resourceTimeout.name]?.double
            allowsExpensiveNetworkAccess = c[SessionKey.allowMetered.name]?.bool
            sendsNotifications = c[SessionKey.notify.name]?.bool
            speedLimit = c[SessionKey.speedLimit.name]?.uint64
            retries = c[SessionKey.retries.name]?.uint32.map(Int.init)
            proxy = c[SessionKey.proxy.name]?.string.flatMap { $0.isEmpty ? nil : URL(string: $0) }
            httpShouldSetCookies = c[SessionKey.cookies.name]?.bool
            applicationID = c[SessionKey.applicationID.name]?.string.flatMap { $0.isEmpty ? nil : $0 }
            privateSignals = c[SessionKey.privateSignals.name]?.bool
            isDiscretionary = c[SessionKey.discretionary.name]?.bool
            onClientExit = c[SessionKey.onClientExit.name]?.string.flatMap(ClientExitPolicy.init(rawValue:))
            readHeaders = httpAdditionalHeaders
            readProxy = proxy
        }

        /// The `OpenSession` configuration: only what was set.
        var busValue: [String: DBusValue] {
            var c: [String: DBusValue] = sendsPersistence ? [SessionKey.persistent.name: .boolean(isPersistent)] : [:]
            if let downloadDirectory { c[SessionKey.directory.name] = .string(downloadDirectory.path) } else if resets.contains(.downloadDirectory) { c[SessionKey.directory.name] = .string("") }
            if let httpAdditionalHeaders, httpAdditionalHeaders != readHeaders { c[SessionKey.headers.name] = .stringDict(httpAdditionalHeaders) }
            if let httpMaximumConnectionsPerHost { c[SessionKey.maxConnectionsPerHost.name] = .uint32(UInt32(clamping: httpMaximumConnectionsPerHost)) }
            if let timeoutIntervalForRequest { c[SessionKey.requestTimeout.name] = .double(timeoutIntervalForRequest) }
            if let timeoutIntervalForResource { c[SessionKey.resourceTimeout.name] = .double(timeoutIntervalForResource) }
            if let allowsExpensiveNetworkAccess { c[SessionKey.allowMetered.name] = .boolean(allowsExpensiveNetworkAccess) }
            if let sendsNotifications { c[SessionKey.notify.name] = .boolean(sendsNotifications) }
            if let speedLimit { c[SessionKey.speedLimit.name] = .uint64(speedLimit) }
            if let retries { c[SessionKey.retries.name] = .uint32(UInt32(clamping: retries)) }
            if let proxy, proxy != readProxy { c[SessionKey.proxy.name] = .string(proxy.absoluteString) } else if proxy == nil, resets.contains(.proxy) { c[SessionKey.proxy.name] = .string("") }
            if let httpShouldSetCookies { c[SessionKey.cookies.name] = .boolean(httpShouldSetCookies) }
            if let privateSignals { c[SessionKey.privateSignals.name] = .boolean(privateSignals) }
            if let isDiscretionary { c[SessionKey.discretionary.name] = .boolean(isDiscretionary) }
            if let onClientExit { c[SessionKey.onClientExit.name] = .string(onClientExit.rawValue) }
            if let applicationID { c[SessionKey.applicationID.name] = .string(applicationID) } else if resets.contains(.applicationID) { c[SessionKey.applicationID.name] = .string("") }
            return c
        }
    }
}

/// What a session's unfinished transfers do when its last client leaves the bus
/// (`Configuration.onClientExit`; the session key `on-client-exit`).
public enum ClientExitPolicy: String, Sendable, Codable, CaseIterable {
    /// They go on (the default): a background session.
    case `continue`
    /// Queued, waiting and running transfers pause; they resume when a client opens the
    /// session again (those alone: transfers paused by a user stay paused).
    case pause
    /// Every unfinished transfer is cancelled.
    case cancel
}

/// How soon a transfer runs among the queued ones.
public enum TransferPriority: Int32, Sendable, Codable {
    case low = -1, normal = 0, high = 1
}

/// Options of one download (`Session.Download`). Unset options take the service's defaults.
public struct DownloadOptions: Sendable, Equatable {
    /// Headers for this download's requests (on top of the session's).
    public var headers: [String: String] = [:]
    /// Shown in listings and notifications.
    public var description: String?
    /// The expected SHA-256 (hex): a mismatch fails the download with `checksumMismatch`.
    public var sha256: String?
    /// Not before this time.
    public var startAfter: Date?
    public var priority: TransferPriority?
    /// Bytes/s for this download; 0 = none.
    public var speedLimit: UInt64?
    /// Parallel ranges for one file, 1-16.
    public var connections: Int?
    /// Replace an existing file (default: pick a unique name `name (1).ext`).
    public var overwrite: Bool = false
    /// Create the task suspended (the `start` option false): it is `.paused`, and the
    /// server is not asked, until `FerryTask.resume()`. `FerrySession.downloadTask(with:)`
    /// sets it.
    public var startsSuspended: Bool = false
    /// Wait for an unmetered network, mains power and the schedule's
    /// discretionary-only windows (`discretionary`, contract v1.2); nil = as the
    /// session's ``FerrySession/Configuration/isDiscretionary`` says.
    public var isDiscretionary: Bool?
    /// A Metalink 4 document (RFC 5854, `.meta4`) describing the file (`metalink`,
    /// contract v1.2): the service fetches it when the download starts and takes the
    /// file from its URLs, best first, checked against its size and SHA-256. A document
    /// it cannot use fails the task with ``FerryError/invalidMetalink(_:)``.
    public var metalink: URL?
    /// More http or https URLs of the same file (`mirrors`, contract v1.2; at most 16):
    /// the download's ranges are spread over its URL and these, and a mirror that fails
    /// (an error, a short answer, a bad piece) is dropped for that attempt.
    public var mirrors: [URL] = []
    /// The SHA-256 of each piece of the file (`pieces`, contract v1.2): every piece is
    /// checked as it completes and a bad one is fetched again, from another mirror
    /// where there is one; when every source fails a piece the download fails with
    /// `checksumMismatch` naming them.
    public var pieces: Pieces?

    /// A piece length and the SHA-256 of each piece, in order (the last piece holds
    /// what is left of the file).
    public struct Pieces: Sendable, Equatable {
        /// Bytes per piece: 16 KiB to 1 GiB.
        public var length: UInt64
        /// 64 hexadecimal digits per piece; at most 32,768 pieces.
        public var sha256: [String]
        public init(length: UInt64, sha256: [String]) { self.length = length; self.sha256 = sha256 }
    }
    /// Fetch it once with a queued or running download of the same URL, headers and
    /// checksum by this application, and get a copy of that download's file (`dedupe`,
    /// contract v1.2; the service's default is true). false: always fetched on its own.
    public var dedupe: Bool?

    public init() {}

    func busValue(destination: URL?) -> [String: DBusValue] {
        var o: [String: DBusValue] = [:]
        // A directory URL keeps its slash: the service then takes it for a directory
        // (refused when there is none), not for the name of a file to make.
        if let destination {
            o[DownloadKey.destination.name] = .string(destination.hasDirectoryPath && !destination.path.hasSuffix("/") ? destination.path + "/" : destination.path)
        }
        if !headers.isEmpty { o[DownloadKey.headers.name] = .stringDict(headers) }
        if let description { o[DownloadKey.description.name] = .string(description) }
        if let sha256 { o["sha256"] = .string(sha256) }
        if let startAfter { o[DownloadKey.startAfter.name] = .uint64(UInt64(max(0, startAfter.timeIntervalSince1970) * 1_000_000)) }
        if let priority { o[DownloadKey.priority.name] = .int32(priority.rawValue) }
        if let speedLimit { o[DownloadKey.speedLimit.name] = .uint64(speedLimit) }
        if let connections { o[DownloadKey.connections.name] = .uint32(UInt32(clamping: connections)) }
        if overwrite { o[DownloadKey.overwrite.name] = .boolean(true) }
        if startsSuspended { o[DownloadKey.start.name] = .boolean(false) }
        if let isDiscretionary { o[DownloadKey.discretionary.name] = .boolean(isDiscretionary) }
        if let metalink { o[DownloadKey.metalink.name] = .string(metalink.absoluteString) }
        if !mirrors.isEmpty { o[DownloadKey.mirrors.name] = .stringArray(mirrors.map(\.absoluteString)) }
        if let pieces { o[DownloadKey.pieces.name] = .structure([.uint64(pieces.length), .stringArray(pieces.sha256)]) }
        if let dedupe { o[DownloadKey.dedupe.name] = .boolean(dedupe) }
        return o
    }
}

/// Options of one upload (`Session.Upload`).
public struct UploadOptions: Sendable, Equatable {
    public enum Method: String, Sendable { case put = "PUT", post = "POST" }
    /// A POST the server answered with success is not retried when the answer is cut
    /// (the server took it), and a lost connection, or a stop of ferryd while it was
    /// under way, counts against the session's retries even over HTTP/2, where a PUT is
    /// sent again at once. A POST whose body is all out runs on to its answer when the
    /// network becomes metered or offline or a discretionary wait begins.
    public var method: Method = .put
    public var headers: [String: String] = [:]
    public var description: String?
    public var contentType: String?
    /// POST as `multipart/form-data`, the file under this field.
    public var formField: String?
    /// Save the server's response body here: replaced only by a whole successful
    /// answer (a failed upload leaves what was there, and makes no file where there was
    /// none).
    public var responseDestination: URL?
    /// Create the task suspended: `FerryTask.resume()` starts it
    /// (`FerrySession.uploadTask(with:fromFile:)` sets it).
    public var startsSuspended: Bool = false
    /// As ``DownloadOptions/isDiscretionary``.
    public var isDiscretionary: Bool?

    public init() {}

    var busValue: [String: DBusValue] {
        var o: [String: DBusValue] = [UploadKey.method.name: .string(method.rawValue)]
        if !headers.isEmpty { o[UploadKey.headers.name] = .stringDict(headers) }
        if let description { o[UploadKey.description.name] = .string(description) }
        if let contentType { o[UploadKey.contentType.name] = .string(contentType) }
        if let formField { o[UploadKey.formField.name] = .string(formField) }
        if let responseDestination { o[UploadKey.responseDestination.name] = .string(responseDestination.path) }
        if startsSuspended { o[UploadKey.start.name] = .boolean(false) }
        if let isDiscretionary { o[UploadKey.discretionary.name] = .boolean(isDiscretionary) }
        return o
    }
}
