import Foundation

/// Small questions about the file system, asked where the core decides on paths.
public enum FileSystemChecks {
    /// Makes an absolute path canonical without touching the disk: no `.`/`..`
    /// components, no doubled or trailing slashes.
    static func normalize(_ path: String) -> String {
        if isNormal(path) { return path }
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." { _ = parts.popLast(); continue }
            parts.append(part)
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The last non-empty component of `path` between `/` bytes ("" when it has none):
    /// `path.utf8.split(separator: "/").last`, without making the array of all of them.
    /// (A split on characters differs only where a combining mark follows a `/`.)
    static func lastComponent(_ path: String) -> Substring {
        let bytes = path.utf8
        let slash = UInt8(ascii: "/")
        guard let last = bytes.lastIndex(where: { $0 != slash }) else { return "" }
        let end = bytes.index(after: last)
        let start = bytes[..<end].lastIndex(of: slash).map { bytes.index(after: $0) } ?? bytes.startIndex
        return path[start..<end]
    }

    /// Whether `normalize` would give `path` back as it is: absolute, no empty, `.` or
    /// `..` component, no `/` at the end (but `/` itself). One pass over the bytes.
    static func isNormal(_ path: String) -> Bool {
        let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
        var bytes = path.utf8.makeIterator()
        guard bytes.next() == slash else { return false }
        // The component being read: its length, and whether it is all dots so far.
        var length = 0
        var dots = true
        var any = false
        while let byte = bytes.next() {
            any = true
            if byte == slash {
                if length == 0 || (dots && length <= 2) { return false }
                length = 0
                dots = true
            } else {
                length += 1
                if byte != dot { dots = false }
            }
        }
        return !any || !(length == 0 || (dots && length <= 2))
    }

    /// An absolute, existing, writable directory, else `.invalidDestination` saying which
    /// of the three is wrong.
    static func requireWritableDirectory(_ path: String, role: String) throws {
        guard path.hasPrefix("/") else {
            throw CoreError.invalidDestination("\(role) '\(path)' is a relative path; give an absolute path")
        }
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw CoreError.invalidDestination("\(role) '\(path)' does not exist")
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw CoreError.invalidDestination("\(role) '\(path)' is not a directory")
        }
        guard access(path, W_OK) == 0 else {
            throw CoreError.invalidDestination("\(role) '\(path)' is not writable")
        }
    }

    /// Something is at `path` (a dangling symbolic link counts).
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Size of a regular file, nil when there is none; a symbolic link is not followed
    /// (nil), so no size of a file elsewhere is ever reported. One lstat(2):
    /// FileManager's attribute dictionary also looks up the owner's names.
    static func fileSize(_ path: String) -> Int64? {
        fileSize(path, within: nil)
    }

    /// The same for a sandboxed application's file (`area`): looked up relative to its
    /// folder as opened and checked, so nothing outside the app's directory is measured.
    static func fileSize(_ path: String, within area: SandboxArea?) -> Int64? {
        regularFileInfo(path, within: area).map { Int64($0.st_size) }
    }

    /// Size and last change (µs since the epoch) of a regular file, looked up as
    /// `fileSize(_:within:)` says; nil when there is none.
    static func sizeAndModification(_ path: String, within area: SandboxArea?) -> (size: Int64, modified: UInt64)? {
        regularFileInfo(path, within: area).map {
            (Int64($0.st_size), UInt64(max(0, $0.st_mtim.tv_sec)) * 1_000_000 + UInt64(max(0, $0.st_mtim.tv_nsec)) / 1000)
        }
    }

    /// `lstat` of a regular file (nil for anything else, or nothing), looked up as
    /// `fileSize(_:within:)` says.
    private static func regularFileInfo(_ path: String, within area: SandboxArea?) -> stat? {
        guard let (folder, name) = SandboxArea.place(of: path, within: area) else { return nil }
        defer { SandboxArea.release(folder) }
        var info = stat()
        guard fstatat(folder, name, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return info
    }

    /// A partial file's size, and the blocks it holds past its end (`fallocate` with
    /// KEEP_SIZE reserved them for the rest of a download; a crash leaves them
    /// reserved): space its next bytes take without needing more from the disk. One
    /// `lstat`; nil when there is no regular file.
    static func sizeAndReservedPastEnd(_ path: String, within area: SandboxArea?) -> (size: Int64, reservedPastEnd: Int64)? {
        guard let info = regularFileInfo(path, within: area) else { return nil }
        let size = Int64(info.st_size)
        let block = Int64(max(info.st_blksize, 512))
        let usedByData = (size + block - 1) / block * block
        return (size, max(0, Int64(info.st_blocks) * 512 - usedByData))
    }

    /// Deletes a file if present; true when nothing is left.
    @discardableResult
    static func removeIfPresent(_ path: String, fileManager: FileManager = .default) -> Bool {
        guard exists(path) else { return true }
        return (try? fileManager.removeItem(atPath: path)) != nil
    }

    public static func directoryName(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let dir = String(path[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    public static func baseName(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}

/// The blocking mode of an open descriptor (`O_NONBLOCK`).
public enum DescriptorMode {
    /// Sets or clears `O_NONBLOCK` on `fd` (left alone when it already is so); false,
    /// with `errno` set, when it could not be read or changed.
    @discardableResult
    public static func setNonBlocking(_ fd: Int32, _ nonBlocking: Bool) -> Bool {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else { return false }
        let wanted = nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        return wanted == flags || fcntl(fd, F_SETFL, wanted) == 0
    }
}
