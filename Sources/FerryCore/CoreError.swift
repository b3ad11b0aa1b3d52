import FerryInterface
/// Every error the daemon reports, typed (FerryClient has its own `FerryError` for apps).
/// Each becomes a named D-Bus error
/// (`org.ferry.Ferry1.Error.<Name>`) at the bus boundary, once.
public enum CoreError: Error, Equatable, Sendable {
    // Method errors: the call is refused and nothing changes.
    case invalidArgument(String)
    case invalidUrl(String)
    case unsupportedScheme(String)
    case invalidDestination(String)
    case fileNotFound(String)
    case invalidState(String)
    case invalidResumeData(String)
    case noSuchSession(String)
    case noSuchTransfer(String)
    case limitExceeded(String)
    /// A sandboxed caller asked for something that is not its own (v1.1).
    case accessDenied(String)

    // Transfer failures: in `Error`, `Completed` and pending events.
    case network(String)
    /// `Network` on the bus, but not worth a retry: the server's answer cannot be used
    /// as it is (a response header larger than libcurl takes), and will not change by
    /// asking again at once.
    case unusableResponse(String)
    case timeout(String)
    case http(status: Int, String)
    case tls(String)
    case tooManyRedirects(String)
    case disk(String)
    case checksumMismatch(String)
    case cancelled(String)
    /// (v1.2 addition) The transfer's `metalink` document could not be used (too large,
    /// DTDs or entities, not Metalink 4, bad values, disagrees with `sha256`). Final.
    case invalidMetalink(String)

    public static let prefix = FerryInterface.errorPrefix

    /// Its name in the contract (declared in `FerryInterface`).
    public var errorName: FerryInterface.ErrorName {
        switch self {
        case .invalidArgument: return .invalidArgument
        case .invalidUrl: return .invalidUrl
        case .unsupportedScheme: return .unsupportedScheme
        case .invalidDestination: return .invalidDestination
        case .fileNotFound: return .fileNotFound
        case .invalidState: return .invalidState
        case .invalidResumeData: return .invalidResumeData
        case .noSuchSession: return .noSuchSession
        case .noSuchTransfer: return .noSuchTransfer
        case .limitExceeded: return .limitExceeded
        case .accessDenied: return .accessDenied
        case .network, .unusableResponse: return .network
        case .timeout: return .timeout
        case .http: return .http
        case .tls: return .tls
        case .tooManyRedirects: return .tooManyRedirects
        case .disk: return .disk
        case .checksumMismatch: return .checksumMismatch
        case .cancelled: return .cancelled
        case .invalidMetalink: return .invalidMetalink
        }
    }

    /// The short name, e.g. `InvalidArgument`.
    public var shortName: String { errorName.rawValue }

    /// The full D-Bus error name.
    public var name: String { CoreError.prefix + shortName }

    /// A message a person can act on. Never holds a secret header value.
    public var message: String {
        switch self {
        case .invalidArgument(let m), .invalidUrl(let m), .unsupportedScheme(let m),
             .invalidDestination(let m), .fileNotFound(let m), .invalidState(let m),
             .invalidResumeData(let m), .noSuchSession(let m), .noSuchTransfer(let m),
             .limitExceeded(let m), .accessDenied(let m), .network(let m), .unusableResponse(let m), .timeout(let m), .tls(let m),
             .tooManyRedirects(let m), .disk(let m), .checksumMismatch(let m), .cancelled(let m), .invalidMetalink(let m):
            return m
        case .http(_, let m):
            return m
        }
    }

    /// Rebuilds an error from its D-Bus name and message (for stored failures).
    public init?(name: String, message: String, httpStatus: Int = 0) {
        let short = name.hasPrefix(CoreError.prefix) ? String(name.dropFirst(CoreError.prefix.count)) : name
        switch short {
        case "InvalidArgument": self = .invalidArgument(message)
        case "InvalidUrl": self = .invalidUrl(message)
        case "UnsupportedScheme": self = .unsupportedScheme(message)
        case "InvalidDestination": self = .invalidDestination(message)
        case "FileNotFound": self = .fileNotFound(message)
        case "InvalidState": self = .invalidState(message)
        case "InvalidResumeData": self = .invalidResumeData(message)
        case "NoSuchSession": self = .noSuchSession(message)
        case "NoSuchTransfer": self = .noSuchTransfer(message)
        case "LimitExceeded": self = .limitExceeded(message)
        case "AccessDenied": self = .accessDenied(message)
        case "Network": self = .network(message)
        case "Timeout": self = .timeout(message)
        case "Http": self = .http(status: httpStatus, message)
        case "Tls": self = .tls(message)
        case "TooManyRedirects": self = .tooManyRedirects(message)
        case "Disk": self = .disk(message)
        case "ChecksumMismatch": self = .checksumMismatch(message)
        case "Cancelled": self = .cancelled(message)
        case "InvalidMetalink": self = .invalidMetalink(message)
        default: return nil
        }
    }
}
