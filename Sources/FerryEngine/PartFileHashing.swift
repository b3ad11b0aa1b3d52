import Crypto
import Foundation

extension PartFile {
    /// Continues `hasher` over bytes `from..<to` of `path`, read through its own
    /// descriptor. Runs on a background queue: a segmented download hashes its
    /// contiguous prefix while the rest is still coming.
    static func hashRange(path: String, from: Int64, to: Int64, continuing hasher: SHA256) -> Result<SHA256, PartFileError> {
        // O_NONBLOCK: a FIFO put at the name does not hang the open (nor, empty, the reads).
        let fd = path.withCString { Glibc.open($0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        if fd < 0 { return .failure(PartFileError(code: errno, action: "reading", path: path)) }
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
