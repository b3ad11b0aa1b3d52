import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The terminal standard output goes to: its size (TIOCGWINSZ), kept current
/// on SIGWINCH.
final class Terminal: @unchecked Sendable {
    private let lock = NSLock()
    private var size: (columns: Int, rows: Int)
    private var resizeSource: DispatchSourceSignal?
    private let queue = DispatchQueue(label: "ferry.terminal")

    /// nil when standard output is not a terminal.
    static func standardOutput() -> Terminal? {
        isatty(STDOUT_FILENO) != 0 ? Terminal() : nil
    }

    private init() {
        size = Terminal.query() ?? (80, 24)
    }

    /// (columns, rows), as the kernel knows them; nil if it does not.
    static func query() -> (columns: Int, rows: Int)? {
        var ws = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &ws) == 0, ws.ws_col > 0 else { return nil }
        return (Int(ws.ws_col), Int(max(ws.ws_row, 2)))
    }

    var columns: Int { lock.withLock { size.columns } }
    var rows: Int { lock.withLock { size.rows } }

    /// Calls `handler` (on a private queue) after the terminal was resized.
    func onResize(_ handler: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: queue)
        source.setEventHandler { [weak self] in
            guard let self, let s = Terminal.query() else { return }
            self.lock.withLock { self.size = s }
            handler()
        }
        source.resume()
        resizeSource = source
    }

    deinit { resizeSource?.cancel() }
}

extension String {
    /// Cut to at most `width` characters, marking a cut with "…".
    func fitted(_ width: Int) -> String {
        guard width > 0 else { return "" }
        guard count > width else { return self }
        return String(prefix(max(0, width - 1))) + "…"
    }
}
