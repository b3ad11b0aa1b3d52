import FerryCore
import Foundation

/// Keeps a download from filling its disk. When the length is known the space is
/// reserved up front with `fallocate(FALLOC_FL_KEEP_SIZE)` (a full disk then fails at
/// once, and nothing else can take the space meanwhile); where the file system cannot
/// reserve (EOPNOTSUPP: some FUSE and network mounts) or the length is unknown, the
/// free space is read (`fstatvfs`) as data arrives and the download stops with `Disk`
/// while a margin is still free. Reads are spread out: after one, the next is due
/// only once half of the room above the margin has been written.
struct DiskSpaceGuard {
    /// Bytes that may still be written before free space is read again.
    private var allowance: Int64 = 0
    /// End of the reserved range: writes below it need no check.
    private(set) var reservedEnd: Int64 = 0
    /// End of a small body measured to fit with the margin, not reserved (see `reserve`).
    private var measuredEnd: Int64 = 0

    /// The margin left free: 1 % of the file system, at least 64 KiB, at most 64 MiB.
    static func margin(fileSystemBytes: Int64) -> Int64 {
        min(max(fileSystemBytes / 100, 64 * 1024), 64 * 1024 * 1024)
    }

    /// Reserves `[offset, end)` in the file when it can. Returns a failure when the disk
    /// is too small for it with the margin to spare; an unsupported reservation falls
    /// back to checking as data comes.
    mutating func reserve(_ file: PartFile, from offset: Int64, to end: Int64) -> PartFileError? {
        guard end > offset, file.isRegular else { return nil }
        // It must fit with the margin to spare, whether or not it can be reserved.
        if let error = measure(file, writing: end - offset) { return error }
        // A small body is not reserved: it fits with the margin to spare (just measured:
        // its writes need no other check), and on ext4 a reserved range is "unwritten"
        // extents that the flush must convert, dearer than letting the writes allocate.
        guard end - offset >= Self.smallestReserved else {
            allowance += end - offset
            measuredEnd = end
            return nil
        }
        allowance = 0
        guard let fallocate = Self.fallocate else { return nil }
        while true {
            if fallocate(file.fd, Self.keepSize, off_t(offset), off_t(end - offset)) == 0 {
                reservedEnd = end
                return nil
            }
            switch errno {
            case EINTR: continue
            case ENOSPC, EFBIG:
                return PartFileError(code: errno, action: "reserving \(ByteCount.describe(end - offset)) for", path: file.path)
            default: return nil // EOPNOTSUPP and friends: check as the data comes instead
            }
        }
    }

    /// The space up to `end` is reserved, or a small body up to `end` was measured: either
    /// way it was found to fit with the margin, and nobody needs to measure it again.
    func covers(upTo end: Int64) -> Bool { end > 0 && max(reservedEnd, measuredEnd) >= end }

    /// Before writing `count` bytes at `position`, with `held` bytes before them taken
    /// but not written yet (`BodyBuffer`: the free space read does not show them): nil
    /// when they may be written, else the failure that stops the download with the
    /// margin still free.
    @inline(__always)
    mutating func check(_ file: PartFile, writing count: Int, at position: Int64, held: Int = 0) -> PartFileError? {
        if position + Int64(count) <= reservedEnd || !file.isRegular { return nil } // a device or pipe: as it is
        if Int64(count) <= allowance {
            allowance -= Int64(count)
            return nil
        }
        return measure(file, writing: Int64(count) + Int64(held))
    }

    private mutating func measure(_ file: PartFile, writing count: Int64) -> PartFileError? {
        var fs = statvfs()
        guard fstatvfs(file.fd, &fs) == 0 else {
            allowance = count // cannot tell: let the write itself report a full disk
            return nil
        }
        let unit = Int64(fs.f_frsize)
        let free = Int64(fs.f_bavail) * unit
        let margin = Self.margin(fileSystemBytes: Int64(fs.f_blocks) * unit)
        let room = free - margin
        guard room >= count else {
            return PartFileError(code: ENOSPC, action: "writing (only \(ByteCount.describe(max(free, 0))) are free; stopped before the disk was full)", path: file.path)
        }
        allowance = max(room / 2, count) - count
        return nil
    }

    /// Bodies below this are checked, not reserved (see `reserve`).
    static let smallestReserved: Int64 = 1 << 20

    private static let keepSize: Int32 = 0x01 // FALLOC_FL_KEEP_SIZE: the file's size stays what was written

    /// glibc's `fallocate`, which Swift's Glibc module does not import (it is a GNU
    /// extension); looked up once.
    private static let fallocate: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32)? = {
        guard let symbol = dlsym(nil, "fallocate64") ?? dlsym(nil, "fallocate") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
    }()
}

extension PartFile {
    /// Gives back space reserved beyond what was written (a stopped or failed attempt):
    /// cutting the file to its own size frees blocks allocated past its end.
    func releaseReservation() {
        guard fd >= 0, isRegular else { return }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return }
        _ = ftruncate(fd, st.st_size)
    }
}
