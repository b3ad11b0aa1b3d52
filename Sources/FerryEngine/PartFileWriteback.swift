import CCurl
import Dispatch
import Foundation

/// Starts disk write-out of a part file's finished regions while the download goes
/// on, so the fdatasync at the end has little left to wait for (without it, a 1 GiB
/// download ends with seconds of flushing).
///
/// The work runs on a background queue (sync_file_range can block on a busy device)
/// with its own `dup` of the descriptor, so the engine may close its descriptor at
/// any time. Created and driven on the engine thread.
final class PartFileWriteback {
    /// Bytes between two write-out requests.
    static let step: Int64 = 8 << 20
    private static let queue = DispatchQueue(label: "org.ferry.engine.writeback", qos: .utility)

    /// The duplicate; -1 once handed over (`handOver`).
    private var fd: Int32
    /// End of the region already handed to write-out.
    private var requested: Int64

    init?(fd: Int32, from offset: Int64) {
        let copy = dup(fd)
        guard copy >= 0 else { return nil }
        _ = fcntl(copy, F_SETFD, FD_CLOEXEC)
        self.fd = copy
        self.requested = offset
    }

    deinit {
        let fd = self.fd
        guard fd >= 0 else { return }
        Self.queue.async { _ = Glibc.close(fd) } // after any write-out still queued
    }

    /// Gives the duplicate away, for `close(afterQueuedWriteback:)` in the file job
    /// that flushes the file: so that no descriptor of the file is open once it has its
    /// final name (a program that waits for a file's last close would see one after).
    func handOver() -> Int32 {
        let taken = fd
        fd = -1
        return taken
    }

    /// Closes a handed-over duplicate after any write-out still queued on it, and
    /// returns once it is closed. On a file job, never the engine thread.
    static func close(afterQueuedWriteback fd: Int32) {
        guard fd >= 0 else { return }
        queue.sync { _ = Glibc.close(fd) }
    }

    /// Nanoseconds between two syncs of a running download's part file: what a power
    /// cut may take back of it (the rest is trusted after the machine restarts).
    /// Set once, before the engine starts (`CurlEngine.setPartSyncInterval`).
    nonisolated(unsafe) static var syncInterval: UInt64 = 5_000_000_000
    private var nextSyncAt = monotonicNanoseconds() &+ PartFileWriteback.syncInterval

    /// Every `syncInterval`: fdatasync of the whole file on the write-out queue (after
    /// the write-out queued before it), then `synced` there, if the sync succeeded.
    /// The caller reads what the file holds before calling: what it then says is on
    /// the disk was written before the sync. Returns whether a sync was queued.
    @discardableResult
    func syncIfDue(now: UInt64, _ synced: @escaping @Sendable () -> Void) -> Bool {
        guard now >= nextSyncAt, fd >= 0 else { return false }
        nextSyncAt = now &+ Self.syncInterval
        let fd = self.fd
        Self.queue.async {
            var rc: Int32
            repeat { rc = fdatasync(fd) } while rc != 0 && errno == EINTR
            if rc == 0 { synced() }
        }
        return true
    }

    /// Where the next request is due.
    var nextRequestAt: Int64 { requested + Self.step }

    /// Starts write-out of every dirty page of the file (ranges written out of order).
    func requestAll() {
        let fd = self.fd
        guard fd >= 0 else { return }
        Self.queue.async { _ = ferry_start_writeback(fd, 0, 0) }
    }

    /// Starts write-out of [previous end, `end`).
    func request(upTo end: Int64) {
        guard end > requested, fd >= 0 else { return }
        let (fd, start) = (self.fd, requested)
        requested = end
        Self.queue.async { _ = ferry_start_writeback(fd, start, end - start) }
    }
}
