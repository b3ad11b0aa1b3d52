import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Ctrl-C while `get --wait`, `put --wait` or `wait` waits: the transfers go on in
/// the service, which someone used to curl (whose download ends with it) may not
/// expect. Says so on standard error, with the ids, then ends as Ctrl-C ends any
/// program: killed by SIGINT, so that a shell script's loop stops too.
///
/// The note is written from the signal handler, so it is made beforehand and
/// written with write(2) alone (async-signal-safe).
enum InterruptNote {
    /// Runs `body` with the note armed for `ids`, then disarms it.
    static func whileWaiting<T>(for ids: [UInt64], _ body: () async throws -> T) async rethrows -> T {
        arm(message(ids: ids, onTerminal: isatty(STDERR_FILENO) == 1))
        defer { disarm() }
        return try await body()
    }

    /// The note: the first ten ids, and how many in all beyond that. On a terminal it
    /// starts on a line of its own (the terminal's "^C" leaves the cursor mid-line).
    static func message(ids: [UInt64], onTerminal: Bool) -> String {
        var list = ids.prefix(10).map(String.init).joined(separator: ", ")
        if ids.count > 10 { list += ", … (\(ids.count) in all)" }
        let named = ids.isEmpty ? "" : (ids.count == 1 ? " Transfer \(list)." : " Transfers \(list).")
        return (onTerminal ? "\n" : "") + "ferry: stopped waiting; what has not finished goes on in the Ferry service "
            + "(`ferry ls` shows it, `ferry cancel ID` stops a transfer).\(named)\n"
    }

    /// Whether the note is armed: not when SIGINT was ignored (a background job of a
    /// script): Ctrl-C is not for it, and stays ignored.
    nonisolated(unsafe) private static var armed = false

    private static func arm(_ message: String) {
        let before = signal(SIGINT, SIG_IGN)
        guard unsafeBitCast(before, to: Int.self) != unsafeBitCast(SIG_IGN, to: Int.self) else { return }
        let bytes = Array(message.utf8)
        let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: bytes.count)
        _ = buffer.initialize(from: bytes)
        // Set before the handler can run; the old one (of an earlier wait) stays
        // allocated: a handler may be reading it (one small note per wait).
        note = UnsafeBufferPointer(buffer)
        signal(SIGINT, onInterrupt)
        armed = true
    }

    private static func disarm() {
        guard armed else { return }
        armed = false
        signal(SIGINT, SIG_DFL)
    }
}

/// The note the handler writes (set before the handler is installed).
nonisolated(unsafe) private var note: UnsafeBufferPointer<UInt8>?

private let onInterrupt: @convention(c) (Int32) -> Void = { signo in
    if let note, let base = note.baseAddress {
        var written = 0
        while written < note.count {
            let n = write(STDERR_FILENO, base + written, note.count - written)
            if n <= 0 { break }
            written += n
        }
    }
    signal(signo, SIG_DFL)
    raise(signo)
}
