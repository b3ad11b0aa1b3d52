import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a new thread whose signal mask is empty, waits for it, and
/// returns its result (or rethrows its error).
///
/// A child process inherits the signal mask of the thread that spawns it, and the
/// test runner's threads (Dispatch, Swift concurrency) block nearly all signals: a
/// child spawned from one of them ignores SIGTERM, and so do the services a bus
/// started that way activates. Start children inside this.
public func withUnblockedSignals<T>(_ body: @escaping () throws -> T) throws -> T {
    let box = ThreadResult<T>()
    let done = DispatchSemaphore(value: 0)
    // Runs on the new thread only while the caller waits for it: never at the same time.
    nonisolated(unsafe) let body = body
    let thread = Thread {
        var none = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, nil)
        box.result = Result { try body() }
        done.signal()
    }
    thread.start()
    done.wait()
    return try box.result!.get()
}

/// `@unchecked Sendable`: written by the thread before it signals the semaphore
/// the reader waits on.
private final class ThreadResult<T>: @unchecked Sendable {
    var result: Result<T, Error>?
}
