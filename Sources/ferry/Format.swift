import FerryBusClient
import Foundation

/// Human-readable sizes, rates, times and the `ls` table.
enum Format {
    static func bytes(_ n: Int64) -> String {
        if n < 0 { return "?" }
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = Double(n)
        var i = 0
        while v >= 1024 && i < units.count - 1 {
            v /= 1024
            i += 1
        }
        return i == 0 ? "\(n) B" : String(format: "%.1f %@", v, units[i])
    }

    static func rate(_ bytesPerSecond: Double) -> String { bytes(Int64(bytesPerSecond)) + "/s" }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "--:--" }
        let s = Int(seconds.rounded())
        if s >= 3600 { return String(format: "%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60) }
        return String(format: "%d:%02d", s / 60, s % 60)
    }

    static func name(_ i: TransferInfo) -> String {
        // The last component, as NSString's lastPathComponent gives it (trailing slashes
        // ignored), without bridging every row of a ten-thousand-line listing.
        guard !i.destination.isEmpty else { return i.url }
        // By bytes: "/" is one byte in UTF-8 and never part of another character.
        let utf8 = i.destination.utf8
        guard let last = utf8.lastIndex(where: { $0 != UInt8(ascii: "/") }) else { return "/" }
        let end = utf8.index(after: last)
        let start = utf8[..<end].lastIndex(of: UInt8(ascii: "/")).map { utf8.index(after: $0) } ?? utf8.startIndex
        return String(i.destination[start..<end])
    }

    static func percent(_ i: TransferInfo) -> String {
        guard i.bytesExpected > 0 else { return i.state == "completed" ? "100%" : "?" }
        return "\(min(100, i.bytesTransferred * 100 / i.bytesExpected))%"
    }

    /// The state with its waiting reason: `waiting(retry)`.
    static func stateText(_ i: TransferInfo) -> String {
        i.state == "waiting" && !i.waitingReason.isEmpty ? "waiting(\(i.waitingReason))" : i.state
    }

    /// A wait in words: "0.3 s", "4 s", "2:05".
    static func seconds(_ s: Double) -> String {
        let s = max(0, s)
        if s < 10 { return String(format: "%.1f s", s) }
        if s < 60 { return "\(Int(s.rounded(.up))) s" }
        return duration(s)
    }

    /// Whether it is waiting to try again after a failed try.
    static func isRetrying(_ i: TransferInfo) -> Bool { i.state == "waiting" && i.waitingReason == "retry" }

    /// A transfer waiting to try again, in words: "retry 2/5 in 4 s — Connection refused"
    /// (the retry's number is the tries made so far, `Attempts`; of the session's
    /// `retries` when known; the wait from `NextAttempt`; the failure from `Error`, the
    /// last try's). Nil when it is not waiting for a retry.
    static func retryText(_ i: TransferInfo, maxRetries: UInt32? = nil, now: Double = Date().timeIntervalSince1970) -> String? {
        guard isRetrying(i) else { return nil }
        var s = "retry"
        if i.attempts > 0 {
            s += " \(i.attempts)"
            if let maxRetries, i.attempts <= maxRetries { s += "/\(maxRetries)" }
        }
        if i.nextAttempt > 0 { s += " in " + seconds(Double(i.nextAttempt) / 1_000_000 - now) }
        if !i.errorMessage.isEmpty { s += " — " + shown(i.errorMessage) }
        return s
    }

    /// Why a download asked to use several connections runs on one, or on fewer, as a note.
    static func singleConnectionNote(_ i: TransferInfo) -> String? {
        if !i.singleConnectionReason.isEmpty { return "one connection: \(shown(i.singleConnectionReason))" }
        return i.connectionLimitReason.isEmpty ? nil : shown(i.connectionLimitReason)
    }

    /// The `ls` table; columns as wide as their widest cell.
    static func table(_ infos: [TransferInfo], sessions: [String: String], showSession: Bool) -> [String] {
        var rows: [[String]] = [["ID", "STATE", "DONE", "SIZE"] + (showSession ? ["SESSION"] : []) + ["NAME"]]
        for i in infos {
            let size = i.bytesExpected >= 0 ? bytes(i.bytesExpected) : bytes(i.bytesTransferred)
            var name = shown(name(i))
            if i.state == "failed" && !i.errorMessage.isEmpty { name += "  — \(shown(i.errorMessage))" }
            rows.append([String(i.id), stateText(i), percent(i), size] + (showSession ? [shown(sessions[i.session] ?? "?")] : []) + [name])
        }
        let widths = (0..<rows[0].count - 1).map { c in rows.map { $0[c].count }.max() ?? 0 }
        return rows.map { r in
            zip(r.dropLast(), widths).map { pad($0, $1 + 1) }.joined() + r.last!
        }
    }

    static func details(_ i: TransferInfo, sessionName: String = "", maxRetries: UInt32? = nil) -> String {
        func time(_ t: UInt64) -> String {
            t == 0 ? "-" : ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(t) / 1_000_000))
        }
        // One field, one line: text a client or server chose shows a line break as "?",
        // so it cannot make a line of its own ("  State: completed").
        var lines = [
            "Transfer \(i.id) (\(shown(i.kind)))",
            "  URL:          \(shown(i.url))",
            "  State:        \(shown(stateText(i)))" + (retryText(i, maxRetries: maxRetries).map { ": " + $0 } ?? ""),
            "  Session:      \(shown(sessionName.isEmpty ? i.session : sessionName))",
            "  Destination:  \(i.destination.isEmpty ? "-" : shown(i.destination))",
            "  Progress:     \(bytes(i.bytesTransferred)) of \(bytes(i.bytesExpected)) (\(percent(i)))",
        ]
        if i.rate > 0 { lines.append("  Rate:         \(rate(Double(i.rate)))") }
        if !i.description.isEmpty { lines.append("  Description:  \(shown(i.description))") }
        if i.nextAttempt > 0 {
            let wait = Double(i.nextAttempt) / 1_000_000 - Date().timeIntervalSince1970
            lines.append("  Next try:     \(time(i.nextAttempt)) (in \(seconds(wait)))")
        }
        if !i.errorName.isEmpty {
            // `Error` is the last failure: the transfer's own end only once it has ended;
            // while it runs, waits or is paused, how its previous try failed.
            let label = i.state == "failed" || i.state == "cancelled" ? "Error:       " : "Previous try:"
            lines.append("  \(label) \(i.state == "failed" || i.state == "cancelled" ? "" : "failed: ")\(shown(i.errorMessage)) (\(shown(i.errorName)))")
        }
        if let note = singleConnectionNote(i) { lines.append("  Connections:  \(note)") }
        if i.httpStatus != 0 { lines.append("  HTTP status:  \(i.httpStatus)") }
        lines.append("  Attempts:     \(i.attempts)")
        lines.append("  Resumable:    \(i.resumable ? "yes" : "no")")
        if !i.sha256.isEmpty { lines.append("  SHA-256:      \(shown(i.sha256))") }
        for mirror in i.mirrors { lines.append("  Mirror:       \(shown(mirror))") }
        if i.pieceCount > 0 { lines.append("  Pieces:       \(i.pieceCount) of \(i.pieceLength) bytes, each checked") }
        if !i.response.isEmpty { lines.append("  Response:     \(responseText(i.response))") }
        lines.append("  Created:      \(time(i.created))")
        lines.append("  Started:      \(time(i.started))")
        lines.append("  Completed:    \(time(i.completed))")
        return lines.joined(separator: "\n")
    }

    /// An upload's server answer on one line: its start as text (line breaks as spaces,
    /// at most 200 characters, then "…" and its size).
    static func responseText(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
            .replacingOccurrences(of: "\r\n", with: " ").replacingOccurrences(of: "\n", with: " ")
        let cut = text.count > 200 ? String(text.prefix(200)) + "… (\(Self.bytes(Int64(bytes.count))))" : text
        return shown(cut)
    }

    /// Text from the bus or a server (a description, a file name, a URL, a server's
    /// message) as a terminal may show it: control characters (C0 but newline and tab
    /// when kept, DEL, C1) and bidirectional overrides become "?", so no other client
    /// and no server can move the cursor, retitle the window or reorder a line. JSON
    /// output is left as encoded (it escapes C0 itself).
    static func shown(_ s: String, keepingNewlines: Bool = false) -> String {
        func plain(_ b: UInt8) -> Bool { (b >= 0x20 && b < 0x7F) || (keepingNewlines && (b == 0x0A || b == 0x09)) }
        if s.utf8.allSatisfy(plain) { return s }
        var out = String.UnicodeScalarView()
        for u in s.unicodeScalars {
            let v = u.value
            let hidden = (v < 0x20 && !(keepingNewlines && (v == 0x0A || v == 0x09))) || (0x7F...0x9F).contains(v)
                || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v)
            out.append(hidden ? "?" : u)
        }
        return String(out)
    }

    static func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s + " " : s + String(repeating: " ", count: width - s.count)
    }
}
