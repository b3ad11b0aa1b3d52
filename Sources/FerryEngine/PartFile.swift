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

    /// Opens (creating with mode 0644) for writing; does not truncate.
    static func open(_ path: String) -> Result<PartFile, PartFileError> {
        let fd = path.withCString { Glibc.open($0, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644) }
        if fd < 0 { return .failure(PartFileError(code: errno, action: "opening", path: path)) }
        var st = stat()
        if fstat(fd, &st) != 0 {
            let e = errno
            Glibc.close(fd)
            return .failure(PartFileError(code: e, action: "opening", path: path))
        }
        let regular = (st.st_mode & S_IFMT) == S_IFREG
        return .success(PartFile(path: path, fd: fd, isRegular: regular, initialSize: regular ? Int64(st.st_size) : 0))
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
        let fd = path.withCString { Glibc.open($0, O_RDONLY | O_CLOEXEC) }
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

extension PartFile {
    /// A device or pipe is there: ranges cannot be written at their offsets.
    static func existsAsOtherThanRegularFile(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) != S_IFREG
    }

    /// Writes all of `count` bytes at `offset` (a range connection's chunk).
    func write(_ data: UnsafeRawPointer, _ count: Int, at offset: Int64) -> PartFileError? {
        var p = data
        var left = count
        var at = offset
        while left > 0 {
            let n = pwrite(fd, p, left, off_t(at))
            if n > 0 {
                p += n; left -= n; at += Int64(n)
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return PartFileError(code: n < 0 ? errno : ENOSPC, action: "writing", path: path)
            }
        }
        return nil
    }
}
