import DBus
import FerryClient
import Foundation

/// Follows transfers until they end: live bars with rate and ETA on a terminal,
/// plain lines when the output is piped.
final class ProgressDisplay: @unchecked Sendable {
    // Only touched from the event callback, which the monitor calls serially.
    private var infos: [String: TransferInfo] = [:]
    private var order: [String] = []
    private var samples: [String: (time: Double, bytes: Int64, rate: Double)] = [:]
    private var lastRender = 0.0
    private var linesDrawn = 0
    private var lastPlain: [String: Double] = [:]
    private let tty: Bool
    private let quiet: Bool
    private let lock = NSLock()

    init(_ infos: [TransferInfo], quiet: Bool) {
        for i in infos {
            self.infos[i.path] = i
            order.append(i.path)
        }
        tty = isatty(1) != 0
        self.quiet = quiet
    }

    static func follow(_ transfers: [FerryTransfer], client: FerryClient, quiet: Bool) async throws -> [TransferInfo] {
        var initial: [TransferInfo] = []
        for t in transfers { initial.append(try await t.info()) }
        let display = ProgressDisplay(initial, quiet: quiet)
        display.render(force: true)
        let final = try await TransferMonitor.waitForAll(transfers, client: client) { event in
            display.handle(event)
        }
        display.finish(final)
        return final
    }

    private func now() -> Double { Date().timeIntervalSince1970 }

    func handle(_ event: TransferEvent) {
        lock.lock()
        defer { lock.unlock() }
        switch event {
        case .progress(let path, _, let total, let expected):
            guard var i = infos[path] else { return }
            let t = now()
            if let s = samples[path], t > s.time {
                let instant = Double(total - s.bytes) / (t - s.time)
                let smoothed = s.rate == 0 ? instant : 0.7 * s.rate + 0.3 * instant
                samples[path] = (t, total, smoothed)
            } else if samples[path] == nil {
                samples[path] = (t, total, 0)
            }
            i.bytesTransferred = total
            i.bytesExpected = expected
            infos[path] = i
            render(force: false)
        case .propertiesChanged(let path, let changed):
            guard var i = infos[path] else { return }
            if let s = changed["State"]?.string { i.state = s }
            if let d = changed["Destination"]?.string { i.destination = d }
            if let e = changed["BytesExpected"]?.int64 { i.bytesExpected = e }
            if let r = changed["WaitingReason"]?.string { i.waitingReason = r }
            if let err = changed["Error"]?.structFields, err.count == 2 {
                i.errorName = err[0].string ?? ""
                i.errorMessage = err[1].string ?? ""
            }
            let stateChanged = infos[path]?.state != i.state
            infos[path] = i
            if stateChanged && !tty && !quiet && !i.isFinal { print("\(i.id) \(i.state) \(Format.name(i))") }
            render(force: stateChanged)
        default:
            break
        }
    }

    private func line(_ i: TransferInfo) -> String {
        let width = 24
        let fraction = i.bytesExpected > 0 ? min(1, Double(i.bytesTransferred) / Double(i.bytesExpected)) : (i.state == "completed" ? 1 : 0)
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let rate = samples[i.path]?.rate ?? 0
        var tail = "\(Format.bytes(i.bytesTransferred))/\(Format.bytes(i.bytesExpected))"
        switch i.state {
        case "running":
            let eta = i.bytesExpected > 0 && rate > 0 ? Double(i.bytesExpected - i.bytesTransferred) / rate : .nan
            tail += "  \(Format.rate(rate))  ETA \(Format.duration(eta))"
        case "failed":
            tail += "  failed: \(i.errorMessage)"
        default:
            tail += "  \(i.state)\(i.waitingReason.isEmpty ? "" : " (\(i.waitingReason))")"
        }
        let name = Format.name(i)
        let shortName = name.count > 28 ? String(name.prefix(27)) + "…" : name
        return "\(Format.pad(shortName, 29))[\(bar)] \(Format.pad(Format.percent(i), 5))\(tail)"
    }

    /// Redraws at most 5 times a second, unless forced.
    func render(force: Bool) {
        guard !quiet else { return }
        let t = now()
        if !force && t - lastRender < 0.2 { return }
        lastRender = t
        if tty {
            var out = linesDrawn > 0 ? "\u{1B}[\(linesDrawn)A" : ""
            for p in order {
                if let i = infos[p] { out += "\r\u{1B}[2K" + line(i) + "\n" }
            }
            linesDrawn = order.count
            FileHandle.standardOutput.write(Data(out.utf8))
        } else {
            // Piped: a plain progress line per transfer at most once a second.
            for p in order {
                guard let i = infos[p], i.state == "running", t - (lastPlain[p] ?? 0) >= 1 else { continue }
                lastPlain[p] = t
                let percent = Format.percent(i).trimmingCharacters(in: .whitespaces)
                print("\(i.id) \(percent) \(Format.bytes(i.bytesTransferred))/\(Format.bytes(i.bytesExpected))")
            }
        }
    }

    func finish(_ final: [TransferInfo]) {
        lock.lock()
        defer { lock.unlock() }
        for i in final { infos[i.path] = i }
        guard !quiet else { return }
        if tty {
            render(force: true)
        } else {
            for i in final {
                var s = "\(i.id) \(i.state) \(i.destination.isEmpty ? i.url : i.destination)"
                if !i.errorMessage.isEmpty { s += ": \(i.errorMessage)" }
                print(s)
            }
        }
    }
}
