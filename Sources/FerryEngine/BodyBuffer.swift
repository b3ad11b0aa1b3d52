import Foundation

/// Gathers a download's body (a single-connection attempt's, or one range connection's)
/// into writes that end on 128 KiB boundaries of the part file (the first one, of a
/// body that starts mid-file, up to the first boundary). libcurl hands a body over in
/// pieces of at most 16 KiB, whose ends seldom fall on a page: written as they came,
/// each piece was a system call, the page cache took it in small folios, and the page
/// its end cut into was zeroed first.
/// Measured on this project's machine (a C loop writing 1 GiB into a reserved file in
/// libcurl's pieces): 0.47-0.89 s of CPU as they come, 0.18-0.28 s gathered to 128 KiB.
/// A 100 KiB file is one write.
///
/// The bytes held here are not in the file yet: their owner writes them
/// (`CurlTransfer.writeBufferedBody`, `SegmentedDownload.writeHeldBytes`) with each
/// progress report (at most 250 ms after they came), before the attempt ends, and before
/// anything reads the file or records what it holds. A crash loses at most what is held,
/// which the part file then does not hold either: a restart continues from the file's
/// real size, or from a range map that counts written bytes only.
///
/// Memory: 128 KiB, allocated with the first piece, freed with the attempt.
struct BodyBuffer: ~Copyable {
    /// The size of one write and the boundary writes end on.
    static let capacity = 128 * 1024

    private var storage: UnsafeMutableRawPointer?
    /// Bytes held, not yet written.
    private(set) var count = 0
    /// Where in the file the held bytes go: everything before it is written.
    private(set) var writtenEnd: Int64

    /// A buffer for a body whose first byte goes at `offset` in the file.
    init(startingAt offset: Int64) {
        writtenEnd = offset
    }

    deinit { storage?.deallocate() }

    /// Takes `length` bytes; writes (`write(bytes, count, fileOffset)`, answering as
    /// `pwrite(2)` does) each time the held bytes reach a boundary. Returns the `errno`
    /// of a write that failed: what could not be written is still held (`count`), and
    /// `writtenEnd` is where the written bytes end.
    mutating func append(_ data: UnsafeRawPointer, _ length: Int,
                         write: (UnsafeRawPointer, Int, Int64) -> Int) -> Int32? {
        var from = data
        var left = length
        while left > 0 {
            let end = writtenEnd + Int64(count)
            // Up to the next boundary; never past the block (bytes a failed write left
            // held are written first, or the failure is returned again).
            let room = min(Self.capacity - Int(end % Int64(Self.capacity)), Self.capacity - count)
            let take = min(room, left)
            let buffer = storage ?? allocate()
            (buffer + count).copyMemory(from: from, byteCount: take)
            count += take
            from += take
            left -= take
            if take == room, let code = flush(write: write) { return code }
        }
        return nil
    }

    /// Writes everything held. Returns the `errno` of a write that failed (then
    /// `count` bytes are still held and `writtenEnd` is where the file ends).
    mutating func flush(write: (UnsafeRawPointer, Int, Int64) -> Int) -> Int32? {
        guard count > 0, let buffer = storage else { return nil }
        var done = 0
        defer {
            if done > 0 && done < count { buffer.copyMemory(from: buffer + done, byteCount: count - done) } // memmove
            count -= done
            writtenEnd += Int64(done)
        }
        while done < count {
            let n = write(buffer + done, count - done, writtenEnd + Int64(done))
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return n < 0 ? errno : ENOSPC
            }
        }
        return nil
    }

    /// `append` into the open file `fd` (`pwrite` at each piece's offset).
    mutating func append(_ data: UnsafeRawPointer, _ length: Int, toFile fd: Int32) -> Int32? {
        append(data, length) { pwrite(fd, $0, $1, off_t($2)) }
    }

    /// `flush` into the open file `fd`.
    mutating func flush(toFile fd: Int32) -> Int32? {
        flush { pwrite(fd, $0, $1, off_t($2)) }
    }

    /// Drops what is held (it could not be written) and frees the memory.
    mutating func discard() {
        count = 0
        storage?.deallocate()
        storage = nil
    }

    private mutating func allocate() -> UnsafeMutableRawPointer {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.capacity, alignment: 4096)
        storage = buffer
        return buffer
    }
}
