import Foundation
internal import DBus
internal import FerryInterface

/// What went wrong, as Ferry's contract names it: the refusals of a method call
/// (nothing changed) and the failures of a transfer. Every case carries the
/// service's message, written for a person.
public enum FerryError: LocalizedError, Sendable, Equatable, CustomStringConvertible {
    // A call was refused.
    case invalidArgument(String)
    case invalidURL(String)
    /// Only http and https.
    case unsupportedScheme(String)
    /// Relative, missing or unwritable directory.
    case invalidDestination(String)
    /// An upload's source file.
    case fileNotFound(String)
    /// E.g. pausing a completed transfer.
    case invalidState(String)
    case invalidResumeData(String)
    case noSuchSession(String)
    case noSuchTransfer(String)
    case limitExceeded(String)
    /// A sandboxed caller asked for something outside its sandbox.
    case accessDenied(String)

    // A transfer failed.
    case network(String)
    case timeout(String)
    /// The server answered with a status of 400 or more.
    case http(status: Int, message: String)
    case tls(String)
    case tooManyRedirects(String)
    /// No space, no permission.
    case disk(String)
    case checksumMismatch(String)
    case cancelled(String)
    /// The download's ``DownloadOptions/metalink`` document could not be used (over
    /// 4 MiB, a DTD or entities, not Metalink 4, bad values).
    case invalidMetalink(String)

    /// The Ferry service could not be reached (not installed, not running, bus gone).
    case serviceUnavailable(String)
    /// This run stopped following the task: its session was detached, invalidated or
    /// released before the task ended. Not a failure of the transfer, which goes on in
    /// the service: open the session again to follow it.
    case detached(String)
    /// An error outside the contract (the bus's own, or a newer service's).
    case other(name: String, message: String)

    /// The service's words.
    public var message: String {
        switch self {
        case .invalidArgument(let m), .invalidURL(let m), .unsupportedScheme(let m), .invalidDestination(let m),
             .fileNotFound(let m), .invalidState(let m), .invalidResumeData(let m), .noSuchSession(let m),
             .noSuchTransfer(let m), .limitExceeded(let m), .accessDenied(let m), .network(let m), .timeout(let m), .tls(let m),
             .tooManyRedirects(let m), .disk(let m), .checksumMismatch(let m), .cancelled(let m),
             .invalidMetalink(let m), .serviceUnavailable(let m), .detached(let m):
            return m
        case .http(_, let m), .other(_, let m):
            return m
        }
    }

    /// The service's message, for `localizedDescription` (what an app shows).
    public var errorDescription: String? { message }

    /// The HTTP status, for `.http`.
    public var httpStatus: Int? {
        if case .http(let status, _) = self { return status }
        return nil
    }

    public var description: String { message }

    /// The error a bus error name stands for.
    init(name: String, message: String, httpStatus: Int = 0) {
        switch FerryInterface.ErrorName(fullName: name) {
        case .invalidArgument: self = .invalidArgument(message)
        case .invalidUrl: self = .invalidURL(message)
        case .unsupportedScheme: self = .unsupportedScheme(message)
        case .invalidDestination: self = .invalidDestination(message)
        case .fileNotFound: self = .fileNotFound(message)
        case .invalidState: self = .invalidState(message)
        case .invalidResumeData: self = .invalidResumeData(message)
        case .noSuchSession: self = .noSuchSession(message)
        case .noSuchTransfer: self = .noSuchTransfer(message)
        case .limitExceeded: self = .limitExceeded(message)
        case .accessDenied: self = .accessDenied(message)
        case .network: self = .network(message)
        case .timeout: self = .timeout(message)
        case .http: self = .http(status: httpStatus, message: message)
        case .tls: self = .tls(message)
        case .tooManyRedirects: self = .tooManyRedirects(message)
        case .disk: self = .disk(message)
        case .checksumMismatch: self = .checksumMismatch(message)
        case .cancelled: self = .cancelled(message)
        case .invalidMetalink: self = .invalidMetalink(message)
        default:
            switch name {
            case StandardErrors.serviceUnknown, StandardErrors.nameHasNoOwner, StandardErrors.noReply,
                 StandardErrors.disconnected, "org.freedesktop.DBus.Error.Spawn.ServiceNotFound",
                 "org.freedesktop.DBus.Error.Spawn.ExecFailed", "org.freedesktop.DBus.Error.Spawn.ChildExited",
                 "org.freedesktop.DBus.Error.NoServer", "org.freedesktop.DBus.Error.FileNotFound":
                self = .serviceUnavailable(message)
            default:
                self = .other(name: name, message: message)
            }
        }
    }

    /// A bus error as a `FerryError`; anything else as it is.
    static func wrap(_ error: Error) -> Error {
        if let e = error as? BusError { return FerryError(name: e.name, message: e.message) }
        return error
    }
}

/// Runs a bus call, turning bus errors into `FerryError`.
func mapped<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch {
        throw FerryError.wrap(error)
    }
}
