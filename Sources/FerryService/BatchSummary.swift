import FerryCore
import Foundation

/// What one batch did, for the desktop notification posted with the manager's
/// `AllFinished`: the files that arrived and the transfers that failed, with their
/// reasons. Cancelled transfers are left out (the user, or a client, asked for that).
public struct BatchSummary: Sendable, Equatable {
    public struct Finished: Sendable, Equatable {
        public var id: TransferID
        public var path: String
        public var bytes: Int64
    }

    public struct Failed: Sendable, Equatable {
        public var id: TransferID
        public var name: String
        public var reason: String
        public var isUpload = false
    }

    /// Downloads that arrived (their files are what the actions show).
    public private(set) var finished: [Finished] = []
    /// Uploads the servers took (`path`: the name of the file sent, for the text only;
    /// nothing of theirs is shown in a folder).
    public private(set) var uploaded: [Finished] = []
    public private(set) var failed: [Failed] = []
    /// The ids in `failed`: a transfer resumed after its failure and ending again
    /// within the batch replaces its entry (one transfer, one outcome).
    private var failedIDs: Set<TransferID> = []

    public init() {}

    public var isEmpty: Bool { finished.isEmpty && uploaded.isEmpty && failed.isEmpty }

    /// Counts a transfer that reached a final state.
    public mutating func add(_ t: TransferSnapshot) {
        guard t.state == .completed || t.state == .failed else { return }
        if failedIDs.remove(t.id) != nil { failed.removeAll { $0.id == t.id } } // rare: only on a failure's rerun
        let isUpload = t.kind == .upload
        switch t.state {
        case .completed:
            let bytes = max(t.bytesTransferred, 0)
            if isUpload {
                uploaded.append(Finished(id: t.id, path: Self.displayName(t), bytes: bytes))
            } else {
                finished.append(Finished(id: t.id, path: t.destination, bytes: bytes))
            }
        default:
            failed.append(Failed(id: t.id, name: Self.displayName(t), reason: Self.reason(t), isUpload: isUpload))
            failedIDs.insert(t.id)
        }
    }

    /// The folders the finished files are in, in order of first appearance. Worked out
    /// from the files each time: read it once where it is needed more than once.
    public var folders: [String] {
        var seen: Set<String> = []
        var ordered: [String] = []
        for f in finished {
            let dir = (f.path as NSString).deletingLastPathComponent
            if seen.insert(dir).inserted { ordered.append(dir) }
        }
        return ordered
    }

    /// The notification for this batch. `home` shortens paths to `~/…`.
    public func notification(batch: UInt64, home: String) -> DesktopNotification {
        let s = finished.count, f = failed.count, u = uploaded.count
        let folders = self.folders // worked out once for the text and the actions below
        let total = finished.reduce(Int64(0)) { $0 + $1.bytes }
        var lines: [String] = []
        // Named for what the batch held: downloads, uploads, or transfers when both.
        let uploads = u + failed.filter(\.isUpload).count, all = s + u + f
        let (one, many, done) = uploads == 0 ? ("Download", "downloads", "downloaded")
            : uploads == all ? ("Upload", "uploads", "uploaded") : ("Transfer", "transfers", "done")
        let summary: String
        if f == 0 {
            summary = s + u == 1 ? "\(one) complete" : "\(s + u) \(many) complete"
        } else if s + u == 0 {
            summary = f == 1 ? "\(one) failed" : "\(f) \(many) failed"
        } else {
            summary = "\(s + u) \(done), \(f) failed"
        }
        let shown = failed.prefix(3)
        for x in shown { lines.append("\(x.name) — \(x.reason)") }
        if f > shown.count { lines.append("and \(f - shown.count) more failed") }
        if u > 0 {
            let sent = ByteCount.describe(uploaded.reduce(Int64(0)) { $0 + $1.bytes })
            lines.append(u == 1 ? "\(uploaded[0].path) (\(sent)) sent"
                                : "\(u) files (\(sent)) sent")
        }
        if s > 0 {
            let place: String
            switch folders.count {
            case 1: place = "in \(Self.abbreviate(folders[0], home: home))"
            default: place = "in \(folders.count) folders"
            }
            if s == 1 {
                let name = (finished[0].path as NSString).lastPathComponent
                lines.append("\(name) (\(ByteCount.describe(total))) \(place)")
            } else {
                lines.append("\(s) files (\(ByteCount.describe(total))) \(place)")
            }
        }
        var actions: [DesktopNotification.Action] = []
        if s > 0 {
            let label = s == 1 ? "Show File" : (folders.count == 1 ? "Open Folder" : "Show Files")
            actions.append(.init(key: "default", label: label))
            actions.append(.init(key: "show", label: label))
        }
        if f > 0 { actions.append(.init(key: "retry", label: "Retry")) }
        return DesktopNotification(batch: batch, summary: summary, body: lines.joined(separator: "\n"),
                                   category: f > 0 ? "transfer.error" : "transfer.complete",
                                   urgency: .normal, actions: actions)
    }

    // MARK: Wording

    /// The file's name, else the last part of its URL, else the URL's host.
    static func displayName(_ t: TransferSnapshot) -> String {
        if !t.destination.isEmpty { return (t.destination as NSString).lastPathComponent }
        if let url = URL(string: t.url) {
            let last = url.lastPathComponent
            if !last.isEmpty, last != "/" { return last }
            if let host = url.host { return host }
        }
        return t.url
    }

    /// "404 Not Found" for HTTP errors (the message without its "HTTP " prefix), else
    /// the error message, shortened.
    static func reason(_ t: TransferSnapshot) -> String {
        var text = t.errorMessage.isEmpty ? t.errorName : t.errorMessage
        if t.errorName.hasSuffix(".Http"), text.hasPrefix("HTTP ") { text = String(text.dropFirst(5)) }
        if text.count > 90 { text = String(text.prefix(89)) + "…" }
        return text
    }

    static func abbreviate(_ path: String, home: String) -> String {
        guard !home.isEmpty, home != "/" else { return path }
        if path == home { return "~" }
        if path.hasPrefix(home + "/") { return "~" + path.dropFirst(home.count) }
        return path
    }
}
