import ArgumentParser
import DBus
import FerryClient
import Foundation

@main
struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Download files in the background with the Ferry service (org.ferry.Ferry1).",
        discussion: """
            Transfers belong to the service, not to this command: they go on after it exits.
            Exit status: 0 success; 1 a transfer failed or was cancelled; 2 the service refused \
            the request; 3 the service could not be reached; 64 a usage error.
            """,
        version: "0.1.0",
        subcommands: [Get.self, List.self, Show.self, Pause.self, Resume.self, Cancel.self, Remove.self,
                      Watch.self, Wait.self])
}

/// Options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The session to use (a stable identifier).", valueName: "IDENT"))
    var session: String = ProcessInfo.processInfo.environment["FERRY_SESSION"] ?? "org.ferry.cli"

    @Option(name: .long, help: ArgumentHelp("A D-Bus address to use instead of the session bus.", valueName: "ADDRESS"))
    var address: String?

    /// Connects, turning failure into a clear message and exit status 3.
    func connect() throws -> FerryClient {
        do {
            return try FerryClient(address: address)
        } catch let e as BusError {
            if address == nil && ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"] == nil {
                throw CLIError.unreachable("no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is not set. Run ferry inside a desktop session, or under `dbus-run-session`.")
            }
            throw CLIError.unreachable("cannot connect to the D-Bus session bus: \(e.message)")
        }
    }
}

/// Errors the CLI reports as one line and an exit status.
enum CLIError: Error {
    case unreachable(String)
    case refused(String)
    case transfersFailed

    var exitCode: Int32 {
        switch self {
        case .transfersFailed: return 1
        case .refused: return 2
        case .unreachable: return 3
        }
    }
}

/// Runs a command body, printing errors as `ferry: message` and exiting with
/// the documented status.
func runReportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let e as CLIError {
        switch e {
        case .unreachable(let m), .refused(let m): printError(m)
        case .transfersFailed: break
        }
        throw ExitCode(e.exitCode)
    } catch let e as BusError {
        let mapped = describe(e)
        printError(mapped.message)
        throw ExitCode(mapped.code)
    }
}

func describe(_ e: BusError) -> (message: String, code: Int32) {
    switch e.name {
    case StandardErrors.serviceUnknown, StandardErrors.nameHasNoOwner,
         "org.freedesktop.DBus.Error.Spawn.ServiceNotFound", "org.freedesktop.DBus.Error.Spawn.ExecFailed",
         "org.freedesktop.DBus.Error.Spawn.ChildExited", "org.freedesktop.DBus.Error.Spawn.ChildSignaled":
        return ("the Ferry service (org.ferry.Ferry1) is not running and D-Bus could not start it (\(e.message)). "
                + "Install its activation file with `make install`, or start `ferryd` by hand.", 3)
    case StandardErrors.noReply, StandardErrors.disconnected:
        return ("the Ferry service did not answer: \(e.message)", 3)
    case StandardErrors.unknownObject:
        return ("no such object: \(e.message)", 2)
    default:
        let short = e.name.hasPrefix("org.ferry.Ferry1.Error.") ? String(e.name.dropFirst("org.ferry.Ferry1.Error.".count)) : e.name
        return ("\(e.message) (\(short))", 2)
    }
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data("ferry: \(message)\n".utf8))
}

/// Transfer ids as the user types them ("7" or a full object path).
func parseTransferIDs(_ ids: [String]) throws -> [UInt64] {
    try ids.map { s in
        if let n = UInt64(s) { return n }
        if s.hasPrefix(FerryClient.transferPathPrefix), let n = UInt64(s.dropFirst(FerryClient.transferPathPrefix.count)) { return n }
        throw ValidationError("'\(s)' is not a transfer id (a number, as `ferry ls` shows)")
    }
}

/// The transfer objects for ids, or a clear error naming the missing ones.
func resolveTransfers(_ client: FerryClient, _ ids: [UInt64]) async throws -> [FerryTransfer] {
    let known = Set(try await client.listTransfers().map(\.id))
    let missing = ids.filter { !known.contains($0) }
    guard missing.isEmpty else {
        throw CLIError.refused("no transfer with id \(missing.map(String.init).joined(separator: ", ")) (see `ferry ls`)")
    }
    return ids.map { client.transfer(id: $0) }
}
