import Foundation

/// Where a session calls its delegate. Without a queue of the app's, on the session's
/// own serial queue, as it hands the events (the call returns before the next event is
/// handled). With one (`FerrySession(configuration:delegate:delegateQueue:)`), as
/// operations on that queue, one at a time and in order even when the queue runs
/// several operations at once: the next is added once the one before has returned.
final class DelegateCalls: @unchecked Sendable {
    /// The app's queue; nil: the session's own.
    let operationQueue: OperationQueue?

    private let lock = NSLock()
    /// Calls not started yet, oldest first; under `lock`.
    private var waiting: [@Sendable () -> Void] = []
    /// An operation is on `operationQueue` (or about to be); under `lock`.
    private var running = false

    init(operationQueue: OperationQueue?) {
        self.operationQueue = operationQueue
    }

    /// Calls `body` (on the app's queue, after every call before it), then `done`, on
    /// the same thread once `body` returned (a completion is acknowledged only then).
    func run(_ body: @escaping @Sendable () -> Void, then done: (@Sendable () -> Void)? = nil) {
        guard let queue = operationQueue else {
            body()
            done?()
            return
        }
        let start: Bool = lock.withLock {
            waiting.append { body(); done?() }
            if running { return false }
            running = true
            return true
        }
        if start { queue.addOperation { self.next() } }
    }

    /// On the app's queue: the oldest waiting call, then the next one's operation.
    private func next() {
        let call: (@Sendable () -> Void)? = lock.withLock { waiting.isEmpty ? nil : waiting.removeFirst() }
        call?()
        let more: Bool = lock.withLock {
            if waiting.isEmpty { running = false }
            return !waiting.isEmpty
        }
        if more, let queue = operationQueue { queue.addOperation { self.next() } }
    }
}
