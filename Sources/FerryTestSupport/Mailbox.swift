import Dispatch
import Foundation
import Synchronization

/// A thread-safe FIFO: bus handlers put values in (on their queue), tests take
/// them out with a bounded wait.
public final class Mailbox<T: Sendable>: Sendable {
    public init() {}

    private struct State {
        var items: [T] = []
        var waiters: [(id: Int, continuation: CheckedContinuation<T, Error>)] = []
        var nextID = 0
    }
    private let state = Mutex(State())

    public func put(_ value: T) {
        let waiter = state.withLock { state -> CheckedContinuation<T, Error>? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst().continuation }
            state.items.append(value)
            return nil
        }
        waiter?.resume(returning: value)
    }

    /// The next value, waiting at most `timeout` seconds for it.
    public func next(timeout: TimeInterval = 5, _ what: String = "a value") async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, Error>) in
            let (value, id) = state.withLock { state -> (T?, Int) in
                if !state.items.isEmpty { return (state.items.removeFirst(), 0) }
                let id = state.nextID
                state.nextID += 1
                state.waiters.append((id, c))
                return (nil, id)
            }
            if let value { return c.resume(returning: value) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                let waiter = state.withLock { state -> CheckedContinuation<T, Error>? in
                    guard let i = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.waiters.remove(at: i).continuation
                }
                waiter?.resume(throwing: TimedOut(description: "no \(what) within \(timeout) s"))
            }
        }
    }

    /// What has arrived and not been taken yet.
    public var queued: [T] {
        state.withLock { $0.items }
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

