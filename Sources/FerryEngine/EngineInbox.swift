import CCurl
import Crypto
import FerryCore
import Foundation

/// What other threads (callers, background file jobs) ask of the engine thread.
enum EngineCommand {
    case start(EngineRequest)
    case stop(TransferID)
    case setSpeedLimit(TransferID, UInt64)
    /// A background job opened a starting attempt's part file.
    case partOpened(TransferID, attempt: UInt64, Result<OpenedPart, OpenedPart.Failure>)
    /// A background job opened a starting segmented attempt's part file (or found it is
    /// not a regular file and opened it for one connection).
    case segmentedPartOpened(TransferID, attempt: UInt64, SegmentedDownload.OpenedPart)
    /// A background job hashed the part file's existing prefix for a resumed attempt.
    case prefixHashed(TransferID, attempt: UInt64, Result<SHA256, PartFileError>)
    /// A background job ran fdatasync + close on a finished attempt's part file.
    case flushed(TransferID, attempt: UInt64, PartFileError?)
    /// A background file job of an `EngineAttempt` (flush, hash) finished.
    case attemptFileJob(TransferID, attempt: UInt64, Result<String?, PartFileError>)
    case discardCookies(EngineCookieJar)
    /// An upload's reader queue read a chunk of its file (or found it changed).
    case uploadChunk(TransferID, attempt: UInt64, UploadChunk)
    /// A background job hashed a segmented download's prefix up to `upTo`.
    case attemptHashed(TransferID, attempt: UInt64, epoch: Int, upTo: Int64, Result<SHA256, PartFileError>)
    case shutdown
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
