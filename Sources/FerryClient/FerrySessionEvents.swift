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
    /// The session has nothing queued, waiting or running any more.
    case finishedEvents
}

/// A session's events as an `AsyncSequence`: give one as the session's delegate and
/// read it from any actor, the main actor included, in the order the service sent the
/// events. For an app whose state lives on an actor, which a delegate's synchronous,
/// nonisolated methods cannot reach in order:
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
/// What the session delivers before anyone reads (the events kept while the app was
/// away, delivered when it attaches) waits for the first reader, but for progress
/// events, which only the newest matter of. Each iteration (`for await`) is a reader
/// of its own: the first gets what waited and what comes next, later ones what comes
/// after they start; a reader whose task is cancelled stops, the others go on. An
/// event counts as delivered (and is acknowledged to the service) once it is handed
/// to the readers, or kept for the first one.
public final class FerrySessionEvents: FerrySessionDelegate, AsyncSequence, @unchecked Sendable {
    public typealias Element = FerrySessionEvent

    // Under `lock`.
    private let lock = NSLock()
    private var waiting: [FerrySessionEvent] = []
    private var hadReader = false
    private var readers: [Int: AsyncStream<FerrySessionEvent>.Continuation] = [:]
    private var nextReader = 0

    public init() {}

    public func makeAsyncIterator() -> AsyncStream<FerrySessionEvent>.Iterator {
        let (stream, continuation) = AsyncStream.makeStream(of: FerrySessionEvent.self, bufferingPolicy: .unbounded)
        lock.lock()
        if !hadReader {
            hadReader = true
            for e in waiting { continuation.yield(e) }
            waiting = []
        }
        let key = nextReader
        nextReader += 1
        readers[key] = continuation
        lock.unlock()
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.lock.withLock { _ = self.readers.removeValue(forKey: key) }
        }
        return stream.makeAsyncIterator()
    }

    private func send(_ event: FerrySessionEvent) {
        let now: [AsyncStream<FerrySessionEvent>.Continuation] = lock.withLock {
            guard hadReader else {
                switch event {
                case .wroteData, .sentBodyData: break // superseded by the next; the task's own counts stay readable
                default: waiting.append(event)
                }
                return []
            }
            return Array(readers.values)
        }
        for c in now { c.yield(event) }
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

    public func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
        send(.completed(task, error: error))
    }

    public func ferrySessionDidFinishEvents(_ session: FerrySession) {
        send(.finishedEvents)
    }
}
