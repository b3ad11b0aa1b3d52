import Dispatch
import Foundation

/// A thread-safe FIFO: bus handlers put values in (on their queue), tests take
/// them out with a bounded wait.
public final class Mailbox<T: Sendable>: @unchecked Sendable {
    public init() {}

    // `@unchecked Sendable`: `items`, `waiters` and `nextID` are only touched under `lock`.
    private let lock = NSLock()
    private var items: [T] = []
    private var waiters: [(id: Int, continuation: CheckedContinuation<T, Error>)] = []
    private var nextID = 0

    public func put(_ value: T) {
        lock.lock()
        if !waiters.isEmpty {
            let w = waiters.removeFirst()
            lock.unlock()
            w.continuation.resume(returning: value)
            return
        }
        items.append(value)
        lock.unlock()
    }

    /// The next value, waiting at most `timeout` seconds for it.
    public func next(timeout: TimeInterval = 5, _ what: String = "a value") async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, Error>) in
            lock.lock()
            if !items.isEmpty {
                let value = items.removeFirst()
                lock.unlock()
                c.resume(returning: value)
                return
            }
            let id = nextID
            nextID += 1
            waiters.append((id, c))
            lock.unlock()
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                lock.lock()
                guard let i = waiters.firstIndex(where: { $0.id == id }) else {
                    lock.unlock()
                    return
                }
                let w = waiters.remove(at: i)
                lock.unlock()
                w.continuation.resume(throwing: TimedOut(description: "no \(what) within \(timeout) s"))
            }
        }
    }

    /// What has arrived and not been taken yet.
    public var queued: [T] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}

/// Runs `body` but gives up after `timeout` seconds. Unlike a task group, this
/// returns even when `body` never finishes (a continuation that is never
/// resumed), which is exactly the bug some tests look for.
public func withDeadline<T: Sendable>(_ timeout: TimeInterval, _ what: String,
                               _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let box = Mailbox<Result<T, Error>>()
    Task {
        do { box.put(.success(try await body())) } catch { box.put(.failure(error)) }
    }
    return try await box.next(timeout: timeout, what).get()
}

