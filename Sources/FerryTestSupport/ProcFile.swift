import Foundation

/// Files under /proc, read to the end. They report a size of 0, and
/// `String(contentsOfFile:)` then reads one page only (4 KiB): a process's `maps`, or
/// `/proc/self/mounts` on a machine with many mounts, would be cut short.
public enum ProcFile {
    /// The whole text of `path`; nil when it cannot be opened.
    public static func contents(_ path: String) -> String? {
        guard let file = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? file.close() }
        guard let data = try? file.readToEnd() else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
