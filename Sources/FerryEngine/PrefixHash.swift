import Crypto
import FerryCore
import Foundation

/// A segmented download's SHA-256 of the whole file (when asked for): the contiguous
/// prefix is hashed in the background in steps as it grows, so little is left at the end.
struct PrefixHash {
    /// Prefix bytes worth a background hash job.
    static let step: Int64 = 8 << 20
    /// SHA-256 of the file's first `upTo` bytes.
    private(set) var hasher = SHA256()
    private(set) var upTo: Int64 = 0
    /// A background job is hashing from `upTo` on.
    private(set) var running = false
    /// Bumped when the file starts over: an older job's result is void.
    private(set) var epoch = 0
    /// The attempt completes once the running job is back (its result is needed first).
    var completeAfter = false

    /// The file starts over: hashed anew from byte 0.
    mutating func restart() {
        hasher = SHA256()
        upTo = 0
        epoch += 1
    }

    /// A job for the bytes from `upTo` to `frontier`, when enough are there and none is
    /// running (it is then running).
    mutating func job(upTo frontier: Int64) -> (from: Int64, hasher: SHA256, epoch: Int)? {
        guard !running, frontier - upTo >= Self.step else { return nil }
        running = true
        return (upTo, hasher, epoch)
    }

    /// A job is back; false when its hash failed (the file is to be hashed anew).
    mutating func jobDone(epoch: Int, upTo end: Int64, _ result: Result<SHA256, PartFileError>) -> Bool {
        running = false
        guard epoch == self.epoch else { return true }
        switch result {
        case .success(let advanced):
            hasher = advanced
            upTo = end
            return true
        case .failure:
            return false
        }
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
        let (id, attempt, path, loop) = (self.id, self.attempt, file.path, self.loop)
        let reader = file.openForReading()
        loop.fileJobs.async {
            let result = PartFile.hashRange(reader, path: path, from: job.from, to: frontier, continuing: job.hasher)
            loop.post(.hashed(epoch: job.epoch, upTo: frontier, result), to: id, attempt: attempt)
        }
    }

    /// A background hash job is back (on the engine thread).
    func prefixHashed(epoch: Int, upTo: Int64, _ result: Result<SHA256, PartFileError>) {
        if prefixHash?.jobDone(epoch: epoch, upTo: upTo, result) == false {
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
