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
///
/// A pthread of its own, joined: the join orders the thread's write of the result
/// before the read here, so nothing is shared between threads without it.
public func withUnblockedSignals<T>(_ body: @escaping () throws -> T) throws -> T {
    var result: Result<T, Error>?
    let job = ThreadJob { result = Result { try body() } }
    var thread = pthread_t()
    let context = Unmanaged.passRetained(job).toOpaque()
    let rc = pthread_create(&thread, nil, { context in
        let job = Unmanaged<ThreadJob>.fromOpaque(context!).takeRetainedValue()
        var none = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, nil)
        job.run()
        return nil
    }, context)
    guard rc == 0 else {
        Unmanaged<ThreadJob>.fromOpaque(context).release()
        throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EAGAIN)
    }
    pthread_join(thread, nil)
    return try result!.get()
}

/// The work a signal-unblocked thread runs, handed to it as its start argument.
private final class ThreadJob {
    let run: () -> Void
    init(_ run: @escaping () -> Void) { self.run = run }
}
