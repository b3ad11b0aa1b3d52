import ArgumentParser
import FerryInterface
import DBus
import FerryBusClient
import Foundation

/// The entry point: lets the options every command takes come before the
/// subcommand too (`ferry --session foo get URL`), as docs/cli.md writes them,
/// and `ferry -T FILE URL` stand for `ferry put FILE URL` (curl's spelling).
@main
enum Main {
    static func main() async {
        // The work runs on a concurrency thread, whose glibc arena would grow its heap
        // by mprotect(2) a page range at a time (a tenth of `ferry ls`'s time with
        // 10,000 transfers); the main arena grows in larger steps.
        _ = mallopt(-8 /* M_ARENA_MAX */, 1)
        if let refusal = CommandLineRewrite.nonUTF8Argument() {
            FileHandle.standardError.write(Data("ferry: \(refusal)\n".utf8))
            exit(64)
        }
        let args = CommandLineRewrite.rewrite(Array(CommandLine.arguments.dropFirst()))
        await Ferry.main(PackedPositionals.pack(args))
    }
}

struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Download and upload files in the background with the Ferry service (org.ferry.Ferry1).",
        discussion: """
            Transfers belong to the service, not to this command: they go on after it exits.
            Results go to standard output, errors and failures to standard error.
            Exit status: 0 success; 1 a transfer failed or was cancelled; 2 the service refused \
            the request; 3 the service could not be reached; 64 a usage error.
            """,
        version: FerryInterface.releaseVersion,
        subcommands: [Get.self, Put.self, Post.self, List.self, Show.self, Pause.self, Resume.self, Cancel.self,
                      Remove.self, Watch.self, Wait.self, Events.self, Sessions.self, Config.self])
}

/// Moves the global options written before the subcommand behind it.
enum CommandLineRewrite {
    /// An argument that is not UTF-8 (a file name in another encoding) would reach
    /// Swift with its bad bytes replaced by U+FFFD, and a download would go to a folder
    /// of that other name: D-Bus carries only UTF-8, so such a name cannot be passed on.
    static func nonUTF8Argument() -> String? {
        for i in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[i] else { continue }
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(raw).assumingMemoryBound(to: UInt8.self), count: strlen(raw))
            if String(validating: bytes, as: UTF8.self) == nil {
                return "argument \(i) ('\(String(decoding: bytes, as: UTF8.self))') is not UTF-8; the service takes names in UTF-8 only (rename the file or folder)"
            }
        }
        return nil
    }

    static let valued: Set<String> = ["--session", "--address"]
    static let flags: Set<String> = ["-q", "--quiet"]

    static func rewrite(_ args: [String]) -> [String] {
        var globals: [String] = []
        var i = 0
        while i < args.count {
            let a = args[i]
            if valued.contains(a), i + 1 < args.count {
                globals += [a, args[i + 1]]
                i += 2
            } else if flags.contains(a) || valued.contains(where: { a.hasPrefix($0 + "=") }) {
                globals.append(a)
                i += 1
            } else {
                break
            }
        }
        var rest = Array(args[i...])
        if let first = rest.first, first == "-T" || first == "--upload-file" {
            rest[0] = "put"
        }
        guard !globals.isEmpty, let command = rest.first, !command.hasPrefix("-") else { return globals + rest }
        // After the command and whatever subcommand it has (`config get`, `sessions
        // show`): at the end, or before a `--` that ends the options.
        if let end = rest.firstIndex(of: "--") { return Array(rest[..<end]) + globals + Array(rest[end...]) }
        return rest + globals
    }
}

