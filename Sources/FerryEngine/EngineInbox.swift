import CCurl
import Crypto
import FerryCore
import Foundation

/// What other threads (callers, background file jobs) ask of the engine thread.
enum EngineCommand {
    case start(EngineRequest)
    case stop(TransferID)
    case setSpeedLimit(TransferID, UInt64)
    /// A background job of attempt `attempt` of a transfer is back (a stale attempt's
    /// result is dropped).
    case jobDone(TransferID, attempt: UInt64, AttemptJob)
    case discardCookies(EngineCookieJar)
    case shutdown
}

/// What a background job (a file job, an upload's reader) hands back to the attempt
/// that sent it, on the engine thread (`EngineAttempt.jobDone`).
enum AttemptJob {
    /// The part file of a starting download is open (`OpeningDownload`).
    case partOpened(Result<OpenedPart, OpenedPart.Failure>)
    /// The part file of a starting segmented download is open, or was found not to be a
    /// regular file and opened for one connection (`OpeningDownload`).
    case segmentedPartOpened(SegmentedDownload.OpenedPart)
    /// The part file's existing prefix is hashed for a resumed download (`SingleDownload`).
    case prefixHashed(Result<SHA256, PartFileError>)
    /// fdatasync and close of a finished download's part file (`SingleDownload`).
    case flushed(PartFileError?)
    /// A flush (and maybe the final hash) of a segmented download, or an upload's
    /// response file (`SegmentedDownload`, `UploadAttempt`).
    case fileJob(Result<String?, PartFileError>)
    /// An upload's reader queue read a chunk of its file, or found it changed.
    case uploadChunk(UploadChunk)
    /// A segmented download's prefix is hashed up to `upTo` (into its `PrefixDigest`), or
    /// could not be.
    case hashed(epoch: Int, upTo: Int64, PartFileError?)
    /// (Pieces) A piece of a segmented download was hashed: `matches` nil when it
    /// could not be read. `source` fetched it (-1: it was on disk from before).
    case pieceChecked(epoch: Int, index: Int, source: Int, matches: Bool?)
    /// A running download's part file was synced (`PartFileWriteback.syncIfDue`) with
    /// these bytes in it; `epoch` says which writing of the file (one that started the
    /// file over since makes it void).
    case synced(DurablePart, epoch: Int)
}

/// The locked inbox between the engine's callers and its thread, and the event handler.
final class EngineInbox: @unchecked Sendable {
    // @unchecked Sendable: every mutable field is read and written under `lock`.
    // `multi` is only used for curl_multi_wakeup (thread-safe in libcurl), and only
    // while `closed` is false, so never after the engine thread has cleaned it up.
    private let lock = NSLock()
    private var commands: [EngineCommand] = []
    private var handler: (@Sendable (EngineEvent) -> Void)?
    private var closed = false
    private let multi: UnsafeMutableRawPointer

    init(multi: UnsafeMutableRawPointer) {
        self.multi = multi
    }

    func setHandler(_ handler: @escaping @Sendable (EngineEvent) -> Void) {
        lock.lock()
        self.handler = handler
        lock.unlock()
    }

    /// The handler, or nil once the engine is shutting down (no more events).
    var currentHandler: (@Sendable (EngineEvent) -> Void)? {
        lock.lock()
        defer { lock.unlock() }
        return closed ? nil : handler
    }

    /// Queues a command and wakes the engine thread; dropped after `close()`.
    func post(_ command: EngineCommand) {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        commands.append(command)
        _ = curl_multi_wakeup(multi)
    }

    /// Refuses further commands and events and asks the loop to end.
    func close() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        closed = true
        commands.append(.shutdown)
        _ = curl_multi_wakeup(multi)
    }

    /// Everything posted since the last call, oldest first.
    func take() -> [EngineCommand] {
        lock.lock()
        defer { lock.unlock() }
        if commands.isEmpty { return [] }
        let taken = commands
        commands.removeAll(keepingCapacity: true)
        return taken
    }
}
