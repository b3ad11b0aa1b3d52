import Dispatch
import FerryCore
import Foundation

/// The one test double of `TransferEngine`, for unit tests of the core (and of the
/// layers over it that need no real transfers). It records what the core asks for;
/// its mode says who plays the engine's part.
///
/// `@unchecked Sendable`: every stored property is guarded by `lock` (the core calls in
/// on its queue, the test reads from its own thread).
public final class FakeEngine: TransferEngine, @unchecked Sendable {
    public enum Mode: Sendable {
        /// The test sends every event (`emit`); a stop is only recorded, the test confirms it.
        case scripted
        /// Like `scripted`, but a stop is confirmed at once (`.stopped`, 0 bytes), as a fast engine would.
        case scriptedConfirmingStops
        /// Every request finishes at once with 1,000 bytes written to its `.part`, or a 404
        /// for the URLs in `failing`; stops are confirmed at once. Events come from another thread.
        case instant
    }

    public let mode: Mode
    private let lock = NSLock()
    private var handler: (@Sendable (EngineEvent) -> Void)?
    private var _started: [EngineRequest] = []
    private var _stopped: [TransferID] = []
    private var _limits: [(id: TransferID, bps: UInt64)] = []
    private var _shutDown = false
    private var _failing: Set<String> = []
    private var _calls: [String] = []

    /// Plays an engine that tells of unanswered streams (`TransferEngine.reportsUnansweredStreams`).
    public let reportsUnansweredStreams: Bool

    public init(_ mode: Mode = .scripted, reportsUnansweredStreams: Bool = false) {
        self.mode = mode
        self.reportsUnansweredStreams = reportsUnansweredStreams
    }

    public func setEventHandler(_ handler: @escaping @Sendable (EngineEvent) -> Void) {
        lock.withLock { self.handler = handler }
    }

    public func start(_ request: EngineRequest) {
        let (handler, fails) = lock.withLock { () -> ((@Sendable (EngineEvent) -> Void)?, Bool) in
            _started.append(request)
            _calls.append("start \(request.id)")
            return (self.handler, _failing.contains(request.url))
        }
        guard case .instant = mode else { return }
        DispatchQueue.global().async {
            if fails {
                handler?(.completed(request.id, .failed(.http(status: 404, "HTTP 404 Not Found"), bytesOnDisk: 0)))
                return
            }
            FileManager.default.createFile(atPath: request.partPath, contents: Data(repeating: 7, count: 1000))
            handler?(.response(request.id, EngineResponse(status: 200, expectedTotal: 1000, effectiveURL: request.url)))
            handler?(.completed(request.id, .succeeded(bytesOnDisk: 1000, sha256: nil)))
        }
    }

    public func stop(_ id: TransferID) {
        lock.withLock {
            _stopped.append(id)
            _calls.append("stop \(id)")
        }
        switch mode {
        case .scripted: return
        case .scriptedConfirmingStops: emit(.completed(id, .stopped(bytesOnDisk: 0)))
        case .instant:
            let handler = lock.withLock { self.handler }
            DispatchQueue.global().async { handler?(.completed(id, .stopped(bytesOnDisk: 0))) }
        }
    }

    public func setSpeedLimit(_ id: TransferID, bytesPerSecond: UInt64) {
        lock.withLock { _limits.append((id, bytesPerSecond)) }
    }

    public func shutdown() { lock.withLock { _shutDown = true } }

    public func forgetConnections() {
        lock.withLock { _calls.append("forget") }
    }

    /// Starts, stops and forgets, in the order the core asked: "start 3", "stop 3", "forget".
    public var calls: [String] { lock.withLock { _calls } }

    /// Each `forgetConnections`, as the number of stops asked for before it.
    public var connectionsForgotten: [Int] {
        var stops = 0
        var forgets: [Int] = []
        for call in calls {
            if call.hasPrefix("stop ") { stops += 1 } else if call == "forget" { forgets.append(stops) }
        }
        return forgets
    }

    public var started: [EngineRequest] { lock.withLock { _started } }
    public var stopped: [TransferID] { lock.withLock { _stopped } }
    public var limits: [(id: TransferID, bps: UInt64)] { lock.withLock { _limits } }
    public var isShutDown: Bool { lock.withLock { _shutDown } }
    public var startedIDs: [TransferID] { started.map(\.id) }
    /// The URLs asked for, in order.
    public var requests: [String] { started.map(\.url) }
    /// `instant` mode: these URLs answer 404.
    public var failing: Set<String> {
        get { lock.withLock { _failing } }
        set { lock.withLock { _failing = newValue } }
    }

    /// The latest request for `id`.
    public func lastRequest(_ id: TransferID) -> EngineRequest? { started.last { $0.id == id } }

    /// Delivers an event the way the real engine does (the core hops onto its queue).
    public func emit(_ event: EngineEvent) {
        let handler = lock.withLock { self.handler }
        handler?(event)
    }
}
