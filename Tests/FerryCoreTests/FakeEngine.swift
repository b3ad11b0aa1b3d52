import Foundation
@testable import FerryCore

/// Records what the core asks for; the test plays the engine's part by sending events.
final class FakeEngine: TransferEngine, @unchecked Sendable {
    // Every stored property is guarded by `lock`: the core calls in on its queue, the
    // test reads from the test thread.
    private let lock = NSLock()
    private var handler: (@Sendable (EngineEvent) -> Void)?
    private var _started: [EngineRequest] = []
    private var _stopped: [TransferID] = []
    private var _limits: [(id: TransferID, bps: UInt64)] = []
    private var _shutDown = false

    func setEventHandler(_ handler: @escaping @Sendable (EngineEvent) -> Void) {
        lock.lock(); defer { lock.unlock() }
        self.handler = handler
    }
    func start(_ request: EngineRequest) {
        lock.lock(); defer { lock.unlock() }
        _started.append(request)
    }
    func stop(_ id: TransferID) {
        lock.lock(); defer { lock.unlock() }
        _stopped.append(id)
    }
    func setSpeedLimit(_ id: TransferID, bytesPerSecond: UInt64) {
        lock.lock(); defer { lock.unlock() }
        _limits.append((id, bytesPerSecond))
    }
    func shutdown() {
        lock.lock(); defer { lock.unlock() }
        _shutDown = true
    }

    var started: [EngineRequest] { lock.lock(); defer { lock.unlock() }; return _started }
    var stopped: [TransferID] { lock.lock(); defer { lock.unlock() }; return _stopped }
    var limits: [(id: TransferID, bps: UInt64)] { lock.lock(); defer { lock.unlock() }; return _limits }
    var isShutDown: Bool { lock.lock(); defer { lock.unlock() }; return _shutDown }
    var startedIDs: [TransferID] { started.map(\.id) }

    /// The latest request for `id`.
    func lastRequest(_ id: TransferID) -> EngineRequest? { started.last { $0.id == id } }

    /// Delivers an event the way the real engine does (the core hops onto its queue).
    func emit(_ event: EngineEvent) {
        lock.lock()
        let handler = self.handler
        lock.unlock()
        handler?(event)
    }
}

/// A clock the test moves by hand.
final class FakeClock: @unchecked Sendable {
    // Read on the core's queue, written by the test between queue.sync calls.
    private let lock = NSLock()
    private var value: UInt64
    init(_ start: UInt64 = 1_700_000_000_000_000) { value = start }
    var now: UInt64 { lock.lock(); defer { lock.unlock() }; return value }
    func advance(seconds: Double) {
        lock.lock(); defer { lock.unlock() }
        value += UInt64(seconds * 1_000_000)
    }
}

/// Free space as the test says: nil (unknown) unless set.
final class FakeDisk: @unchecked Sendable {
    // Read on the core's queue, written by the test between queue.sync calls.
    private let lock = NSLock()
    private var bytes: Int64?
    private var _asked: [String] = []
    init(free: Int64? = nil) { bytes = free }
    func free(_ path: String) -> Int64? {
        lock.lock(); defer { lock.unlock() }
        _asked.append(path)
        return bytes
    }
    func set(free: Int64?) {
        lock.lock(); defer { lock.unlock() }
        bytes = free
    }
    /// The directories the core asked about.
    var asked: [String] { lock.lock(); defer { lock.unlock() }; return _asked }
}
