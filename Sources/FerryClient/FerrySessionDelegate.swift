import Foundation

/// Receives a session's events, as `URLSessionDownloadDelegate` does. Every method
/// has an empty default. Calls come one at a time, in the order the service sent
/// the events: on the session's `delegateQueue` when it was given one, else on a
/// serial queue of the session's own (not the main thread).
///
/// Events that happened while the app was away (completions the service kept for
/// it) are delivered when the session attaches, oldest first, before any new one;
/// each is acknowledged to the service once this delegate has returned from it, so
/// it is delivered once.
///
/// For an app whose state lives on an actor (the main actor), which these
/// synchronous methods cannot reach in order, ``FerrySessionEvents`` is a delegate to
/// read as an `AsyncSequence` from that actor.
public protocol FerrySessionDelegate: AnyObject, Sendable {
    /// A download wrote data (`Progress`).
    func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didWriteData bytesWritten: Int64,
                      totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)
    /// A download picked up from a partial file at `fileOffset`.
    func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didResumeAtOffset fileOffset: Int64,
                      expectedTotalBytes: Int64)
    /// A download is complete, verified and in its final place, `location` (it stays there).
    func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL)
    /// An upload sent data.
    func ferrySession(_ session: FerrySession, task: FerryTask, didSendBodyData bytesSent: Int64,
                      totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    /// The task ended: `error` is nil on success. Always the task's last event.
    func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?)
    /// The events the service kept for the session while the app was away (or the
    /// service was restarting) were all delivered, each method above having returned:
    /// `urlSessionDidFinishEvents(forBackgroundURLSession:)`'s meaning. Called after the
    /// session attaches (when it is made, and again after the service came back) if
    /// there was at least one such event.
    func ferrySessionDidFinishEvents(forBackgroundSession session: FerrySession)
    /// The session has nothing queued, waiting or running any more, and some task
    /// ended since it last was (the session's `AllFinished`; after the events that led
    /// there were delivered); also after the kept events, when nothing is left to run.
    /// (Before, this was `ferrySessionDidFinishEvents(_:)`, a name URLSession gives
    /// another meaning.)
    func ferrySessionDidBecomeIdle(_ session: FerrySession)
}

extension FerrySessionDelegate {
    public func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didWriteData bytesWritten: Int64,
                             totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {}
    public func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didResumeAtOffset fileOffset: Int64,
                             expectedTotalBytes: Int64) {}
    public func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL) {}
    public func ferrySession(_ session: FerrySession, task: FerryTask, didSendBodyData bytesSent: Int64,
                             totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
    public func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {}
    public func ferrySessionDidFinishEvents(forBackgroundSession session: FerrySession) {}
    public func ferrySessionDidBecomeIdle(_ session: FerrySession) {}
}
