import CCurl
import FerryCore

/// One attempt of one transfer, whatever its kind: a request waiting for the desktop's
/// proxy for its origin (`AwaitingProxy`), a download whose part file is being
/// opened (`OpeningDownload`), a download on one connection (`SingleDownload`) or on
/// several (`SegmentedDownload`), an upload (`UploadAttempt`). The loop keeps one table
/// of them, by transfer. An attempt owns its easy handles (registered with the loop
/// through `EngineLoop.add(_:owner:)`, each set up by `EasyHandleSetup`) and its files,
/// keeps its state in a phase of its own, and ends through `EngineLoop.attemptEnded`.
/// Engine thread only.
protocol EngineAttempt: AnyObject {
    var id: TransferID { get }
    /// Distinguishes this attempt's background job results from an older attempt's.
    var attempt: UInt64 { get }
    /// One of this attempt's handles ended (curl's CURLMSG_DONE).
    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode)
    /// `stop(id)`: release everything and complete with `.stopped`.
    func stop()
    func setSpeedLimit(_ bytesPerSecond: UInt64)
    /// Progress for data that stopped mid-interval; returns when the next report is due.
    func reportProgressIfDue(now: UInt64) -> UInt64?
    /// When it will have moved no data for `request-timeout` (monotonic ns); nil while
    /// nothing is owed by the server (not connected yet, held by the speed limit).
    var stallDue: UInt64? { get }
    /// `stallDue` passed: the attempt (or its silent connection) fails with a timeout.
    func stalled(now: UInt64)
    /// Engine shutdown: release handles and close files, no events.
    func abandon()
    /// A background job this attempt sent is back.
    func jobDone(_ job: AttemptJob)
    /// Work a callback asked for (`EngineLoop.requestService`): adding and removing
    /// handles is not allowed inside libcurl's callbacks, so it happens here, after
    /// curl_multi_perform returns.
    func service()
}

/// Something a speed limit pauses; the loop unpauses it at `paceAllowsAt`.
protocol PacedHandle: AnyObject {
    var speedLimit: UInt64 { get }
    var paceAllowsAt: UInt64 { get }
    func resumeAfterThrottle()
}

extension CurlTransfer: PacedHandle {}

/// The speed limit of one transfer, shared by all its connections: a chunk may go
/// when the previous ones have had their time at the limit.
final class Pacer {
    private(set) var limit: UInt64
    private(set) var allowsAt: UInt64 = 0

    init(limit: UInt64) { self.limit = limit }

    /// Whether `count` bytes may move now (booking their time if so).
    @inline(__always)
    func admit(_ count: Int, now: UInt64) -> Bool {
        guard limit != 0 else { return true }
        if now < allowsAt { return false }
        allowsAt = max(allowsAt, now) &+ UInt64(count) &* 1_000_000_000 / limit
        return true
    }

    func setLimit(_ bytesPerSecond: UInt64) {
        limit = bytesPerSecond
        allowsAt = min(allowsAt, monotonicNanoseconds() + 1_000_000_000)
    }
}
