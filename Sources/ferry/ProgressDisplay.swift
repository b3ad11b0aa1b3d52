import FerryBusClient
import Foundation

/// Shows followed transfers on its channel: on a terminal, one live line per transfer
/// plus a total, fitted to the width and redrawn on resize; piped, plain lines (a
/// state change, at most one progress line a second per transfer, the first once it
/// has moved data for a second). Each completed
/// transfer's final line ("ID completed PATH") goes to stdout — unless the live display
/// shows it on the same terminal, which then ends with each saved file's path — and
/// failures to stderr; `quiet` keeps only failures.
final class ProgressDisplay: FollowSink, @unchecked Sendable {
    private let lock = NSLock()
    private var infos: [String: TransferInfo] = [:]
    private var order: [String] = []
    private var rates: [String: RateSample] = [:]
    private var lastPlain: [String: Double] = [:]
    private var reportedFinal: Set<String> = []
    private var lastRender = 0.0
    /// Rows the last frame took, to move back over them.
    private var drawnLengths: [Int] = []
    private var drawnColumns = 0
    private let terminal: Terminal?
    private let channel: OutputChannel
    /// Completed transfers' lines go to stdout as they come (not when the live display
    /// shows them on the terminal stdout also goes to).
    private let resultLines: Bool
    private let quiet: Bool
    private var ticker: DispatchSourceTimer?
    private var ended = false
    /// Each session's `retries` setting by path, where known ("retry 2/5").
    var maxRetries: [String: UInt32] = [:]
    /// Transfers whose reason for one connection was said (once each).
    private var saidSingle: Set<String> = []

    struct RateSample {
        var time: Double
        var bytes: Int64
        var rate: Double
    }

    init(quiet: Bool, on channel: OutputChannel) {
        self.quiet = quiet
        self.channel = channel
        terminal = quiet ? nil : Terminal.attached(to: channel)
        resultLines = !quiet && (terminal == nil || (channel == .standardError && !Self.drawnOnStandardOutputsTerminal))
    }

    private func now() -> Double { Date().timeIntervalSince1970 }

    /// Whether a live display on standard error is drawn on the terminal standard output
    /// goes to: then what stdout would say (new ids, final lines) lands inside the
    /// display, which shows it anyway.
    static var drawnOnStandardOutputsTerminal: Bool {
        guard isatty(STDOUT_FILENO) != 0, isatty(STDERR_FILENO) != 0 else { return false }
        var x = stat(), y = stat()
        guard fstat(STDOUT_FILENO, &x) == 0, fstat(STDERR_FILENO, &y) == 0 else { return true }
        return x.st_rdev == y.st_rdev
    }

    // MARK: FollowSink

