import ArgumentParser
import DBus
import FerryBusClient
import FerryClient
import FerryInterface
import Foundation

private typealias SessionKey = FerryInterface.SessionOption

/// Completion of transfer ids: asks the service (briefly) which ids exist.
let transferIDCompletion = CompletionKind.custom { _ in
    let box = IDBox()
    let done = DispatchSemaphore(value: 0)
    Task {
        if let client = try? BusClient(address: ProcessInfo.processInfo.environment["FERRY_ADDRESS"]),
           let objects = try? await client.listing() {
            box.ids = objects.transfers.map { String($0.id) }
            client.close()
        }
        done.signal()
    }
    _ = done.wait(timeout: .now() + 2)
    return box.ids
}

/// `@unchecked Sendable`: `ids` is guarded by `lock` (the completer may stop waiting
/// while the task still writes).
private final class IDBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    var ids: [String] {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

func sessionNames(_ objects: ManagedObjects) -> [String: String] {
    Dictionary(objects.sessions.map { ($0.path, $0.identifier) }, uniquingKeysWith: { a, _ in a })
}

/// Each session's `retries` setting, by path (for "retry 2/5").
func sessionRetries(_ sessions: [SessionInfo]) -> [String: UInt32] {
    var r: [String: UInt32] = [:]
    for s in sessions { if let n = s.configuration[SessionKey.retries.name]?.uint32 { r[s.path] = n } }
    return r
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List transfers, oldest first.")

    @OptionGroup var global: GlobalOptions

    @Option(help: ArgumentHelp("Only transfers in this state (repeatable, or comma-separated): queued, waiting, running, paused, completed, failed, cancelled.", valueName: "STATE"))
    var state: [String] = []

    @Flag(help: "Print JSON (an array of transfers).")
    var json = false

    static let states = Set(TransferState.allCases.map(\.rawValue))

    var wantedStates: Set<String> { Set(state.flatMap { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }) }

    func validate() throws {
        let bad = wantedStates.subtracting(Self.states)
        if !bad.isEmpty { throw ValidationError("unknown state \(bad.sorted().joined(separator: ", ")); states are \(Self.states.sorted().joined(separator: ", "))") }
    }

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let objects = try await client.listing()
            let names = sessionNames(objects)
            // A session named on the command line that does not exist lists nothing, as a
            // filter would, but says so on stderr: a typo is not "no transfers", and a
            // script that asks before its session is made still reads an empty listing.
            let missingSession = global.sessionOption.flatMap { name in
                objects.sessions.contains { global.isOwnSession($0.identifier) } ? nil : name
            }
            if let name = missingSession, !global.quiet {
                Output.line("No session '\(name)' (`ferry sessions` lists them).", to: .standardError)
            }
            // --session IDENT: that session's transfers, with those of runs that had
            // settings of their own (IDENT.settings-HASH).
            let wantedSessions = Set(objects.sessions.filter { global.sessionOption != nil && global.isOwnSession($0.identifier) }.map(\.path))
            let wanted = wantedStates
            let infos = objects.transfers.filter { i in
                (global.sessionOption == nil || wantedSessions.contains(i.session)) && (wanted.isEmpty || wanted.contains(i.state))
            }
            if json {
                JSONOutput.print(infos.map { TransferJSON($0, sessions: names) })
            } else if infos.isEmpty {
                // A remark, not a result: a script reading the listing gets no lines.
                if !global.quiet && missingSession == nil { Output.line("No transfers.", to: .standardError) }
            } else {
                let many = Set(infos.map(\.session)).count > 1
                Output.write(Format.table(infos, sessions: names, showSession: many).joined(separator: "\n") + "\n")
            }
            await acknowledgeShown(client, session: global.session, sessions: objects.sessions,
                                   shown: Set(infos.filter(\.isFinal).map(\.path)), listed: finalByPath(objects))
        }
    }
}

/// One or more transfer ids, as `show` and `wait` take them.
struct TransferIDs: ParsableArguments {
    @Argument(help: ArgumentHelp("Transfer ids.", valueName: "ID"), completion: transferIDCompletion)
    var ids: [String]

