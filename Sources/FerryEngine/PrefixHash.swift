import Crypto
import Synchronization
import FerryCore
import Foundation

/// A segmented download's SHA-256 of the whole file (when asked for): the contiguous
/// prefix is hashed in the background in steps as it grows, so little is left at the end.
struct PrefixHash {
    /// Prefix bytes worth a background hash job.
    static let step: Int64 = 8 << 20
    /// SHA-256 of the file's first `upTo` bytes.
    private(set) var digest = PrefixDigest()
    private(set) var upTo: Int64 = 0
    /// A background job is hashing from `upTo` on.
    private(set) var running = false
    /// Bumped when the file starts over: an older job's result is void.
    private(set) var epoch = 0
    /// The attempt completes once the running job is back (its result is needed first).
    var completeAfter = false

    /// The file starts over: hashed anew from byte 0.
    mutating func restart() {
        digest = PrefixDigest()
        upTo = 0
        epoch += 1
    }

    /// A job for the bytes from `upTo` to `frontier`, when enough are there and none is
    /// running (it is then running).
    mutating func job(upTo frontier: Int64) -> (from: Int64, digest: PrefixDigest, epoch: Int)? {
        guard !running, frontier - upTo >= Self.step else { return nil }
        running = true
        return (upTo, digest, epoch)
    }

    /// A job is back; false when it failed (the file is to be hashed anew).
    mutating func jobDone(epoch: Int, upTo end: Int64, failed: Bool) -> Bool {
        running = false
        guard epoch == self.epoch else { return true }
        if failed { return false }
        upTo = end
        return true
    }
}

/// The SHA-256 state of a file's prefix, advanced by one file job at a time (the
/// engine thread hands it over and waits for the job's answer) and read at the end.
final class PrefixDigest: Sendable {
    private let state = Mutex(SHA256())

    /// Hashes bytes `from..<to` of the file open as `reader` (closed after) into the
    /// state. On a file job.
    func advance(_ reader: Int32, path: String, from: Int64, to: Int64) -> PartFileError? {
        state.withLock { hasher in
            switch PartFile.hashRange(reader, path: path, from: from, to: to, continuing: hasher) {
            case .success(let advanced):
                hasher = advanced
                return nil
            case .failure(let error):
                return error
            }
        }
    }

    /// Lowercase hex of the digest of what was hashed.
    func hex() -> String {
        state.withLock { $0.finalize().map { String(format: "%02x", $0) }.joined() }
    }
}

extension SegmentedDownload {
    func restartHash() {
        partEpoch += 1 // the file starts over (or is hashed anew): syncs in flight are void
        prefixHash?.restart()
    }

    /// Hands the contiguous prefix not hashed yet to a background job, in steps.
    func hashPrefixIfDue() {
        guard prefixHash != nil, !flushing, let file else { return }
        let frontier: Int64
        if let map = currentMap() {
            frontier = map.contiguousPrefix
        } else if single, let first = connections.first, first.accepted {
            frontier = first.position
        } else {
            return
        }
        guard let job = prefixHash?.job(upTo: frontier) else { return }
        let (id, attempt, path, mailbox) = (self.id, self.attempt, file.path, loop.mailbox)
        let (from, digest, epoch) = job
        let reader = file.openForReading()
        loop.fileJobs.async {
            let error = digest.advance(reader, path: path, from: from, to: frontier)
            mailbox.post(.hashed(epoch: epoch, upTo: frontier, error), to: id, attempt: attempt)
        }
    }

    /// A background hash job is back (on the engine thread).
    func prefixHashed(epoch: Int, upTo: Int64, _ error: PartFileError?) {
        if prefixHash?.jobDone(epoch: epoch, upTo: upTo, failed: error != nil) == false {
            restartHash() // the final job hashes everything instead
        }
        if prefixHash?.completeAfter == true && !completed {
            prefixHash?.completeAfter = false
            complete()
        } else {
            hashPrefixIfDue()
        }
    }
}