    func start(_ initial: [TransferInfo]) {
        lock.withLock {
            for i in initial {
                if infos[i.path] == nil { order.append(i.path) }
                infos[i.path] = i
                if i.rate > 0 { rates[i.path] = RateSample(time: now(), bytes: i.bytesTransferred, rate: Double(i.rate)) }
            }
            if let terminal {
                terminal.onResize { [weak self] in self?.lock.withLock { self?.draw() } }
                let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "ferry.progress"))
                timer.schedule(deadline: .now() + 0.5, repeating: 0.5)
                timer.setEventHandler { [weak self] in self?.lock.withLock { if self?.ended == false { self?.draw() } } }
                timer.resume()
                ticker = timer
                draw()
            } else if !quiet {
                // One write for what may be thousands of lines.
                var lines: [String] = []
                for i in initial {
                    if i.isFinal { reportFinal(i) } else { lines.append(stateLine(i)) }
                }
                Output.lines(lines, to: channel)
                for i in initial { noteSingleConnection(i) }
            } else {
                for i in initial where i.isFinal { reportFinal(i) }
                for i in initial { retryNote(i) }
            }
        }
    }

    func apply(_ change: Change) {
        lock.withLock {
            switch change {
            case .added(let i):
                order.append(i.path)
                infos[i.path] = i
                if terminal == nil { plainStateLine(i) }
            case .state(let i, _):
                infos[i.path] = i
                if terminal == nil && !i.isFinal { plainStateLine(i) }
                if i.state != "running" { rates[i.path] = nil }
                noteSingleConnection(i)
            case .progress(let i, _), .resumed(let i, _):
                infos[i.path] = i
                sample(i)
                if terminal == nil { plainProgressLine(i) }
                noteSingleConnection(i)
            case .finished(let i, _):
                infos[i.path] = i
            case .completed(let i, _):
                infos[i.path] = i
                noteSingleConnection(i)
                rates[i.path] = nil
                if terminal == nil || (resultLines && i.state == "completed") { reportFinal(i) }
            case .removed(let i):
                infos[i.path] = nil
                order.removeAll { $0 == i.path }
            }
            if terminal != nil {
                let t = now()
                if t - lastRender >= 0.2 || { if case .progress = change { return false }; return true }() { draw() }
            }
        }
    }

    func end(_ final: [TransferInfo]) {
        lock.withLock {
            ended = true
            ticker?.cancel()
            for i in final { infos[i.path] = i }
            if terminal != nil { draw() }
            for i in final where i.isFinal || terminal == nil { reportFinal(i) }
        }
    }

    // MARK: Rates

    private func sample(_ i: TransferInfo) {
        let t = now()
        guard var s = rates[i.path] else {
            rates[i.path] = RateSample(time: t, bytes: i.bytesTransferred, rate: 0)
            return
        }
        guard t - s.time >= 0.2 else { return }
        let instant = max(0, Double(i.bytesTransferred - s.bytes) / (t - s.time))
        s.rate = s.rate == 0 ? instant : 0.6 * s.rate + 0.4 * instant
        s.time = t
        s.bytes = i.bytesTransferred
        rates[i.path] = s
    }

    private func rate(_ i: TransferInfo) -> Double { i.state == "running" ? rates[i.path]?.rate ?? 0 : 0 }

    // MARK: Plain lines (piped)

    private func plainStateLine(_ i: TransferInfo) {
        guard !quiet else { return retryNote(i) }
        if i.isFinal { return reportFinal(i) }
        Output.line(stateLine(i), to: channel)
    }

    /// "7 running big.iso"; waiting to try again, with when and why:
    /// "7 waiting(retry) big.iso: retry 2/5 in 4.0 s — Connection refused".
    private func stateLine(_ i: TransferInfo) -> String {
        let line = "\(i.id) \(Format.stateText(i)) \(Format.shown(Format.name(i)))"
        guard let retry = Format.retryText(i, maxRetries: maxRetries[i.session]) else { return line }
        return line + ": " + retry
    }

    /// With -q (which keeps only errors), a retry is not an error, but a transfer that
    /// keeps failing is worth a word: from its second retry on, each is said on stderr,
    /// so that a quiet `get --wait` against a server that is down does not sit silent
    /// through minutes of backoff.
    private func retryNote(_ i: TransferInfo) {
        guard Format.isRetrying(i), i.attempts >= 2 else { return }
        Output.line(stateLine(i), to: .standardError)
    }

    /// Once per transfer, where it asked for several connections and runs on one:
    /// why ("7 one connection: the server does not accept ranges"), on stderr (a
    /// remark, not a result), unless quiet.
    private func noteSingleConnection(_ i: TransferInfo) {
        guard !quiet, let note = Format.singleConnectionNote(i), saidSingle.insert(i.path).inserted else { return }
        let line = "\(i.id) \(Format.shown(Format.name(i))): \(note)"
        if let terminal {
            // A line of its own above the live frame, which is drawn again below it.
            // Fitted as the frame's lines are: a wrapped line would throw its redraw off.
            let columns = terminal.columns
            Output.write(backOverFrame(columns: columns) + line.fitted(columns - 1) + "\n", to: channel)
            drawnLengths = []
            draw()
        } else {
            Output.line(line, to: .standardError)
        }
    }

    private func plainProgressLine(_ i: TransferInfo) {
        guard !quiet, i.state == "running" else { return }
        let t = now()
        // The first one a second after the transfer's first progress: a file that takes
        // less than that says only its state lines and its final line (a batch of small
        // files is not a "100%" line each), a longer one a line each second.
        guard let last = lastPlain[i.path] else {
            lastPlain[i.path] = t
            return
        }
        guard t - last >= 1 else { return }
        lastPlain[i.path] = t
        var s = "\(i.id) \(Format.percent(i)) \(Format.bytes(i.bytesTransferred))/\(Format.bytes(i.bytesExpected))"
        let r = rate(i)
        if r > 0 { s += " \(Format.rate(r))" }
        Output.line(s, to: channel)
    }

    /// The one final line of a transfer: stdout when it completed, stderr otherwise.
    private func reportFinal(_ i: TransferInfo) {
        guard !reportedFinal.contains(i.path) else { return }
        guard i.isFinal || i.state == "paused" else { return }
        reportedFinal.insert(i.path)
        switch i.state {
        case "completed":
            if resultLines {
                Output.line("\(i.id) completed \(i.destination.isEmpty ? i.url : i.destination)")
            } else if terminal != nil && channel == .standardError && i.kind == "download" && !i.destination.isEmpty {
                // The live display on the terminal stdout shares shows names cut to fit:
                // after its last frame, where each download was saved, in full (the end
                // of `end`, so after the frame).
                Output.line(i.destination)
            }
        case "paused":
            printError("transfer \(i.id) is paused: \(Format.name(i)) (resume it with `ferry resume \(i.id)`)")
        default:
            printError("transfer \(i.id) \(i.state): \(i.url)\(i.errorMessage.isEmpty ? "" : ": \(i.errorMessage)")")
        }
    }

    // MARK: Terminal frame

    /// Redraws the frame in place: back over the rows the last frame took (at the
    /// current width), clear to the end of the screen, draw the new lines.
    private func draw() {
        guard let terminal else { return }
        lastRender = now()
        let columns = terminal.columns
        var out = backOverFrame(columns: columns)
        let lines = frame(columns: columns, rows: terminal.rows).map { $0.fitted(columns - 1) }
        for l in lines { out += l + "\n" }
        drawnLengths = lines.map(\.columns)
        drawnColumns = columns
        Output.write(out, to: channel)
    }

    /// Moves back to the start of the last frame and clears from there.
    private func backOverFrame(columns: Int) -> String {
        var out = "\r"
        if !drawnLengths.isEmpty {
            // A line drawn at an earlier, wider width may now wrap over several rows.
            let rows = drawnLengths.reduce(0) { $0 + max(1, ($1 + columns - 1) / columns) }
            out += "\u{1B}[\(rows)A"
        }
        return out + "\u{1B}[J"
    }

    /// The lines of one frame: the transfers that matter most first (moving, then
    /// waiting, then finished), as many as the screen holds, then the total.
    private func frame(columns: Int, rows: Int) -> [String] {
        let all = order.compactMap { infos[$0] }
        // A terminal that does not say its size (0 rows: some ptys, `script`) is taken
        // as 24 rows; at least one transfer line is shown beside "… and N more".
        let room = max(2, (rows > 0 ? rows : 24) - 2)
        var shown = all
        var hidden = 0
        if all.count > room {
            func rank(_ i: TransferInfo) -> Int {
                switch i.state {
                case "running": return 0
                case "waiting", "queued": return 1
                case "failed": return 2
                default: return 3
                }
            }
            let keep = Set(all.enumerated().sorted { (rank($0.element), $0.offset) < (rank($1.element), $1.offset) }
                .prefix(room - 1).map(\.element.path))
            shown = all.filter { keep.contains($0.path) }
            hidden = all.count - shown.count
        }
        var lines = shown.map { line($0, columns: columns - 1) }
        if hidden > 0 { lines.append("… and \(hidden) more (ferry ls)") }
        if all.count > 1 || lines.isEmpty { lines.append(total(all)) }
        return lines
    }

    private func line(_ i: TransferInfo, columns: Int) -> String {
        let head = "\(i.id) "
        var tail: String
        switch i.state {
        case "running":
            let r = rate(i)
            let eta = i.bytesExpected > 0 && r > 0 ? Double(i.bytesExpected - i.bytesTransferred) / r : .nan
            tail = " \(Format.percent(i)) \(Format.bytes(i.bytesTransferred))/\(Format.bytes(i.bytesExpected)) \(Format.rate(r)) ETA \(Format.duration(eta))"
        case "completed":
            tail = " done \(Format.bytes(max(i.bytesTransferred, i.bytesExpected)))"
        case "failed":
            tail = " failed: \(Format.shown(i.errorMessage))"
        default:
            if let retry = Format.retryText(i, maxRetries: maxRetries[i.session]) {
                tail = " \(retry)"
            } else {
                tail = " \(Format.stateText(i)) \(Format.percent(i))"
            }
        }
        let name = Format.shown(Format.name(i))
        // The name gets what is left after the id and tail, at least 12 columns; the
        // bar only when there is room for it.
        let free = columns - head.columns - tail.columns
        let barWidth = free >= 12 + 12 ? min(20, free - 12 - 3) : 0
        let nameWidth = max(12, free - (barWidth > 0 ? barWidth + 3 : 0))
        let shortName = name.fitted(nameWidth)
        var s = head + shortName + String(repeating: " ", count: max(0, nameWidth - shortName.columns))
        if barWidth > 0 {
            let fraction = i.bytesExpected > 0 ? min(1, Double(i.bytesTransferred) / Double(i.bytesExpected)) : (i.state == "completed" ? 1 : 0)
            let filled = Int(fraction * Double(barWidth))
            s += " [" + String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled) + "]"
        }
        return (s + tail).fitted(columns)
    }

    private func total(_ all: [TransferInfo]) -> String {
        var counts: [String: Int] = [:]
        for i in all { counts[i.state, default: 0] += 1 }
        let parts = ["running", "waiting", "queued", "paused", "completed", "failed", "cancelled"]
            .compactMap { s in counts[s].map { "\($0) \(s)" } }
        let done = all.reduce(Int64(0)) { $0 + max(0, $1.bytesTransferred) }
        let expected = all.allSatisfy { $0.bytesExpected >= 0 } ? all.reduce(Int64(0)) { $0 + $1.bytesExpected } : -1
        let r = all.reduce(0.0) { $0 + rate($1) }
        var s = "Total: " + (parts.isEmpty ? "nothing to follow" : parts.joined(separator: ", "))
        if !all.isEmpty { s += "  " + Format.bytes(done) + (expected >= 0 ? "/" + Format.bytes(expected) : "") }
        if r > 0 { s += "  \(Format.rate(r))" }
        return s
    }
}
