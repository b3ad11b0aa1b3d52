import Crypto
import Foundation

extension PartFile {
    /// The open file once more, for reading on a background job: through
    /// `/proc/self/fd`, so it is this file whatever its name now leads to (a sandboxed
    /// app's folder swapped for a link). O_NONBLOCK: a FIFO does not hang the reads.
    /// -1 when it cannot be opened. Call on the thread that owns the file.
    func openForReading() -> Int32 {
        guard fd >= 0 else { return -1 }
        return "/proc/self/fd/\(fd)".withCString { Glibc.open($0, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }
    }

    /// Continues `hasher` over bytes `from..<to` of the file open for reading as
    /// `reader` (from `openForReading`; closed here; -1 fails the hash);
    /// `path` names it in errors. Runs on a background queue: a segmented download
    /// hashes its contiguous prefix while the rest is still coming.
    static func hashRange(_ reader: Int32, path: String, from: Int64, to: Int64, continuing hasher: SHA256) -> Result<SHA256, PartFileError> {
        if reader < 0 { return .failure(PartFileError(code: EBADF, action: "opening for reading", path: path)) }
        let fd = reader
        defer { Glibc.close(fd) }
        var hasher = hasher
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var at = from
        while at < to {
            let n = pread(fd, buffer, Int(min(Int64(chunk), to - at)), off_t(at))
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(PartFileError(code: errno, action: "reading", path: path))
            }
            if n == 0 { return .failure(PartFileError(code: EIO, action: "reading (it is shorter than expected)", path: path)) }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(start: buffer, count: n))
            at += Int64(n)
        }
        return .success(hasher)
    }
}
