import Foundation

/// One of a session's events, as ``FerrySessionDelegate`` hears them, for a reader of
/// ``FerrySessionEvents``.
public enum FerrySessionEvent: Sendable, Equatable {
    /// A download wrote data.
    case wroteData(FerryTask, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)
    /// An upload sent data.
    case sentBodyData(FerryTask, bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    /// A download picked up from a partial file at `fileOffset`.
    case resumedAtOffset(FerryTask, fileOffset: Int64, expectedTotalBytes: Int64)
    /// A download is complete, verified and in its final place.
    case finishedDownloading(FerryTask, location: URL)
    /// The task ended: `error` is nil on success. Always the task's last event.
    case completed(FerryTask, error: FerryError?)
    /// The events kept for the session while the app was away were all delivered
    /// (``FerrySessionDelegate/ferrySessionDidFinishEvents(forBackgroundSession:)``).
    case finishedBackgroundEvents
    /// The session has nothing queued, waiting or running any more
    /// (``FerrySessionDelegate/ferrySessionDidBecomeIdle(_:)``; this was `.finishedEvents`).
    case becameIdle
}

/// A session's events as an `AsyncSequence`: give one as the delegate of one session
/// and read it from any actor, the main actor included, in the order the service sent
/// the events. For an app whose state lives on an actor, which a delegate's
/// synchronous, nonisolated methods cannot reach in order:
///
/// ```swift
/// let events = FerrySessionEvents()
/// let session = FerrySession(configuration: .background(identifier: "com.example.App"), delegate: events)
/// Task { @MainActor in
///     for await event in events {
///         if case .completed(let task, let error) = event { model.ended(task.id, error) }
///     }
/// }
/// ```
///
/// Each iteration (`for await`) is a reader of its own, and all readers see the same
/// events in the same order. While no one reads (before the first reader, or between
/// a view's reader going and the next coming), the events wait for the next reader, but
/// for progress, of which only the newest matters. A completion is acknowledged to the
/// service once a reader has taken it: one the app never read (it quit first) comes
/// again in its next run. The sequence ends when the session is detached or
/// invalidated.
public final class FerrySessionEvents: FerrySessionDelegate, AsyncSequence, @unchecked Sendable {
    public typealias Element = FerrySessionEvent

    /// An event and, for a completion, its serial (acknowledged once a reader took it).
    struct Delivery: Sendable {
        let event: FerrySessionEvent
        let serial: UInt64?
    }

    // Under `lock`.
    private let lock = NSLock()
    private var waiting: [Delivery] = []
    private var readers = StreamReaders<AsyncStream<Delivery>.Continuation>()
    private var ended = false
    /// The session's: a reader took the completion of this serial.
    private var onTaken: (@Sendable (UInt64) -> Void)?

    public init() {}

    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncStream<Delivery>.Iterator
        let owner: FerrySessionEvents

        public mutating func next() async -> FerrySessionEvent? {
            guard let d = await base.next() else { return nil }
            if let serial = d.serial { owner.taken(serial) }
            return d.event
        }
    }

    public func makeAsyncIterator() -> Iterator {
        let (stream, continuation) = AsyncStream.makeStream(of: Delivery.self, bufferingPolicy: .unbounded)
        lock.lock()
        for d in waiting { continuation.yield(d) }
        waiting = []
        if ended {
            lock.unlock()
            continuation.finish()
        } else {
            let key = readers.add(continuation)
            lock.unlock()
            continuation.onTermination = { [weak self] _ in self?.readerLeft(key) }
        }
        return Iterator(base: stream.makeAsyncIterator(), owner: self)
    }

    private func readerLeft(_ key: Int) { lock.withLock { readers.remove(key) } }

    private func taken(_ serial: UInt64) { lock.withLock { onTaken }?(serial) }

    /// Hands `event` to every reader, or keeps it for the next (progress aside). Yields
    /// under the lock, so that all readers see the same order (a yield never ends a
    /// stream, so it never runs `onTermination`, which takes the lock).
    private func send(_ event: FerrySessionEvent, serial: UInt64? = nil) {
        lock.withLock {
            let all = readers.all
            guard !all.isEmpty else {
                switch event {
                case .wroteData, .sentBodyData: break // superseded by the next; the task's counts stay readable
                default: waiting.append(Delivery(event: event, serial: serial))
                }
                return
            }
            for c in all { c.yield(Delivery(event: event, serial: serial)) }
        }
    }

    // MARK: The session's side

    /// Set when the session is made with this as its delegate.
    func connect(onTaken: @escaping @Sendable (UInt64) -> Void) { lock.withLock { self.onTaken = onTaken } }

    /// A completion, with the serial of its event.
    func completed(_ task: FerryTask, error: FerryError?, serial: UInt64) {
        send(.completed(task, error: error), serial: serial)
    }

    /// The session was detached or invalidated: the readers end (after what waits).
    func sessionEnded() {
        let all: [AsyncStream<Delivery>.Continuation] = lock.withLock {
            ended = true
            return readers.takeAll()
        }
        for c in all { c.finish() }
    }

    // MARK: FerrySessionDelegate

    public func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didWriteData bytesWritten: Int64,
                             totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        send(.wroteData(downloadTask, bytesWritten: bytesWritten, totalBytesWritten: totalBytesWritten,
                        totalBytesExpectedToWrite: totalBytesExpectedToWrite))
    }

    public func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didResumeAtOffset fileOffset: Int64,
                             expectedTotalBytes: Int64) {
        send(.resumedAtOffset(downloadTask, fileOffset: fileOffset, expectedTotalBytes: expectedTotalBytes))
    }

    public func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL) {
        send(.finishedDownloading(downloadTask, location: location))
    }

    public func ferrySession(_ session: FerrySession, task: FerryTask, didSendBodyData bytesSent: Int64,
                             totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        send(.sentBodyData(task, bytesSent: bytesSent, totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend))
    }

    /// A completion handed on by another delegate. (The session this is the delegate
    /// of hands its completions with their serials, acknowledged once read.)
    public func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
        send(.completed(task, error: error))
    }

    public func ferrySessionDidFinishEvents(forBackgroundSession session: FerrySession) {
        send(.finishedBackgroundEvents)
    }

    public func ferrySessionDidBecomeIdle(_ session: FerrySession) {
        send(.becameIdle)
    }
}
