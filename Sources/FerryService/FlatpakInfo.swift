import Foundation

/// The app id of a Flatpak process, from the `.flatpak-info` file Flatpak puts at
/// the root of every sandbox (`[Application] name=…`), read as the process sees it
/// through `/proc/PID/root`. Read defensively: the sandboxed app chooses nothing there
/// (the file is a read-only bind mount), but a symlink, a FIFO or a huge file is
/// refused rather than followed, waited on or read whole.
enum FlatpakInfo {
    enum Finding: Equatable {
        /// No `.flatpak-info` at the process's root: not in a Flatpak sandbox.
        case unconfined
        case app(String)
        /// There is one, but it cannot be read or holds no valid app id; or the
        /// process is gone. The caller is treated as refused, never as unconfined.
        case unreadable(String)
    }

    static let maximumSize = 64 * 1024

    static func finding(forProcess pid: UInt32, proc: String = "/proc") -> Finding {
        let root = open("\(proc)/\(pid)/root", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { return .unreadable("cannot look into process \(pid): \(String(cString: strerror(errno)))") }
        defer { close(root) }
        let fd = openat(root, ".flatpak-info", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        if fd < 0 {
            return errno == ENOENT ? .unconfined : .unreadable("its .flatpak-info cannot be opened: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_size <= maximumSize else {
            return .unreadable("its .flatpak-info is not a plain file of at most \(maximumSize) bytes")
        }
        var bytes = [UInt8](repeating: 0, count: maximumSize + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            count += n
        }
        guard count <= maximumSize else { return .unreadable("its .flatpak-info is larger than \(maximumSize) bytes") }
        guard let name = applicationName(in: String(decoding: bytes[0..<count], as: UTF8.self)) else {
            return .unreadable("its .flatpak-info names no valid application id")
        }
        return .app(name)
    }

    /// `name=` in the `[Application]` group of a key file, when it is a valid app id.
    static func applicationName(in text: String) -> String? {
        var group = ""
        for rawLine in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                group = String(line.dropFirst().dropLast())
                continue
            }
            guard group == "Application", let eq = line.firstIndex(of: "=") else { continue }
            guard line[..<eq].trimmingCharacters(in: .whitespaces) == "name" else { continue }
            let value = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
            return isValidAppID(value) ? value : nil
        }
        return nil
    }

    /// A D-Bus-name-like application id: 2+ dot-separated elements of
    /// `[A-Za-z0-9_-]`, none starting with a digit, 255 bytes at most.
    static func isValidAppID(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 255 else { return false }
        let elements = id.split(separator: ".", omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return false }
        return elements.allSatisfy { element in
            guard let first = element.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
            return element.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-") }
        }
    }
}
