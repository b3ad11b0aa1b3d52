import Crypto
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

/// The open `.part` file of one attempt. Owned by the engine thread; `handOver()`
/// gives the descriptor to a background flush job.
final class PartFile {
    let path: String
    private(set) var fd: Int32
    /// Devices and pipes cannot be truncated or synced; we write to them as they are.
    let isRegular: Bool
    /// Size when opened.
    let initialSize: Int64

    private init(path: String, fd: Int32, isRegular: Bool, initialSize: Int64) {
        self.path = path; self.fd = fd; self.isRegular = isRegular; self.initialSize = initialSize
    }

    /// Opens the part file for writing without truncating it; creates it (mode 0644)
    /// when absent. Never follows a symbolic link and never writes through one: an
    /// existing `.part` is opened with O_NOFOLLOW and must be a plain regular file of
    /// ours with one link; anything else there (a symlink, a hard link to another
    /// file, a FIFO, someone else's file) is unlinked (the name only, never its target)
    /// and the download starts over in a new file made with O_EXCL.
    static func open(_ path: String) -> Result<PartFile, PartFileError> {
        // O_NONBLOCK: opening a FIFO planted there must not hang the engine thread.
        let existing = path.withCString { Glibc.open($0, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        let openError = existing < 0 ? errno : 0
        if existing >= 0 {
            if case .success(let size) = inspect(existing) {
                return .success(PartFile(path: path, fd: existing, isRegular: true, initialSize: size))
            }
            Glibc.close(existing)
        } else if ![ENOENT, ELOOP, ENXIO, EISDIR, EACCES, ETXTBSY].contains(openError) {
            return .failure(PartFileError(code: openError, action: "opening", path: path))
        }
        if openError != ENOENT {
            // Not a file we may write to: take the name back (unlink never follows a link).
            if path.withCString({ unlink($0) }) != 0 && errno != ENOENT {
                return .failure(PartFileError(code: errno, action: "replacing (it is not a plain file)", path: path))
            }
        }
        let fd = path.withCString { Glibc.open($0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644) }
        if fd < 0 { return .failure(PartFileError(code: errno, action: "creating", path: path)) }
        if case .failure(let error) = inspect(fd) {
            Glibc.close(fd)
            return .failure(PartFileError(code: error.code, action: "creating", path: path))
        }
        return .success(PartFile(path: path, fd: fd, isRegular: true, initialSize: 0))
    }

    private struct Refused: Error { var code: Int32 }

    /// The size of an opened part file that is a plain regular file owned by us with a
    /// single link (so writing cannot reach any other file), and blocking writes again.
    private static func inspect(_ fd: Int32) -> Result<Int64, Refused> {
        var st = stat()
        if fstat(fd, &st) != 0 { return .failure(Refused(code: errno)) }
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_uid == geteuid(), st.st_nlink == 1 else {
            return .failure(Refused(code: EPERM))
        }
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) }
        return .success(Int64(st.st_size))
    }

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
    /// attempt that wrote nothing leaves no 0-byte `.part` behind).
    func removeIfEmpty() {
        guard fd >= 0 else { return }
        var mine = stat(), there = stat()
        guard fstat(fd, &mine) == 0, mine.st_size == 0, lstat(path, &there) == 0,
              mine.st_dev == there.st_dev, mine.st_ino == there.st_ino else { return }
        _ = unlink(path)
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

    /// SHA-256 of the first `length` bytes of `path`, read through its own descriptor.
    /// Runs on a background queue (a large prefix takes seconds to hash).
    static func hashPrefix(path: String, length: Int64) -> Result<SHA256, PartFileError> {
        let fd = path.withCString { Glibc.open($0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
        if fd < 0 { return .failure(PartFileError(code: errno, action: "reading", path: path)) }
        defer { Glibc.close(fd) }
        var hasher = SHA256()
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var remaining = length
        while remaining > 0 {
            let n = read(fd, buffer, Int(min(Int64(chunk), remaining)))
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(PartFileError(code: errno, action: "reading", path: path))
            }
            if n == 0 { return .failure(PartFileError(code: EIO, action: "reading (it is shorter than expected)", path: path)) }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(start: buffer, count: n))
            remaining -= Int64(n)
        }
        return .success(hasher)
    }
}