    func validate() throws { _ = try parsed() }
    func parsed() throws -> [UInt64] { try parseTransferIDs(ids) }
}

struct Show: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show transfers in full.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var transfers: TransferIDs

    @Flag(help: "Print JSON (one transfer: an object; several: an array).")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let objects = try await client.listing()
            let infos = try pick(try transfers.parsed(), from: objects)
            let names = sessionNames(objects)
            if json {
                if infos.count == 1 { JSONOutput.print(TransferJSON(infos[0], sessions: names)) } else { JSONOutput.print(infos.map { TransferJSON($0, sessions: names) }) }
            } else {
                let retries = sessionRetries(objects.sessions)
                Output.line(infos.map { Format.details($0, sessionName: names[$0.session] ?? "", maxRetries: retries[$0.session]) }
                    .joined(separator: "\n\n"))
            }
            await acknowledgeShown(client, session: global.session, sessions: objects.sessions,
                                   shown: Set(infos.filter(\.isFinal).map(\.path)), listed: finalByPath(objects))
        }
    }
}

/// `pause`, `resume`, `cancel`, `rm`: ids or --all.
struct TargetOptions: ParsableArguments {
    @Argument(help: ArgumentHelp("Transfer ids.", valueName: "ID"), completion: transferIDCompletion)
    var ids: [String] = []

    @Flag(help: "Every transfer of the session that the command applies to (pause: queued, waiting or running; resume: paused; cancel: not yet ended; rm: ended); prints how many it changed.")
    var all = false

    func validate() throws {
        if ids.isEmpty && !all { throw ValidationError("name transfer ids, or --all") }
        if !ids.isEmpty && all { throw ValidationError("name transfer ids or --all, not both") }
        _ = try parseTransferIDs(ids)
    }
}

/// Applies an action to named transfers, or with --all to those of the session (and
/// of the runs with settings of their own beside it) in the states `allStates`,
/// reporting each refusal on stderr and failing if any was refused. The calls are
/// pipelined. --all works transfer by transfer rather than with the session's
/// PauseAll/ResumeAll/CancelAll, which also resume old failures and overwrite the
/// error of failed transfers, and prints how many transfers it changed ("3 resumed").
func apply(_ global: GlobalOptions, _ target: TargetOptions, method: BusMethod, done verb: String,
           allStates: Set<String>) async throws {
    try await runReportingErrors {
        let client = try global.connect()
        let objects = try await client.listing()
        let transfers: [TransferInfo]
        if target.all {
            // Looked up, not opened: OpenSession would create a session a typo named.
            let paths = Set(objects.sessions.filter { global.isOwnSession($0.identifier) }.map(\.path))
            if paths.isEmpty && global.sessionNamed {
                throw CLIError.refused("no session named \(global.session) (NoSuchSession)")
            }
            transfers = objects.transfers.filter { paths.contains($0.session) && allStates.contains($0.state) }
        } else {
            // Each transfer once: `resume 48 48` resumes 48, and is not refused the second time.
            var seen: Set<UInt64> = []
            transfers = try pick(try parseTransferIDs(target.ids).filter { seen.insert($0).inserted }, from: objects)
        }
        let calls = try transfers.map { try BusClient.methodCall(method, on: $0.path) }
        var refused = false
        var done: Set<String> = []
        for (t, r) in zip(transfers, await client.pipeline(calls)) {
            if case .failure(let e) = r {
                // With --all, one that changed state or went away since the listing is
                // simply not among those to change.
                let name = FerryInterface.ErrorName(fullName: e.name)
                if target.all && (name == .invalidState || name == .noSuchTransfer) { continue }
                let message = describe(e).message
                // The service's message may name the transfer already ("transfer 34 is paused").
                printError(message.hasPrefix("transfer \(t.id) ") ? message : "transfer \(t.id): \(message)")
                refused = true
            } else {
                done.insert(t.path)
            }
        }
        if method == FerryInterface.TransferMethod.remove && !done.isEmpty {
            // What the user removes, they have seen: its events go too (a removed
            // transfer's stay until acknowledged, and a session holds a limited number).
            await acknowledgeShown(client, session: global.session, sessions: objects.sessions, shown: done, listed: nil)
        }
        if target.all && !global.quiet { Output.line("\(done.count) \(verb)") }
        if refused { throw CLIError.refused("some transfers were not changed") }
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Pause transfers, keeping what was downloaded.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        try await apply(global, target, method: FerryInterface.TransferMethod.pause, done: "paused", allStates: ["queued", "waiting", "running"])
    }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Resume paused or failed transfers.",
        discussion: "--all resumes the session's paused transfers; with --failed, its failed ones too.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    @Flag(help: "With --all: resume failed transfers too (retrying them).")
    var failed = false
    func validate() throws {
        if failed && !target.all { throw ValidationError("--failed goes with --all (name failed transfers by id to resume them)") }
    }
    func run() async throws {
        try await apply(global, target, method: FerryInterface.TransferMethod.resume, done: "resumed", allStates: failed ? ["paused", "failed"] : ["paused"])
    }
}

struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Cancel transfers and delete their partial files.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        // Not failed ones with --all: cancelling would replace their error with "cancelled".
        try await apply(global, target, method: FerryInterface.TransferMethod.cancel, done: "cancelled", allStates: ["queued", "waiting", "running", "paused"])
    }
}

struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rm", abstract: "Forget finished transfers (downloaded files stay).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        try await apply(global, target, method: FerryInterface.TransferMethod.remove, done: "removed", allStates: ["completed", "failed", "cancelled"])
    }
}

/// Runs a follower over `initial` with the display `--json`/`-q` ask for, then
/// acknowledges what it showed of the CLI's session.
func follow(_ client: BusClient, _ global: GlobalOptions, monitor: TransferMonitor, initial: [TransferInfo],
            sessions: [SessionInfo], options: Follower.Options, json: Bool) async throws -> [TransferInfo] {
    let follower = Follower(options: options)
    // As JSON lines, live progress is `progress` events (at most one a second per transfer).
    let sink: FollowSink
    if json {
        sink = EventPrinter(json: true, progress: true)
    } else {
        let display = ProgressDisplay(quiet: global.quiet, on: .standardOutput)
        display.maxRetries = sessionRetries(sessions)
        sink = display
    }
    let final = try await follower.run(initial, monitor: monitor, sink: sink)
    await acknowledgeShown(client, session: global.session, sessions: sessions,
                           shown: Set(final.filter(\.isFinal).map(\.path)), listed: nil)
    return final
}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show live progress of transfers, new ones too, until Ctrl-C (or --until-done).",
        discussion: "Without ids: every transfer that is queued, waiting or running, and each new one. Paused transfers only with --paused.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("Transfer ids (default: all).", valueName: "ID"), completion: transferIDCompletion)
    var ids: [String] = []

    @Flag(help: "Follow paused transfers too.")
    var paused = false

    @Flag(help: "Exit once every followed transfer has ended; exit 1 if any failed or was cancelled. Without ids and with nothing queued, waiting or running yet, it waits for transfers to come first.")
    var untilDone = false

    @Flag(help: "With --until-done: exit at once (status 0) when nothing is queued, waiting or running, instead of waiting for transfers to come.")
    var ifRunning = false

    @Flag(help: "Print events as JSON lines instead of a progress display.")
    var json = false

    func validate() throws {
        _ = try parseTransferIDs(ids)
        if ifRunning && !untilDone { throw ValidationError("--if-running goes with --until-done") }
    }

    func run() async throws {
        try await runReportingErrors {
            let (client, monitor, objects) = try await listenToEverySession(global)
            defer { monitor.stop() }
            var options = Follower.Options()
            options.untilDone = untilDone
            options.includePaused = paused
            options.quiet = global.quiet
            let initial: [TransferInfo]
            if ids.isEmpty {
                options.followNew = true
                initial = objects.transfers.filter { !$0.isFinal && (paused || $0.state != "paused") }
            } else {
                initial = try pick(try parseTransferIDs(ids), from: objects)
            }
            if initial.isEmpty && untilDone {
                if ifRunning || !ids.isEmpty {
                    if !global.quiet && !json { Output.line("Nothing is queued or running.") }
                    return
                }
                // Started before the work it is to watch (a monitor first, then `get`):
                // it waits for transfers to come, then until they have all ended.
                options.waitForWork = true
                if !global.quiet && !json { Output.line("Nothing is queued or running; waiting for transfers (Ctrl-C to stop).", to: .standardError) }
            }
            let final = try await follow(client, global, monitor: monitor, initial: initial, sessions: objects.sessions,
                                         options: options, json: json)
            if final.contains(where: { $0.state == "failed" || $0.state == "cancelled" }) { throw CLIError.transfersFailed }
        }
    }
}

