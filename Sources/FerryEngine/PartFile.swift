import Crypto
import FerryCore
import Foundation

/// A failed file operation on a part file, in words: "No space left on device while
/// writing /home/me/Downloads/x.iso.part".
struct PartFileError: Error, Sendable {
    var code: Int32
    var action: String
    var path: String

    var message: String {
        "\(String(cString: strerror(code))) while \(action) \(path)"
    }
}

/// The open `.part` file of one attempt. Opened by a background file job, then owned
/// by the engine thread; `handOver()` gives the descriptor to a background flush job.
final class PartFile {
    let path: String
    private(set) var fd: Int32
    /// Devices and pipes cannot be truncated or synced; we write to them as they are.
    let isRegular: Bool
    /// Size when opened.
    let initialSize: Int64
    /// A sandboxed application's directory, within which the file's name is reached.
    let area: SandboxArea?

    private init(path: String, fd: Int32, isRegular: Bool, initialSize: Int64, area: SandboxArea?) {
        self.path = path; self.fd = fd; self.isRegular = isRegular; self.initialSize = initialSize; self.area = area
    }

    /// Opens the part file for writing without truncating it; creates it (mode 0644)
    /// when absent. Never writes through a link: an existing `.part` is opened with
    /// O_NOFOLLOW, and one that is a symbolic link, or a regular file with other links
    /// or of another owner, is unlinked (the name only: a link's target and a hard
    /// link's other names keep their bytes) and the download starts over in a new file
    /// (made so that it never replaces anything: `linkat` or O_EXCL). Devices and pipes
    /// are written as they are, and stay non-blocking (O_NONBLOCK from the open): a
    /// FIFO without a reader, or whose reader takes nothing, fails the attempt instead
    /// of holding up the engine thread; nothing but a plain file is ever moved into
    /// place (the core checks).
    static func open(_ path: String, within area: SandboxArea? = nil) -> Result<PartFile, PartFileError> {
        // Everything below is done relative to the folder: for a sandboxed application's
        // download, the folder as opened, once its real path shows it is inside the app's
        // directory, so a folder on the way swapped for a link sends nothing elsewhere.
        guard let (folder, name) = SandboxArea.place(of: path, within: area) else {
            return .failure(PartFileError(code: EACCES, action: "opening (its folder is no longer inside the application's directory)", path: path))
        }
        defer { SandboxArea.release(folder) }
        let existing = name.withCString { openat(folder, $0, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        let openError = existing < 0 ? errno : 0
        if existing >= 0 {
            var st = stat()
            guard fstat(existing, &st) == 0 else {
                let code = errno
                Glibc.close(existing)
                return .failure(PartFileError(code: code, action: "opening", path: path))
            }
            if (st.st_mode & S_IFMT) != S_IFREG {
                return .success(PartFile(path: path, fd: existing, isRegular: false, initialSize: 0, area: area))
            }
            DescriptorMode.setNonBlocking(existing, false)
            if st.st_uid == geteuid() && st.st_nlink == 1 {
                return .success(PartFile(path: path, fd: existing, isRegular: true, initialSize: Int64(st.st_size), area: area))
            }
            Glibc.close(existing) // another file's second name, or not ours: take the name back
        } else if openError != ENOENT && openError != ELOOP {
            return .failure(PartFileError(code: openError, action: "opening", path: path))
        }
        if openError != ENOENT {
            // A symbolic link or a foreign file at our name: unlink never follows a link.
            if name.withCString({ unlinkat(folder, $0, 0) }) != 0 && errno != ENOENT {
                return .failure(PartFileError(code: errno, action: "replacing (it is a link or not ours)", path: path))
            }
        }
        return (createUnnamedThenLink(path, folder: folder, name: name) ?? createNamed(path, folder: folder, name: name)).map {
            // Ours: a restart that finds it forgotten may remove it (`PartFileMark`).
            PartFileMark.set(fd: $0)
            return PartFile(path: path, fd: $0, isRegular: true, initialSize: 0, area: area)
        }
    }

    /// Creates the new, empty file at `name` in `folder` (`O_CREAT | O_EXCL`: never in
    /// place of something there).
    static func createNamed(_ path: String, folder: Int32 = AT_FDCWD, name: String? = nil) -> Result<Int32, PartFileError> {
        let fd = (name ?? path).withCString { openat(folder, $0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, partFileMode) }
        return fd < 0 ? .failure(PartFileError(code: errno, action: "creating", path: path)) : .success(fd)
    }

    /// Creates the new, empty file without a name (`O_TMPFILE`), then gives it `name`
    /// in `folder` (`linkat`, which like `O_EXCL` never replaces what is there). The
    /// same file as an `O_CREAT | O_EXCL` open, but the file system finds the new inode
    /// without holding the directory's lock: on ext4 without a journal, which skips
    /// inodes deleted in the last minute, that search can take a millisecond, and every
    /// other create, rename and unlink in the folder (the core moving finished downloads
    /// into place) would wait for it. Nil where the file system or kernel cannot (the
    /// caller then creates the file the usual way).
    static func createUnnamedThenLink(_ path: String, folder: Int32 = AT_FDCWD, name: String? = nil) -> Result<Int32, PartFileError>? {
        let fd: Int32
        if folder == AT_FDCWD {
            guard let slash = path.lastIndex(of: "/") else { return nil }
            let directory = slash == path.startIndex ? "/" : String(path[..<slash])
            fd = directory.withCString { Glibc.open($0, oTmpFile | O_WRONLY | O_CLOEXEC, partFileMode) }
        } else {
            fd = openat(folder, ".", oTmpFile | O_WRONLY | O_CLOEXEC, partFileMode)
        }
        guard fd >= 0 else {
            let code = errno
            // The file system cannot (EOPNOTSUPP), the kernel does not know O_TMPFILE
            // (EISDIR before 3.11) or refuses it (EINVAL): make the file the usual way.
            if code == EOPNOTSUPP || code == EISDIR || code == EINVAL { return nil }
            return .failure(PartFileError(code: code, action: "creating", path: path))
        }
        // Kernels before 6.0 did not apply the umask to O_TMPFILE files on some file
        // systems; a private umask (077) must still give a private file.
        if let mask = processUmask { _ = fchmod(fd, partFileMode & ~mask) }
        let code = link(unnamed: fd, in: folder, as: name ?? path)
        guard code == 0 else {
            Glibc.close(fd)
            if code == ENOENT && !canNameUnnamedFiles { return nil } // no /proc
            return .failure(PartFileError(code: code, action: "creating", path: path))
        }
        return .success(fd)
    }

    /// Gives the file open at `fd`, made without a name (`O_TMPFILE`), the name `name` in
    /// `folder` (`linkat` through `/proc/self/fd`, which never replaces what is there).
    /// - Returns: 0, or the error number.
    static func link(unnamed fd: Int32, in folder: Int32, as name: String) -> Int32 {
        "/proc/self/fd/\(fd)".withCString { source in
            name.withCString { linkat(AT_FDCWD, source, folder, $0, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno }
        }
    }

    /// Whether a file made without a name can be given one (`link(unnamed:)` needs
    /// `/proc`).
    static let canNameUnnamedFiles = access("/proc/self/fd", F_OK) == 0

    static let partFileMode: mode_t = 0o644

    /// The process's umask, from `/proc/self/status` (reading it with `umask(2)` would
    /// change it for a moment under other threads); nil where not shown.
    static let processUmask: mode_t? = {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }) else { return nil }
        return mode_t(ResponseHead.trimmingOWS(line.dropFirst("Umask:".count)), radix: 8)
    }()

    /// `O_TMPFILE` (`__O_TMPFILE | O_DIRECTORY` in <bits/fcntl-linux.h>; Swift's Glibc
    /// module does not import it).
    static let oTmpFile: Int32 = 0o20_000_000 | O_DIRECTORY

    /// Cuts the file to `length` bytes and puts the write position there.
    func truncate(to length: Int64) -> PartFileError? {
        if isRegular {
            while ftruncate(fd, off_t(length)) != 0 {
                if errno != EINTR { return PartFileError(code: errno, action: "truncating", path: path) }
            }
            if lseek(fd, off_t(length), SEEK_SET) < 0 {
                return PartFileError(code: errno, action: "seeking in", path: path)
            }
        }
        return nil
    }

    /// Removes the file when it is still empty and still the one at `path` (a failed
    /// attempt that wrote nothing leaves no 0-byte `.part` behind); a sandboxed
    /// application's relative to its folder as opened and checked, like the open.
    func removeIfEmpty() {
        guard fd >= 0, isRegular else { return } // never a device or pipe someone else made
        guard let (folder, name) = SandboxArea.place(of: path, within: area) else { return }
        defer { SandboxArea.release(folder) }
        var mine = stat(), there = stat()
        guard fstat(fd, &mine) == 0, (mine.st_mode & S_IFMT) == S_IFREG, mine.st_size == 0,
              fstatat(folder, name, &there, AT_SYMLINK_NOFOLLOW) == 0,
              mine.st_dev == there.st_dev, mine.st_ino == there.st_ino else { return }
        _ = unlinkat(folder, name, 0)
    }

    /// Closes without syncing (stopped or failed attempts).
    func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    /// Gives the descriptor away (to `flushAndClose`); this object no longer owns it.
    func handOver() -> Int32 {
        let taken = fd
        fd = -1
        return taken
    }

    deinit { close() }

    /// fdatasync then close; runs on a background queue so that a slow disk never
    /// stalls the engine thread (and with it every other transfer).
    static func flushAndClose(fd: Int32, path: String, isRegular: Bool) -> PartFileError? {
        var failure: PartFileError?
        if isRegular {
            while fdatasync(fd) != 0 {
                if errno == EINTR { continue }
                failure = PartFileError(code: errno, action: "flushing", path: path)
                break
            }
        }
        if Glibc.close(fd) != 0 && failure == nil && errno != EINTR {
            failure = PartFileError(code: errno, action: "closing", path: path)
        }
        return failure
    }

    /// SHA-256 of the first `length` bytes of the file open for reading as `reader`
    /// (`openForReading`, closed here). Runs on a background queue (a large prefix
    /// takes seconds to hash).
    static func hashPrefix(_ reader: Int32, path: String, length: Int64) -> Result<SHA256, PartFileError> {
        hashRange(reader, path: path, from: 0, to: length, continuing: SHA256())
    }
}

extension PartFile {
    /// A device or pipe is there: ranges cannot be written at their offsets.
    static func existsAsOtherThanRegularFile(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) != S_IFREG
    }
}
