import Foundation

/// What makes a file ferryd writes, and a name it creates, survive a power cut: the
/// file's bytes are synced before it takes its name (`rename(2)`), and the folder is
/// synced after, since a new or changed name lives in the folder, not in the file.
/// Every state file ferryd writes itself (the resume-data key, the cookie jars) goes
/// through `write` or `install`; a finished download's move syncs its folder with
/// `syncFolder`.
///
/// Errors of the folder sync are ignored: some file systems cannot sync a folder
/// (EINVAL), and the name is there either way; only a power cut can still take it.
public enum DurableFiles {
    /// One step, as a test sees it (`observe`).
    public enum Step: Equatable, Sendable {
        /// The file's bytes were synced (`fsync`).
        case syncFile(String)
        /// `from` was renamed to `to`.
        case rename(from: String, to: String)
        /// The folder was synced (`fsync` of the directory).
        case syncFolder(String)
    }

    // Guarded by `lock`: set by tests, read on whichever thread writes.
    nonisolated(unsafe) private static var observer: ((Step) -> Void)?
    private static let lock = NSLock()

    /// Calls `handler` with every step from now on (nil: stop). For tests that check
    /// the order of syncs, renames and announcements.
    public static func observe(_ handler: ((Step) -> Void)?) {
        lock.withLock { observer = handler }
    }

    static func note(_ step: Step) {
        let handler = lock.withLock { observer }
        handler?(step)
    }

    /// Syncs the folder at `directory`, so that names made, renamed or removed in it
    /// survive a power cut.
    public static func syncFolder(_ directory: String) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        syncFolder(fd: fd, path: directory)
    }

    /// Syncs the folder that holds `path` (a file just created or renamed there).
    public static func syncFolder(containing path: String) {
        syncFolder(FileSystemChecks.directoryName(path))
    }

    /// Creates the folder at `path` and the missing ones above it (`mode`), and syncs
    /// the parent of each one it creates, so that a new folder's name (a new state
    /// folder, with the database in it) survives a power cut. Nothing is synced for a
    /// folder that was there.
    public static func createFolder(_ path: String, mode: mode_t = 0o700) throws {
        var made: [String] = []
        var missing = path
        while !missing.isEmpty, missing != "/", access(missing, F_OK) != 0 {
            made.append(missing)
            missing = FileSystemChecks.directoryName(missing)
        }
        for folder in made.reversed() {
            if mkdir(folder, mode) != 0 && errno != EEXIST {
                throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno),
                              userInfo: [NSLocalizedDescriptionKey: "\(String(cString: strerror(errno))) (\(folder))"])
            }
            syncFolder(containing: folder)
        }
        if made.isEmpty {
            var st = stat()
            guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
                throw NSError(domain: NSPOSIXErrorDomain, code: Int(ENOTDIR),
                              userInfo: [NSLocalizedDescriptionKey: "\(path) is not a folder"])
            }
        }
    }

    /// `syncFolder` for a folder already open (`path`: for the observer only).
    public static func syncFolder(fd: Int32, path: String) {
        while fsync(fd) != 0 && errno == EINTR {}
        note(.syncFolder(path))
    }

    /// Syncs the bytes of the file open at `fd` (`path`: for the observer only).
    /// - Returns: 0, or the error number.
    @discardableResult
    public static func syncFile(fd: Int32, path: String) -> Int32 {
        while fdatasync(fd) != 0 {
            if errno == EINTR { continue }
            // A file system that cannot sync (EINVAL) keeps the bytes it has.
            return errno == EINVAL || errno == EROFS ? 0 : errno
        }
        note(.syncFile(path))
        return 0
    }

    /// Writes `bytes` to `path` so that a power cut leaves either the old file or the
    /// new one there, never a part of either: a temporary file beside it (`PATH.new`,
    /// mode `mode`), synced, renamed over `path`, then the folder synced.
    /// - Throws: `POSIXError` (nothing at `path` changed then).
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws {
        let temporary = path + ".new"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var code: Int32 = 0
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { code = n < 0 ? errno : EIO; break }
            offset += n
        }
        close(fd)
        guard code == 0 else {
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        try install(temporary, at: path)
    }

    /// Puts the written file `temporary` at `path` as `write` does: synced, renamed
    /// over `path`, the folder synced. The temporary file is removed on failure.
    /// - Throws: `POSIXError`.
    public static func install(_ temporary: String, at path: String) throws {
        var code: Int32 = 0
        let fd = open(temporary, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        if fd < 0 {
            code = errno
        } else {
            while fsync(fd) != 0 {
                if errno == EINTR { continue }
                code = errno
                break
            }
            close(fd)
        }
        if code == 0 {
            note(.syncFile(temporary))
            if rename(temporary, path) != 0 { code = errno }
        }
        guard code == 0 else {
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        note(.rename(from: temporary, to: path))
        syncFolder(FileSystemChecks.directoryName(path))
    }
}