struct Wait: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait until transfers end; exit 0 only if all completed.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var transfers: TransferIDs

    @Flag(help: "Print the transfers' final state as JSON (an array).")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let (client, monitor, objects) = try await listenToEverySession(global)
            defer { monitor.stop() }
            let initial = try pick(try transfers.parsed(), from: objects)
            let follower = Follower(options: Follower.Options())
            let sink = ProgressDisplay(quiet: true, on: .standardError)
            let final = try await InterruptNote.whileWaiting(for: initial.filter { !$0.isFinal }.map(\.id)) {
                try await follower.run(initial, monitor: monitor, sink: sink)
            }
            if json { JSONOutput.print(final.map { TransferJSON($0, sessions: sessionNames(objects)) }) }
            await acknowledgeShown(client, session: global.session, sessions: objects.sessions,
                                   shown: Set(final.filter(\.isFinal).map(\.path)), listed: nil)
            if final.contains(where: { $0.state != "completed" }) { throw CLIError.transfersFailed }
        }
    }
}

struct Events: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print what happens to transfers (new ones too), one line per event, until Ctrl-C.")
    @OptionGroup var global: GlobalOptions

    @Flag(help: "Include progress events.")
    var progress = false

    @Flag(help: "Print JSON lines.")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let (client, monitor, objects) = try await listenToEverySession(global)
            defer { monitor.stop() }
            var options = Follower.Options()
            options.followNew = true
            options.includePaused = true
            options.untilDone = false
            options.quiet = global.quiet
            let onlySession = global.sessionOption
            if let onlySession {
                // A session made later is looked up when its first transfer comes.
                let known = sessionNames(objects)
                let lookup = SessionLookup(client: client, known: known)
                let global = global
                options.accept = { global.isOwnSession(lookup.identifier($0.session)) }
            }
            let names = sessionNames(objects)
            let initial = objects.transfers.filter { i in
                !i.isFinal && (onlySession == nil || global.isOwnSession(names[i.session] ?? ""))
            }
            let sink = EventPrinter(json: json, progress: progress)
            _ = try await Follower(options: options).run(initial, monitor: monitor, sink: sink)
        }
    }
}

/// Session identifiers by path, asking the bus for ones made after the snapshot.
final class SessionLookup: @unchecked Sendable {
    private var known: [String: String]
    private let client: BusClient
    init(client: BusClient, known: [String: String]) {
        self.client = client
        self.known = known
    }

    func identifier(_ path: String) -> String {
        if let k = known[path] { return k }
        let box = IDBox()
        let done = DispatchSemaphore(value: 0)
        let client = client
        Task.detached {
            let v = try? await client.bus.call(destination: BusClient.busName, path: path, interface: StandardNames.properties,
                                               method: "Get", arguments: [.string(BusClient.sessionInterface), .string(FerryInterface.SessionProperty.identifier.name)])
            box.ids = [v?.first?.string ?? ""]
            done.signal()
        }
        _ = done.wait(timeout: .now() + 5)
        known[path] = box.ids.first ?? ""
        return known[path]!
    }
}

