import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The terminal standard output or standard error goes to: its size (TIOCGWINSZ),
/// kept current on SIGWINCH.
final class Terminal: @unchecked Sendable {
    private let lock = NSLock()
    private let fd: Int32
    private var size: (columns: Int, rows: Int)
    private var resizeSource: DispatchSourceSignal?
    private let queue = DispatchQueue(label: "ferry.terminal")

    /// nil when `channel` is not a terminal.
    static func attached(to channel: OutputChannel) -> Terminal? {
        isatty(channel.fd) != 0 ? Terminal(fd: channel.fd) : nil
    }

    private init(fd: Int32) {
        self.fd = fd
        size = Terminal.query(fd) ?? (80, 24)
    }

    /// (columns, rows), as the kernel knows them; nil if it does not.
    static func query(_ fd: Int32) -> (columns: Int, rows: Int)? {
        var ws = winsize()
        guard ioctl(fd, UInt(TIOCGWINSZ), &ws) == 0, ws.ws_col > 0 else { return nil }
        return (Int(ws.ws_col), Int(max(ws.ws_row, 2)))
    }

    var columns: Int { lock.withLock { size.columns } }
    var rows: Int { lock.withLock { size.rows } }

    /// Calls `handler` (on a private queue) after the terminal was resized.
    func onResize(_ handler: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: queue)
        source.setEventHandler { [weak self] in
            guard let self, let s = Terminal.query(self.fd) else { return }
            self.lock.withLock { self.size = s }
            handler()
        }
        source.resume()
        resizeSource = source
    }

    deinit { resizeSource?.cancel() }
}

extension Character {
    /// The terminal columns it takes: 2 for East Asian wide and fullwidth characters and
    /// emoji, 0 for a combining mark or a format character on its own, else 1.
    var columns: Int {
        guard let first = unicodeScalars.first else { return 0 }
        let v = first.value
        if v < 0x300 && unicodeScalars.count == 1 { return 1 } // ASCII and Latin: the common case, at once
        switch first.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        if first.properties.isEmojiPresentation { return 2 }
        // Emoji presentation asked for (U+FE0F: ❤️, 1️⃣), or joined and modified emoji.
        if unicodeScalars.contains(where: { $0.value == 0xFE0F || $0.value == 0x200D || (0x1F3FB...0x1F3FF).contains($0.value) }) {
            return 2
        }
        return Self.wideRanges.contains { $0.contains(v) } ? 2 : 1
    }

    /// East Asian wide and fullwidth blocks, and the emoji blocks drawn wide.
    private static let wideRanges: [ClosedRange<UInt32>] = [
        0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF,
        0xA000...0xA4CF, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60,
        0xFFE0...0xFFE6, 0x1F300...0x1F64F, 0x1F900...0x1F9FF, 0x20000...0x3FFFD,
    ]
}

extension String {
    /// The terminal columns it takes (`Character.columns`).
    var columns: Int { reduce(0) { $0 + $1.columns } }

    /// Cut to at most `width` terminal columns, marking a cut with "…".
    func fitted(_ width: Int) -> String {
        guard width > 0 else { return "" }
        guard columns > width else { return self }
        var out = ""
        var used = 0
        for c in self {
            let w = c.columns
            if used + w > width - 1 { break }
            out.append(c)
            used += w
        }
        return out + "…"
    }
}