/// `get`'s URLs handed to swift-argument-parser as a few arguments, not one each.
///
/// The parser copies an array argument's values, and the set of where they came from,
/// each time it adds one (`ParsedValues.update`), so N URLs cost it N² work before the
/// first call is made: the command took 84 ms of CPU with 1,000 URLs and 1.07 s with 5,000
/// (21 and 24 ms joined; `ferry --version` takes 14 ms).
/// A run of arguments that can only be positional is joined into one, its parts
/// separated by NUL (which no argument can hold: each is a C string); `get` splits
/// them again (`unpack`).
///
/// An argument may be an option's value when an option before it could still be waiting
/// for one: `--name` waits for one, `-abc` for up to one per letter (each short option
/// of a cluster takes the next value in turn: `-di DIR FILE`), `--name=value` for none.
/// Every plain argument in between pays one off and is left alone; once nothing can be
/// owed, plain arguments are positional (no option of `get` takes a value that is not
/// right after it, or more than one), and so is everything after `--`.
enum PackedPositionals {
    static let separator = "\u{0}"

    static func pack(_ args: [String]) -> [String] {
        guard args.first == "get" else { return args }
        var out = [args[0]]
        /// Whether the last argument written is certainly positional (one may join it).
        var lastPositional = false
        /// How many of the next plain arguments may be values of options before them.
        var owed = 0
        var afterTerminator = false
        for a in args.dropFirst() {
            var positional = false
            if afterTerminator {
                positional = true
            } else if a == "--" {
                afterTerminator = true
            } else if a.hasPrefix("--") {
                owed = a.contains("=") ? 0 : 1
            } else if a.hasPrefix("-") && a.count > 1 {
                owed = a.count - 1
            } else if owed > 0 {
                owed -= 1
            } else {
                positional = true
            }
            if positional && lastPositional {
                out[out.count - 1] += separator + a
            } else {
                out.append(a)
            }
            lastPositional = positional
        }
        return out
    }

    /// The arguments `pack` joined, one each again.
    static func unpack(_ values: [String]) -> [String] {
        values.flatMap { v in
            v.contains(separator) ? v.components(separatedBy: separator) : [v]
        }
    }
}

/// Options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(name: .customLong("session"),
            help: ArgumentHelp("The session to use (a stable identifier; default $FERRY_SESSION, else org.ferry.cli). `ls` and `events` show only its transfers (with its settings sessions', see `get --help`) when --session names it ($FERRY_SESSION does not filter them).", valueName: "IDENT"))
    var sessionOption: String?

    /// The CLI's session: --session, else $FERRY_SESSION, else org.ferry.cli.
    var session: String { sessionOption ?? ProcessInfo.processInfo.environment["FERRY_SESSION"] ?? "org.ferry.cli" }

    /// Whether the user named the session (--session or $FERRY_SESSION) rather than
    /// leaving the CLI's own.
    var sessionNamed: Bool { sessionOption != nil || ProcessInfo.processInfo.environment["FERRY_SESSION"] != nil }

    /// Whether `identifier` is the CLI's session or one a run with session settings of
    /// its own made beside it (`IDENT.settings-HASH`): `ls --session`, `events --session`,
    /// `--all` and the acknowledging of shown events take both as the user's session.
    func isOwnSession(_ identifier: String) -> Bool {
        identifier == session || SettingsSession.isDerived(identifier, from: session)
    }

    @Option(name: .long, help: ArgumentHelp("A D-Bus address to use instead of the session bus.", valueName: "ADDRESS"))
    var address: String?

    @Flag(name: [.short, .long], help: "Print nothing but errors (and what --json asks for).")
    var quiet = false

    /// Connects, turning failure into a clear message and exit status 3.
    func connect() throws -> BusClient {
        do {
            return try BusClient(address: address)
        } catch let e as BusError {
            if address == nil && ProcessInfo.processInfo.environment["DBUS_SESSION_BUS_ADDRESS"] == nil {
                throw CLIError.unreachable("no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is not set. Run ferry inside a desktop session, or under `dbus-run-session`.")
            }
            throw CLIError.unreachable("cannot connect to the D-Bus session bus: \(e.message)")
        }
    }
}

