/// The names of Ferry's bus API — the contract's Names table and its error names —
/// declared once, for the daemon (`FerryService`, `FerryCore`'s errors), the clients
/// (`FerryBusClient`, `FerryClient`) and the `ferry` CLI.
public enum FerryInterface {
    /// Ferry's release: ferryd's `Version` property and both programs' `--version`.
    public static let releaseVersion = "0.2.0"
    /// The contract's version this daemon implements in full (Manager `InterfaceVersion`):
    /// "1.2" has every v1.2 addition. Unlike `releaseVersion`, a client may test it.
    public static let currentInterfaceVersion = "1.2"
    public static let busName = "org.ferry.Ferry1"
    public static let managerPath = "/org/ferry/Ferry1"
    public static let managerInterface = "org.ferry.Ferry1.Manager"
    public static let sessionInterface = "org.ferry.Ferry1.Session"
    public static let transferInterface = "org.ferry.Ferry1.Transfer"
    /// (v1.2) A group of `Session.DownloadGroup`.
    public static let groupInterface = "org.ferry.Ferry1.Group"
    /// Session objects are `sessionPathPrefix` + a decimal id (never reused).
    public static let sessionPathPrefix = managerPath + "/session/"
    /// Transfer objects are `transferPathPrefix` + a decimal id (never reused).
    public static let transferPathPrefix = managerPath + "/transfer/"

    public static func sessionPath(_ id: UInt64) -> String { sessionPathPrefix + String(id) }
    public static func transferPath(_ id: UInt64) -> String { transferPathPrefix + String(id) }
    /// Group objects are `groupPathPrefix` + a decimal id (never reused).
    public static let groupPathPrefix = managerPath + "/group/"
    public static func groupPath(_ id: UInt64) -> String { groupPathPrefix + String(id) }

    /// The id in a session (`kind` "session") or transfer ("transfer") path, or nil when
    /// the path is not one.
    public static func id(inPath path: String, kind: String) -> UInt64? {
        let prefix = "\(managerPath)/\(kind)/"
        guard path.hasPrefix(prefix) else { return nil }
        let rest = path.dropFirst(prefix.count)
        guard !rest.isEmpty, rest.allSatisfy(\.isNumber) else { return nil }
        return UInt64(rest)
    }

    /// Every error name is this prefix and an `ErrorName`.
    public static let errorPrefix = "org.ferry.Ferry1.Error."

    /// The contract's error names: method refusals, then transfer failures.
    public enum ErrorName: String, CaseIterable, Sendable {
        case invalidArgument = "InvalidArgument"
        case invalidUrl = "InvalidUrl"
        case unsupportedScheme = "UnsupportedScheme"
        case invalidDestination = "InvalidDestination"
        case fileNotFound = "FileNotFound"
        case invalidState = "InvalidState"
        case invalidResumeData = "InvalidResumeData"
        case noSuchSession = "NoSuchSession"
        case noSuchTransfer = "NoSuchTransfer"
        case limitExceeded = "LimitExceeded"
        /// A sandboxed caller asked for something outside its sandbox (an addition).
        case accessDenied = "AccessDenied"
        case network = "Network"
        case timeout = "Timeout"
        case http = "Http"
        case tls = "Tls"
        case tooManyRedirects = "TooManyRedirects"
        case disk = "Disk"
        case checksumMismatch = "ChecksumMismatch"
        case cancelled = "Cancelled"
        /// (v1.2 addition) A `metalink` document that could not be used: over 4 MiB,
        /// with a DTD or entities, not Metalink 4, or with bad values.
        case invalidMetalink = "InvalidMetalink"

        /// `org.ferry.Ferry1.Error.<Name>`.
        public var fullName: String { FerryInterface.errorPrefix + rawValue }

        /// The name a full bus error name stands for, nil when it is not one of Ferry's.
        public init?(fullName: String) {
            guard fullName.hasPrefix(FerryInterface.errorPrefix) else { return nil }
            self.init(rawValue: String(fullName.dropFirst(FerryInterface.errorPrefix.count)))
        }
    }
}
