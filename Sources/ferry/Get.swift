import ArgumentParser
import DBus
import FerryBusClient
import FerryInterface
import Foundation

private typealias DownloadKey = FerryInterface.DownloadOption
private typealias GroupKey = FerryInterface.GroupOption
private typealias SessionKey = FerryInterface.SessionOption

struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Queue downloads; prints the new transfer ids, one per line.",
        discussion: """
            -o FILE saves to exactly FILE, replacing a file there (as curl and wget do): the download \
            is written beside it as FILE.part and renamed over it only once complete, so FILE never \
            holds a partial download. -d DIR (or -o DIR/) picks a free name, `name (1).ext`, when \
            one is taken, unless --overwrite.

            --retries, --timeout, --proxy and --no-notify apply to this run's transfers only, and so \
            does -x N above the session's max-connections-per-host (6 unless set): such a \
            run uses a session of its own beside the CLI's, IDENT.settings-HASH (one per set of \
            settings), which `ls --session`, `events --session` and the --all commands count as the \
            CLI's session.

            --metalink URL downloads the file a Metalink 4 document (.meta4, RFC 5854) describes: \
            ferryd fetches the document when the transfer starts and takes the file from its \
            URLs, best first, checked against its size and SHA-256; a document it cannot use \
            fails the transfer (InvalidMetalink). It takes no other URL: a .meta4 URL given as a \
            plain URL is downloaded as a file.

            In a terminal, `get` without --wait says what it queued (ID STATE: URL -> PATH) and \
            `get --wait` ends with the saved path of each download; piped or with --json, it prints \
            the ids (a line each) as before.
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(help: "http:// or https:// URLs.")
    var urls: [String] = []

    /// The URLs as given (`urls` holds runs of them joined: `PackedPositionals`).
    var givenURLs: [String] { PackedPositionals.unpack(urls) }

    @Option(name: [.short, .customLong("output")], help: ArgumentHelp("Save to exactly this file (one URL only), replacing it if it exists.", valueName: "FILE"),
            completion: .file())
    var output: String?

    @Option(name: [.short, .customLong("directory")], help: ArgumentHelp("Save into this directory (made if missing).", valueName: "DIR"),
            completion: .directory)
    var directory: String?

    @Option(name: [.short, .customLong("input-file")], help: ArgumentHelp("Read URLs from FILE (- for stdin), one a line, each optionally followed by its SHA-256.", valueName: "FILE"),
            completion: .file())
    var inputFile: String?

    @Option(name: [.customShort("H"), .customLong("header")], help: ArgumentHelp("An extra request header, 'Name: value'.", valueName: "HEADER"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("Expected SHA-256 (hex) of the one URL; a mismatch fails the transfer.", valueName: "HEX"))
    var sha256: String?

    @Option(help: ArgumentHelp("Download the file this Metalink 4 document (.meta4) describes, from its URLs.", valueName: "URL"))
    var metalink: String?

    @Option(help: ArgumentHelp("Expected SHA-256s by file name, in sha256sum's format.", valueName: "SHA256SUMS"), completion: .file())
    var sha256File: String?

    @Option(name: .customLong("mirror"), help: ArgumentHelp("Another URL of the same file (repeatable, at most 16): ranges are spread over the URL and its mirrors, and a failing one is dropped.", valueName: "URL"))
    var mirrors: [String] = []

    @Option(help: ArgumentHelp("The piece length and each piece's SHA-256, LEN:HEX,HEX,... or LEN:@FILE (one hex a line): each piece is checked as it completes and a bad one fetched again.", valueName: "LEN:HEX,..."))
    var pieces: String?

    @Option(help: ArgumentHelp("At most this many bytes/s for each transfer (500k, 2M).", valueName: "RATE"))
    var limitRate: String?

    @Option(name: [.customShort("x"), .customLong("connections")], help: ArgumentHelp("Parallel connections per file (1-16).", valueName: "N"))
    var connections: UInt32?

    @Option(help: ArgumentHelp("low, normal or high.", valueName: "PRIORITY"), completion: .list(["low", "normal", "high"]))
    var priority: String?

    @Option(help: ArgumentHelp("Not before this time: +30s, +10m, +2h, HH:MM, an ISO 8601 date-time, or @UNIX-SECONDS.", valueName: "TIME"))
    var startAfter: String?

    @Option(help: ArgumentHelp("A description shown in listings and notifications.", valueName: "TEXT"))
    var description: String?

    @Option(help: ArgumentHelp("Retries after transient errors (for this run's transfers).", valueName: "N"))
    var retries: UInt32?

    @Option(help: ArgumentHelp("Seconds without data before a try fails (for this run's transfers).", valueName: "SECONDS"))
    var timeout: Double?

    @Option(help: ArgumentHelp("A proxy URL, http:// or socks5h:// (for this run's transfers).", valueName: "URL"))
    var proxy: String?

    @Flag(help: "Leave these transfers out of the desktop notification.")
    var noNotify = false

    @Flag(help: "With -d DIR: replace an existing file instead of picking a new name (-o FILE always replaces).")
    var overwrite = false

    @Flag(help: "Create the transfers paused.")
    var paused = false

    @Flag(help: "Discretionary: wait while the network is metered, on battery or in power-saver mode, and for the schedule's discretionary-only windows.")
    var discretionary = false

    @Flag(help: "Fetch each URL on its own, even when a download of the same URL and headers is already queued or running (by default it is fetched once and copied).")
    var noDedupe = false

    @Flag(help: "Wait until the downloads end, showing progress on standard error; exit 1 if any failed.")
    var wait = false

    @Flag(help: "Print JSON (an array of transfers) instead of ids.")
    var json = false

    func validate() throws {
        let given = givenURLs // split once (PackedPositionals)
        if output != nil && directory != nil { throw ValidationError("use either -o FILE or -d DIR, not both") }
        // An unset variable in a script (`-o "$OUT"`) must not mean "here".
        if output?.isEmpty == true { throw ValidationError("-o takes a file name, not an empty one") }
        if output == "-" {
            // curl's and wget's `-o -` is standard output; the service saves files, and
            // a file named "-" is not what that asks for. `./-` names one.
            throw ValidationError("-o - (standard output) is not supported: the service saves the download to a file; give a file name (./- for a file named '-')")
        }
        if directory?.isEmpty == true { throw ValidationError("-d takes a folder, not an empty name") }
        if sha256File?.isEmpty == true { throw ValidationError("--sha256-file takes a file name, not an empty one") }
        if inputFile?.isEmpty == true { throw ValidationError("-i takes a file name (or - for standard input), not an empty one") }
        if metalink?.isEmpty == true { throw ValidationError("--metalink takes the URL of a .meta4 document, not an empty one") }
        if metalink != nil && (!given.isEmpty || inputFile != nil || sha256File != nil) {
            throw ValidationError("--metalink takes no other URL: the document names the file's URLs")
        }
        if given.isEmpty && inputFile == nil && metalink == nil { throw ValidationError("name at least one URL, or -i FILE") }
        if output != nil && (given.count > 1 || inputFile != nil) { throw ValidationError("-o FILE takes a single URL; use -d DIR for several") }
        if sha256 != nil && metalink == nil && (given.count != 1 || inputFile != nil) { throw ValidationError("--sha256 takes a single URL; use -i FILE or --sha256-file for several") }
        if let sha256, !Checksums.isHex(sha256) { throw ValidationError("--sha256 takes 64 hexadecimal digits") }
        if (!mirrors.isEmpty || pieces != nil) && (given.count != 1 || inputFile != nil) {
            throw ValidationError("--mirror and --pieces take a single URL (they describe one file)")
        }
        if mirrors.count > 16 { throw ValidationError("--mirror is given \(mirrors.count) times; at most 16 mirrors are allowed") }
        if let pieces, PieceArgument.split(pieces) == nil {
            throw ValidationError("--pieces takes LEN:HEX,HEX,... or LEN:@FILE (a piece length in bytes, then each piece's SHA-256)")
        }
        try HeaderArguments.validate(headers)
        if let limitRate, ByteRate.parse(limitRate) == nil { throw ValidationError("--limit-rate: '\(limitRate)' is not a rate: bytes per second from 1 up, with k, M or G (500k, 2M)") }
        if let connections, !(1...16).contains(connections) { throw ValidationError("--connections takes 1 to 16") }
        if let priority, Self.priorities[priority.lowercased()] == nil { throw ValidationError("--priority takes low, normal or high") }
        if let startAfter, StartTime.parse(startAfter) == nil { throw ValidationError("--start-after: '\(startAfter)' is not a time: +10m, 23:30, 2026-01-31T23:30:00Z or @1769902200 (before the year 10000)") }
        if let timeout, !(timeout > 0) { throw ValidationError("--timeout takes a number of seconds above 0") }
    }

    static let priorities: [String: Int32] = ["low": -1, "normal": 0, "high": 1, "-1": -1, "0": 0, "1": 1]
    /// The most items ferryd takes in one DownloadGroup call.
    static let maxGroupItems = 100_000

    /// One URL's Download options: the run's, with its own checksum.
    func downloadOptions(for entry: Checksums.Entry, _ options: [String: DBusValue]) -> [String: DBusValue] {
        var o = options
        if let sum = entry.sha256 { o["sha256"] = .string(sum.lowercased()) }
        return o
    }

    /// Options every Download of this command gets.
    func downloadOptions() throws -> [String: DBusValue] {
        var options: [String: DBusValue] = [:]
        if !headers.isEmpty { options[DownloadKey.headers.name] = .stringDict(HeaderArguments.dictionary(headers)) }
        if overwrite { options[DownloadKey.overwrite.name] = .boolean(true) }
        if discretionary { options[DownloadKey.discretionary.name] = .boolean(true) }
        if noDedupe { options[DownloadKey.dedupe.name] = .boolean(false) }
        if let limitRate { options[DownloadKey.speedLimit.name] = .uint64(ByteRate.parse(limitRate)!) }
        if let connections { options[DownloadKey.connections.name] = .uint32(connections) }
        if !mirrors.isEmpty { options[DownloadKey.mirrors.name] = .stringArray(mirrors) }
        if let pieces, let (length, list) = PieceArgument.split(pieces) {
            options[DownloadKey.pieces.name] = .structure([.uint64(length), .stringArray(try PieceArgument.digests(list))])
        }
        if let priority { options[DownloadKey.priority.name] = .int32(Self.priorities[priority.lowercased()]!) }
        if let startAfter { options[DownloadKey.startAfter.name] = .uint64(StartTime.parse(startAfter)!) }
        if let description { options[DownloadKey.description.name] = .string(description) }
        if let metalink { options[DownloadKey.metalink.name] = .string(metalink) }
        if paused { options[DownloadKey.start.name] = .boolean(false) }
        return options
    }

    /// Session settings given on the command line.
    func sessionConfiguration() -> [String: DBusValue] {
        var c: [String: DBusValue] = [:]
        if let retries { c[SessionKey.retries.name] = .uint32(retries) }
        if let timeout { c[SessionKey.requestTimeout.name] = .double(timeout) }
        if let proxy { c[SessionKey.proxy.name] = .string(proxy) }
        if noNotify { c[SessionKey.notify.name] = .boolean(false) }
        return c
    }

    /// Where the files go: a file (`-o`), a directory made if missing (`-d`), or the
    /// session's; `exactFile` when it is the file `-o` named, which is replaced as curl
    /// and wget replace it (the daemon's `overwrite`: the download is renamed over it
    /// from its `.part` only once complete).
    func destination() throws -> (path: String, exactFile: Bool)? {
        if let output {
            let path = absolutePath(output)
            var isDir: ObjCBool = false
            if output.hasSuffix("/") || (FileManager.default.fileExists(atPath: path, isDirectory: &isDir) && isDir.boolValue) {
                return (try makeDirectory(path), false)
            }
            return (path, true)
        }
        if let directory { return (try makeDirectory(absolutePath(directory)), false) }
        return nil
    }

    /// The session this run's transfers go to: the user's, or with per-run session
    /// settings one of their own beside it (`SettingsSession`), which takes over the
    /// user's session's other settings (where to save, for one).
    ///
    /// `-x N` above the session's `max-connections-per-host` (6 by default) raises it for
    /// this run, as `-x` does for aria2c: the run gets the N connections it asked for.
    func openRunSession(_ client: BusClient) async throws -> BusSession {
        var settings = sessionConfiguration()
        guard !settings.isEmpty || (connections ?? 1) > 1 else { return try await client.openSession(global.session) }
        let base = try await client.sessionInfos().session(identifier: global.session)
        let perHost = base?.configuration[SessionKey.maxConnectionsPerHost.name]?.uint32 ?? SettingsSession.defaultConnectionsPerHost
        if let connections, connections > perHost { settings[SessionKey.maxConnectionsPerHost.name] = .uint32(connections) }
        guard !settings.isEmpty else { return try await client.openSession(global.session) }
        var configuration: [String: DBusValue] = [:]
        if let base {
            for key in SettingsSession.inherited { if let v = base.configuration[key] { configuration[key] = v } }
        }
        configuration.merge(settings) { _, new in new }
        return try await client.openSession(SettingsSession.identifier(base: global.session, settings: settings),
                                            configuration: configuration)
    }

    func run() async throws {
        try await runReportingErrors {
            var entries = givenURLs.map { Checksums.Entry(url: $0, sha256: sha256) }
            // The document's URL is the transfer's URL too (`Url` shows where it came from).
            if let metalink { entries = [Checksums.Entry(url: metalink, sha256: sha256)] }
            if let inputFile { entries += try Checksums.readList(inputFile) }
            if let sha256File { try Checksums.apply(sumsFile: sha256File, to: &entries, output: output) }
            guard !entries.isEmpty else { throw CLIError.usage("no URLs in \(inputFile ?? "the input")") }
            let destination = try destination()
            var options = try downloadOptions()
            if let destination {
                options[DownloadKey.destination.name] = .string(destination.path)
                if destination.exactFile { options[DownloadKey.overwrite.name] = .boolean(true) }
            }

            let client = try global.connect()
            let session = try await openRunSession(client)
            // Subscribed before the transfers exist, so no event of theirs is missed.
            let monitor = wait ? try await TransferMonitor.start(client) : nil
            defer { monitor?.stop() }

            var created: [String] = []
            var refused = false
            // Several URLs go in one DownloadGroup call (v1.2): one reply, one store
            // transaction, one group. Refused (a bad URL among them, an older ferryd, a
            // list past a group's limits), nothing was made: each URL then goes in its own
            // Download, as before, so the good ones are queued and each bad one is named.
            if entries.count > 1, entries.count <= Self.maxGroupItems,
               let group = try? await client.bus.call(FerryInterface.SessionMethod.downloadGroup, on: session.path, [
                   .array(element: "(sa{sv})", entries.map { .structure([.string($0.url), .vardict(downloadOptions(for: $0, options))]) }),
                   .vardict(description.map { [GroupKey.description.name: .string($0)] } ?? [:]),
               ]).first?.string {
                let members = try await client.bus.call(destination: BusClient.busName, path: group, interface: StandardNames.properties,
                                                        method: "Get", arguments: [.string(FerryInterface.groupInterface),
                                                                                   .string(FerryInterface.GroupProperty.transfers.name)])
                created = members.first?.arrayElements?.compactMap(\.string) ?? []
            } else {
                // Every Download sent before any reply is read (in a window of 100): they
                // are all queued within moments, and a batch ends only once nothing has
                // been queued or running for its settle time (1 s), so one `get` is one
                // batch and one AllFinished.
                let calls = try entries.map { e -> BusMessage in
                    try BusClient.methodCall(FerryInterface.SessionMethod.download, on: session.path,
                                             [.string(e.url), .vardict(downloadOptions(for: e, options))])
                }
                for (e, r) in zip(entries, await client.pipeline(calls)) {
                    switch r {
                    case .success(let v): if let p = v.first?.string { created.append(p) }
                    case .failure(let err):
                        printError("\(e.url): \(describe(err).message)")
                        refused = true
                    }
                }
            }
            let ids = created.map(BusClient.transferID)
            if let destination, destination.exactFile, let path = created.first {
                // `overwrite` replaces a file, never the name another live transfer is
                // saving to: that one keeps it, and this download gets a free name.
                let v = try? await client.bus.call(destination: BusClient.busName, path: path, interface: StandardNames.properties,
                                                   method: "Get", arguments: [.string(BusClient.transferInterface),
                                                                              .string(FerryInterface.TransferProperty.destination.name)])
                if let chosen = v?.first?.string, !chosen.isEmpty, chosen != destination.path {
                    printError("another transfer is saving to \(destination.path); this one saves to \(chosen)")
                }
            }
            if json && !wait {
                let objects = try await client.listing()
                JSONOutput.print(try pick(ids, from: objects).map { TransferJSON($0, sessions: sessionNames(objects)) })
            } else if !json && !global.quiet && !wait && isatty(STDOUT_FILENO) != 0 && !ids.isEmpty {
                // A person reading a terminal is told what was queued and where it goes;
                // a script (stdout not a terminal) still reads bare ids.
                let objects = try? await client.listing()
                let byID = Dictionary((objects?.transfers ?? []).map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
                Output.lines(ids.map { id in
                    guard let i = byID[id] else { return String(id) }
                    return "\(id) \(Format.stateText(i)): \(i.url)" + (i.destination.isEmpty ? "" : " -> \(i.destination)")
                })
            } else if !json && !global.quiet && (!wait || !ProgressDisplay.drawnOnStandardOutputsTerminal) {
                Output.lines(ids.map { String($0) })
            }
            if wait, let monitor, !created.isEmpty {
                // Each transfer is followed from its InterfacesAdded, which the monitor
                // (subscribed before the first Download) holds with all its properties.
                let follower = Follower(options: Follower.Options())
                let sink = ProgressDisplay(quiet: global.quiet || json, on: .standardError)
                if let retries = try? await client.bus.call(
                    destination: BusClient.busName, path: session.path, interface: StandardNames.properties, method: "Get",
                    arguments: [.string(BusClient.sessionInterface), .string(FerryInterface.SessionProperty.configuration.name)]
                ).first?.vardict?[SessionKey.retries.name]?.uint32 {
                    sink.maxRetries = [session.path: retries]
                }
                var final = try await InterruptNote.whileWaiting(for: ids) {
                    try await follower.run([], created: created, monitor: monitor, sink: sink)
                }
                if json {
                    let after = try await client.listing()
                    final = (try? pick(ids, from: after)) ?? final
                    JSONOutput.print(final.map { TransferJSON($0, sessions: sessionNames(after)) })
                }
                await acknowledgeShown(session, client: client, shown: Set(final.filter(\.isFinal).map(\.path)), listed: nil)
                if refused { throw CLIError.refused("") }
                if final.contains(where: { $0.state != "completed" }) { throw CLIError.transfersFailed }
            }
            if refused { throw CLIError.refused("") }
        }
    }
}