/// The session a `get` with per-run session settings (--retries, --timeout, --proxy,
/// --no-notify) uses, so that they apply to that run's transfers only: the contract
/// carries these settings per session, not per Download, and changing the user's
/// session would change every later transfer of it. The identifier is the session's
/// plus `.settings-` and 8 hex digits of a hash of the settings (a proxy without its
/// credentials), so runs with the same settings share one such session.
enum SettingsSession {
    static let marker = ".settings-"
    /// Identifiers are at most 255 characters: a long base is cut to leave room.
    static let baseLimit = 255 - marker.count - 8

    static func identifier(base: String, settings: [String: DBusValue]) -> String {
        String(base.prefix(baseLimit)) + marker + hash(settings)
    }

    static func isDerived(_ identifier: String, from base: String) -> Bool {
        let prefix = String(base.prefix(baseLimit)) + marker
        guard identifier.hasPrefix(prefix) else { return false }
        let rest = identifier.dropFirst(prefix.count)
        return rest.count == 8 && rest.allSatisfy { $0.isHexDigit && !$0.isUppercase }
    }

    /// 8 hex digits of FNV-1a over the settings, by key; stable across runs and builds.
    static func hash(_ settings: [String: DBusValue]) -> String {
        let text = settings.keys.sorted().map { key -> String in
            let v = settings[key]!
            var shown: String
            if let s = v.string {
                shown = key == FerryInterface.SessionOption.proxy.name ? withoutCredentials(s) : s
            } else if let n = v.uint32 {
                shown = String(n)
            } else if let d = v.double {
                shown = String(d)
            } else if let b = v.bool {
                shown = b ? "true" : "false"
            } else {
                shown = "\(v)"
            }
            if shown.isEmpty { shown = "-" }
            return key + "=" + shown
        }.joined(separator: "\n")
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in text.utf8 {
            h ^= UInt64(b)
            h = h &* 0x0000_0100_0000_01b3
        }
        return String(format: "%08x", UInt32(truncatingIfNeeded: h ^ (h >> 32)))
    }

    /// A proxy URL without `user:password@`: a session identifier is visible on the bus.
    static func withoutCredentials(_ proxy: String) -> String {
        guard let scheme = proxy.range(of: "://"), let at = proxy.range(of: "@", options: .backwards),
              at.lowerBound > scheme.upperBound else { return proxy }
        return String(proxy[..<scheme.upperBound]) + String(proxy[at.upperBound...])
    }

    /// Keys a settings session takes over from the user's session, so that it differs
    /// only in what the run asked for. Not `headers` and a proxy (the bus shows them
    /// without their secrets), nor `application-id` (the application would be woken for
    /// a session it does not know).
    /// A session's `max-connections-per-host` when it sets none.
    static let defaultConnectionsPerHost: UInt32 = 6

    private typealias S = FerryInterface.SessionOption
    static let inherited = [S.directory, S.persistent, S.maxConnectionsPerHost, S.requestTimeout, S.resourceTimeout,
                            S.allowMetered, S.notify, S.speedLimit, S.retries, S.cookies, S.privateSignals,
                            S.discretionary].map(\.name)
}

/// Errors the CLI reports as one line and an exit status.
enum CLIError: Error {
    case unreachable(String)
    case refused(String)
    case usage(String)
    case transfersFailed

    var exitCode: Int32 {
        switch self {
        case .transfersFailed: return 1
        case .refused: return 2
        case .unreachable: return 3
        case .usage: return 64
        }
    }
}

/// Runs a command body, printing errors as `ferry: message` on stderr and exiting
/// with the documented status.
func runReportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
        Output.flush()
    } catch let e as CLIError {
        Output.flush()
        switch e {
        case .unreachable(let m), .refused(let m), .usage(let m): if !m.isEmpty { printError(m) }
        case .transfersFailed: break
        }
        throw ExitCode(e.exitCode)
    } catch let e as BusError {
        Output.flush()
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
        let short = FerryInterface.ErrorName(fullName: e.name)?.rawValue ?? e.name
        return ("\(e.message) (\(short))", 2)
    }
}