/// Prints each change as a line: `ID EVENT details`, or JSON lines.
final class EventPrinter: FollowSink {
    let json: Bool
    let progress: Bool
    private var lastProgress: [String: Double] = [:]

    init(json: Bool, progress: Bool = false) {
        self.json = json
        self.progress = progress
    }

    /// The state of each transfer followed from the start, as a first line each.
    func start(_ initial: [TransferInfo]) {
        Output.lines(initial.map { i in
            let e = EventJSON(event: "state", id: i.id, time: JSONOutput.now(), state: i.state,
                              waitingReason: i.waitingReason.isEmpty ? nil : i.waitingReason, url: i.url)
            return json ? JSONOutput.text(e) : "\(i.id) \(Format.stateText(i)) \(i.url)"
        })
    }

    func end(_ final: [TransferInfo]) {}

    func apply(_ change: Change) {
        var e: EventJSON
        var text: String
        switch change {
        case .added(let i):
            e = EventJSON(event: "added", id: i.id, time: JSONOutput.now(), state: i.state, url: i.url, destination: i.destination)
            text = "\(i.state) \(i.url)"
        case .state(let i, _):
            // In text, the final state is said once, by the completion that follows it
            // ("7 completed" came twice).
            if !json && i.isFinal { return }
            e = EventJSON(event: "state", id: i.id, time: JSONOutput.now(), state: i.state,
                          waitingReason: i.waitingReason.isEmpty ? nil : i.waitingReason)
            text = Format.stateText(i) + (Format.retryText(i).map { ": " + $0 } ?? "")
        case .progress(let i, _):
            guard progress else { return }
            let t = Date().timeIntervalSince1970
            guard t - (lastProgress[i.path] ?? 0) >= 1 else { return }
            lastProgress[i.path] = t
            e = EventJSON(event: "progress", id: i.id, time: JSONOutput.now(), bytesTransferred: i.bytesTransferred,
                          bytesExpected: i.bytesExpected)
            text = "\(Format.percent(i)) \(Format.bytes(i.bytesTransferred))/\(Format.bytes(i.bytesExpected))"
        case .resumed(let i, let offset):
            e = EventJSON(event: "resumed", id: i.id, time: JSONOutput.now(), bytesExpected: i.bytesExpected, offset: offset)
            text = "at \(Format.bytes(offset))"
        case .finished(let i, let location):
            e = EventJSON(event: "finished", id: i.id, time: JSONOutput.now(), location: location)
            text = location
        case .completed(let i, let serial):
            e = EventJSON(event: "completed", id: i.id, time: JSONOutput.now(), state: i.state, serial: serial,
                          errorName: i.errorName.isEmpty ? nil : i.errorName,
                          errorMessage: i.errorMessage.isEmpty ? nil : i.errorMessage)
            text = i.errorName.isEmpty ? "completed" : "\(i.state): \(i.errorMessage)"
        case .removed(let i):
            e = EventJSON(event: "removed", id: i.id, time: JSONOutput.now())
            text = ""
        }
        // The event's name leads the line, once: "7 finished PATH", "7 resumed at 1.0 MiB";
        // a state change and a completion say it in their text ("7 running", "7 completed").
        let named = e.event == "state" || e.event == "completed" ? [text] : [e.event, text]
        if json { JSONOutput.line(e) } else { Output.line(([String(e.id)] + named.filter { !$0.isEmpty }).joined(separator: " ")) }
    }
}

/// Connects, starts a monitor that also hears private sessions' signals (a sandboxed
/// app's; refused inside a sandbox, where its own still reach us), then lists what is
/// there: listening first, so that nothing happens unseen between the listing and the
/// signals. The caller stops the monitor.
func listenToEverySession(_ global: GlobalOptions) async throws -> (BusClient, TransferMonitor, ManagedObjects) {
    let client = try global.connect()
    let monitor = try await TransferMonitor.start(client)
    do {
        try? await monitor.watchEverySession()
        return (client, monitor, try await client.listing())
    } catch {
        monitor.stop()
        throw error
    }
}
