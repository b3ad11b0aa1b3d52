import CCurl
import Crypto
import FerryCore
import FerryConcurrency
import Foundation
import Synchronization

/// What other threads (callers, background file jobs) ask of the engine thread.
enum EngineCommand {
    case start(EngineRequest)
    case stop(TransferID)
    case setSpeedLimit(TransferID, UInt64)
    /// A background job of attempt `attempt` of a transfer is back (a stale attempt's
    /// result is dropped).
    case jobDone(TransferID, attempt: UInt64, AttemptJob)
    case discardCookies(EngineCookieJar)
    /// The network moved (`TransferEngine.forgetConnections`).
    case forgetConnections
    /// The desktop's answer for an origin (`DesktopProxies`), to a question asked in
    /// `generation`.
    case desktopProxy(origin: String, generation: Int, DesktopProxyAnswer)
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

/// The inbox between the engine's callers and its thread (a `BatchingInbox` whose
/// wake-up is `curl_multi_wakeup`), and the event handler.
///
/// Sendable: the commands and `closed` are the batching inbox's (under its lock), the
/// handler is under a `Mutex`; the multi handle's address is only used for
/// `curl_multi_wakeup` (thread-safe in libcurl), under the inbox's lock and only while
/// it is open, so never after the engine thread has cleaned the handle up.
final class EngineInbox: Sendable {
    /// The handler in a box of its own: a closure kept straight in a `Mutex` (generic
    /// storage) is re-wrapped in a conversion thunk each time `withLock` hands it out
    /// through its `inout`, so every event would call through one more layer (the
    /// handler's cost grew with the events sent: quadratic). A class reference is not
    /// converted.
    private final class Handler: Sendable {
        let call: @Sendable (EngineEvent) -> Void
        init(_ call: @escaping @Sendable (EngineEvent) -> Void) { self.call = call }
    }

    private let commands = BatchingInbox<EngineCommand>()
    private let handler = Mutex<Handler?>(nil)
    private let multiAddress: Int

    init(multi: UnsafeMutableRawPointer) {
        self.multiAddress = Int(bitPattern: multi)
    }

    func setHandler(_ handler: @escaping @Sendable (EngineEvent) -> Void) {
        let box = Handler(handler)
        self.handler.withLock { $0 = box }
    }

    /// The handler, or nil once the engine is shutting down (no more events).
    var currentHandler: (@Sendable (EngineEvent) -> Void)? {
        commands.isClosed ? nil : handler.withLock { $0 }?.call
    }

    /// Queues a command, waking the engine thread for the first of a batch; dropped after
    /// `close()`.
    func post(_ command: sending EngineCommand) {
        commands.append(command, wake: wakeEngine)
    }

    /// Refuses further commands and events and asks the loop to end.
    func close() {
        commands.close(with: .shutdown, wake: wakeEngine)
    }

    /// Everything posted since the last call, oldest first.
    func take() -> [EngineCommand] {
        commands.drain()
    }

    private func wakeEngine() {
        if let multi = UnsafeMutableRawPointer(bitPattern: multiAddress) { _ = curl_multi_wakeup(multi) }
    }
}