func printError(_ message: String) {
    Output.line("ferry: " + message, to: .standardError)
}

/// Standard output, flushed per line when it is not a terminal too (scripts
/// reading `ferry watch` or `ferry events` through a pipe see lines as they come),
/// or once per burst of events inside `burst` (what came in one read goes out in
/// one write, not one per line).
enum Output {
    private static let bursts = NSLock()
    nonisolated(unsafe) private static var burstDepth = 0

    /// One line (or several joined by newlines) of text, as a terminal may show it.
    static func line(_ s: String) {
        raw(Format.shown(s, keepingNewlines: true))
    }

    /// A line written as it is (JSON, already escaped).
    static func raw(_ s: String) {
        print(s)
        if !inBurst { fflush(nil) }
    }

    /// Runs `body` with lines held in stdout's buffer, then flushes them at once.
    static func burst<T>(_ body: () throws -> T) rethrows -> T {
        bursts.withLock { burstDepth += 1 }
        defer {
            bursts.withLock { burstDepth -= 1 }
            fflush(nil)
        }
        return try body()
    }

    private static var inBurst: Bool { bursts.withLock { burstDepth > 0 } }

    /// Many lines in one write (a listing of thousands must not flush each).
    static func lines(_ ls: [String], to channel: OutputChannel = .standardOutput) {
        guard !ls.isEmpty else { return }
        write(ls.lazy.map { Format.shown($0, keepingNewlines: true) }.joined(separator: "\n") + "\n", to: channel)
    }

    static func write(_ s: String) {
        fflush(nil)  // lines held in a burst go first
        FileHandle.standardOutput.write(Data(s.utf8))
    }

    static func flush() { fflush(nil) }

    /// A line on `channel` (standard error: after what standard output holds).
    static func line(_ s: String, to channel: OutputChannel) {
        guard channel == .standardError else { return line(s) }
        write(Format.shown(s, keepingNewlines: true) + "\n", to: channel)
    }

    static func write(_ s: String, to channel: OutputChannel) {
        guard channel == .standardError else { return write(s) }
        fflush(nil)
        FileHandle.standardError.write(Data(s.utf8))
    }
}

/// Where a display goes: standard output when showing is the command's result
/// (`watch`), standard error when it only accompanies it (`get --wait`, `wait`), as
/// curl's and wget's progress does.
enum OutputChannel: Equatable {
    case standardOutput, standardError

    var fd: Int32 { self == .standardOutput ? STDOUT_FILENO : STDERR_FILENO }
}

/// Transfer ids as the user types them ("7" or a full object path).
func parseTransferIDs(_ ids: [String]) throws -> [UInt64] {
    try ids.map { s in
        if let n = UInt64(s) { return n }
        if s.hasPrefix(BusClient.transferPathPrefix), let n = UInt64(s.dropFirst(BusClient.transferPathPrefix.count)) { return n }
        throw ValidationError("'\(s)' is not a transfer id (a number, as `ferry ls` shows)")
    }
}

/// The transfers with these ids from a snapshot, or a clear error naming the missing ones.
func pick(_ ids: [UInt64], from objects: ManagedObjects) throws -> [TransferInfo] {
    let byID = Dictionary(objects.transfers.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
    let missing = ids.filter { byID[$0] == nil }
    guard missing.isEmpty else {
        throw CLIError.refused("no transfer with id \(missing.map(String.init).joined(separator: ", ")); see `ferry ls` (NoSuchTransfer)")
    }
    return ids.map { byID[$0]! }
}

/// glibc's `mallopt` (malloc.h is not in Swift's Glibc module).
@_silgen_name("mallopt")
private func mallopt(_ parameter: Int32, _ value: Int32) -> Int32
