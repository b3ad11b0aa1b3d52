import FerryClient
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
        if !i.destination.isEmpty { return (i.destination as NSString).lastPathComponent }
        return i.url
    }

    static func percent(_ i: TransferInfo) -> String {
        guard i.bytesExpected > 0 else { return i.state == "completed" ? "100%" : "  ?" }
        return "\(min(100, i.bytesTransferred * 100 / i.bytesExpected))%"
    }

    static let tableHeader = pad("ID", 6) + pad("STATE", 11) + pad("DONE", 6) + pad("SIZE", 12) + "NAME"

    static func tableRow(_ i: TransferInfo) -> String {
        var state = i.state
        if state == "waiting" && !i.waitingReason.isEmpty { state += "(\(i.waitingReason))" }
        let size = i.bytesExpected >= 0 ? bytes(i.bytesExpected) : bytes(i.bytesTransferred)
        var row = pad(String(i.id), 6) + pad(state, 11) + pad(percent(i), 6) + pad(size, 12) + name(i)
        if i.state == "failed" && !i.errorMessage.isEmpty { row += "  — \(i.errorMessage)" }
        return row
    }

    static func details(_ i: TransferInfo) -> String {
        func time(_ t: UInt64) -> String {
            t == 0 ? "-" : ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(t) / 1_000_000))
        }
        var lines = [
            "Transfer \(i.id) (\(i.kind))",
            "  URL:          \(i.url)",
            "  State:        \(i.state)\(i.waitingReason.isEmpty ? "" : " (\(i.waitingReason))")",
            "  Destination:  \(i.destination.isEmpty ? "-" : i.destination)",
            "  Progress:     \(bytes(i.bytesTransferred)) of \(bytes(i.bytesExpected)) (\(percent(i)))",
        ]
        if i.rate > 0 { lines.append("  Rate:         \(rate(Double(i.rate)))") }
        if !i.description.isEmpty { lines.append("  Description:  \(i.description)") }
        if !i.errorName.isEmpty { lines.append("  Error:        \(i.errorMessage) (\(i.errorName))") }
        if i.httpStatus != 0 { lines.append("  HTTP status:  \(i.httpStatus)") }
        lines.append("  Attempts:     \(i.attempts)")
        lines.append("  Resumable:    \(i.resumable ? "yes" : "no")")
        if !i.sha256.isEmpty { lines.append("  SHA-256:      \(i.sha256)") }
        lines.append("  Created:      \(time(i.created))")
        lines.append("  Started:      \(time(i.started))")
        lines.append("  Completed:    \(time(i.completed))")
        return lines.joined(separator: "\n")
    }

    static func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s + " " : s + String(repeating: " ", count: width - s.count)
    }
}

/// `--json` output: snake_case keys, numbers as numbers.
enum JSONOutput {
    static func transfer(_ i: TransferInfo) -> [String: Any] {
        [
            "id": i.id, "path": i.path, "kind": i.kind, "url": i.url, "description": i.description,
            "destination": i.destination, "state": i.state, "waiting_reason": i.waitingReason,
            "bytes_transferred": i.bytesTransferred, "bytes_expected": i.bytesExpected, "rate": i.rate,
            "expected_end": i.expectedEnd, "error_name": i.errorName, "error_message": i.errorMessage,
            "http_status": i.httpStatus, "attempts": i.attempts, "resumable": i.resumable, "sha256": i.sha256,
            "created": i.created, "started": i.started, "completed": i.completed, "priority": i.priority,
            "speed_limit": i.speedLimit,
        ]
    }

    static func print(_ value: Any) {
        guard let data = try? JSONSerialization.data(withJSONObject: value, options: [.prettyPrinted, .sortedKeys]) else { return }
        FileHandle.standardOutput.write(data)
        FileHandle.standardOutput.write(Data("\n".utf8))
    }
}
