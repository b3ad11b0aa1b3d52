@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

/// What an iOS developer expects of FerryClient from `URLSession`, against the real
/// ferryd on a private bus: a task read without a round trip (state, counts, response,
/// `Progress`), a delegate queue of the app's choosing, tasks made suspended that
/// `resume()` starts, and callbacks whose names mean what URLSession's mean.
final class FerryClientURLSessionTests: FerryTestCase {
    typealias Recorder = FerryClientTests.Recorder

    func configuration(_ identifier: String) -> FerrySession.Configuration {
        var c = FerrySession.Configuration.background(identifier: identifier)
        c.busAddress = bus.address
        return c
    }

    /// Notes, in the delegate's completion, what the task says of itself right then.
    final class EndWatcher: FerrySessionDelegate, @unchecked Sendable {
        let ends = Mailbox<String>()
        func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
            ends.put("\(task.id) \(task.state) \(task.countOfBytesReceived)/\(task.countOfBytesExpectedToReceive) "
                + "\(task.progress.fractionCompleted)")
        }
    }

    /// The task as last heard, read without a call: it follows each `Progress`, says
    /// `.completed` (bytes, `Progress` at 1, the server's status and the file's name)
    /// by the time the delegate and `value` hear of the end, says `.failed` with the
    /// error and status of a failure, and is still readable once the session left the bus.
    func testATaskIsReadWithoutARoundTrip() async throws {
        let body = serve("/u/named.bin", size: 400_000, contentDisposition: "attachment; filename=\"report.pdf\"")
        server.set(.slow(bytesPerSecond: 2 * 1024 * 1024), on: "/u/named.bin")
        let watcher = EndWatcher()
        let session = FerrySession(configuration: configuration("org.example.Cached"), delegate: watcher)
        let task = try await session.download(from: URL(string: server.url("/u/named.bin"))!,
                                              to: URL(fileURLWithPath: work, isDirectory: true))
        XCTAssertEqual(task.url?.absoluteString, server.url("/u/named.bin"))
        XCTAssertTrue([.queued, .running].contains(task.state), "\(task.state)")
        var progressSeen = 0
        for try await event in task.events {
            guard case .progress(_, let total, let expected) = event, expected > 0 else { continue }
            // The cache took the signal before the event was told.
            XCTAssertGreaterThanOrEqual(task.countOfBytesReceived, total)
            XCTAssertEqual(task.countOfBytesExpectedToReceive, Int64(body.count))
            XCTAssertEqual(task.progress.totalUnitCount, Int64(body.count))
            XCTAssertGreaterThanOrEqual(task.progress.completedUnitCount, total)
            progressSeen += 1
        }
        XCTAssertGreaterThan(progressSeen, 0)
        let end = try await watcher.ends.next(timeout: 20, "the delegate's completion")
        XCTAssertEqual(end, "\(task.id) completed \(body.count)/\(body.count) 1.0", "what the delegate read of the task")
        _ = try await task.value
        XCTAssertEqual(task.state, .completed)
        XCTAssertEqual(task.progress.fractionCompleted, 1.0)
        XCTAssertEqual(task.response?.statusCode, 200)
        XCTAssertEqual(task.response?.suggestedFilename, "report.pdf", "the name the server gave")
        XCTAssertEqual(task.destination?.path, work + "/report.pdf")
        XCTAssertNil(task.error)
        assertFile(work + "/report.pdf", equals: body)

        let missing = try await session.download(from: URL(string: server.url("/u/missing.bin"))!,
                                                 to: URL(fileURLWithPath: work + "/missing.bin"))
        _ = try? await missing.value
        XCTAssertEqual(missing.state, .failed)
        XCTAssertEqual(missing.response?.statusCode, 404)
        XCTAssertEqual(missing.error?.httpStatus, 404, "\(String(describing: missing.error))")

        // No bus needed: the session is gone, the task still reads.
        session.detach()
        XCTAssertEqual(task.state, .completed)
        XCTAssertEqual(task.countOfBytesReceived, Int64(body.count))
        XCTAssertEqual(task.cachedSnapshot.bytesTransferred, Int64(body.count))
    }

    /// Notes each call's queue and order.
    final class QueueWatcher: FerrySessionDelegate, @unchecked Sendable {
        let expected: OperationQueue?
        let lock = NSLock()
        var calls: [String] = []
        var offQueue: [String] = []
        var inside = 0
        var overlapped = false
        let done = Mailbox<Void>()
        init(_ expected: OperationQueue?) { self.expected = expected }

        func note(_ s: String) {
            let current = OperationQueue.current
            lock.withLock {
                inside += 1
                if inside > 1 { overlapped = true }
                calls.append(s)
                if current !== expected { offQueue.append(s) }
            }
            // A slow delegate: the next call must still wait for this one.
            usleep(2_000)
            lock.withLock { inside -= 1 }
        }
        func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didWriteData bytesWritten: Int64,
                          totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
            note("progress \(totalBytesWritten)")
        }
        func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL) {
            note("finished")
        }
        func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
            note("completed")
            done.put(())
        }
    }

    /// `delegateQueue`: every delegate call runs on the app's `OperationQueue`, in the
    /// service's order and one at a time even though the queue runs four at once, and
    /// the completion is acknowledged after it; without one, they run elsewhere.
    func testTheDelegateRunsOnTheQueueGiven() async throws {
        serve("/u/queued.bin", size: 600_000)
        server.set(.slow(bytesPerSecond: 1024 * 1024), on: "/u/queued.bin")
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let watcher = QueueWatcher(queue)
        let session = FerrySession(configuration: configuration("org.example.Queued"), delegate: watcher, delegateQueue: queue)
        defer { session.detach() }
        XCTAssertTrue(session.delegateQueue === queue)
        let task = try await session.download(from: URL(string: server.url("/u/queued.bin"))!,
                                              to: URL(fileURLWithPath: work + "/queued.bin"))
        try await watcher.done.next(timeout: 30, "the completion on the app's queue")
        let (calls, off, overlapped) = watcher.lock.withLock { (watcher.calls, watcher.offQueue, watcher.overlapped) }
        XCTAssertEqual(off, [], "calls off the queue given")
        XCTAssertFalse(overlapped, "two delegate calls at once")
        XCTAssertEqual(Array(calls.suffix(2)), ["finished", "completed"], "\(calls)")
        let counts = calls.compactMap { $0.hasPrefix("progress ") ? Int($0.dropFirst(9)) : nil }
        XCTAssertGreaterThan(counts.count, 1)
        XCTAssertEqual(counts, counts.sorted(), "progress in the service's order")
        _ = try await task.value
        var pending = try await client.openSession("org.example.Queued").pendingEvents().count
        let deadline = Date().addingTimeInterval(10)
        while pending != 0, Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
            pending = try await client.openSession("org.example.Queued").pendingEvents().count
        }
        XCTAssertEqual(pending, 0, "acknowledged once the delegate returned")

        // Without a queue: the session's own.
        serve("/u/own.bin", size: 10_000)
        let own = QueueWatcher(nil)
        let plain = FerrySession(configuration: configuration("org.example.OwnQueue"), delegate: own)
        defer { plain.detach() }
        XCTAssertNil(plain.delegateQueue)
        _ = try await plain.download(from: URL(string: server.url("/u/own.bin"))!, to: URL(fileURLWithPath: work + "/own.bin"))
        try await own.done.next(timeout: 20, "the completion")
        XCTAssertEqual(own.lock.withLock { own.offQueue }, [], "no OperationQueue: called on the session's dispatch queue")
    }

    /// `downloadTask(with:)` makes the task suspended, as URLSession's does: it is
    /// paused and the server hears nothing (not even while a later download runs and
    /// ends) until `resume()`, after which it downloads.
    func testASuspendedTaskAsksNothingUntilResumed() async throws {
        let held = serve("/u/held.bin", size: 30_000, seed: 3)
        serve("/u/other.bin", size: 10_000, seed: 4)
        let session = FerrySession(configuration: configuration("org.example.Suspended"))
        defer { session.detach() }
        let task = try await session.downloadTask(with: URL(string: server.url("/u/held.bin"))!,
                                                  to: URL(fileURLWithPath: work + "/held.bin"))
        XCTAssertEqual(task.state, .paused)
        // A download queued after it runs to its end; the suspended one would have
        // started before it.
        let other = try await session.download(from: URL(string: server.url("/u/other.bin"))!,
                                               to: URL(fileURLWithPath: work + "/other.bin"))
        _ = try await withDeadline(20, "the other download") { try await other.value }
        XCTAssertEqual(server.requests(for: "/u/held.bin").count, 0, "a suspended task asked the server")
        XCTAssertEqual(task.state, .paused)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/held.bin"))

        try await task.resume()
        XCTAssertNotEqual(task.state, .paused, "resume() returned: the task is queued (or further)")
        let result = try await withDeadline(20, "the resumed download") { try await task.value }
        XCTAssertEqual(result.location?.path, work + "/held.bin")
        assertFile(work + "/held.bin", equals: held)
        XCTAssertEqual(server.requests(for: "/u/held.bin").count, 1)
    }

    /// The names mean URLSession's: `ferrySessionDidFinishEvents(forBackgroundSession:)`
    /// (and `.finishedBackgroundEvents`) once what was kept while the app was away is
    /// delivered, after it, and never for live events; `ferrySessionDidBecomeIdle`
    /// (and `.becameIdle`) when nothing runs any more.
    func testKeptEventsAndIdleAreToldApart() async throws {
        serve("/u/live.bin", size: 20_000, seed: 2)
        let identifier = "org.example.Names"
        let away = try await completedAfterTheAppLeft(FerrySession(configuration: configuration(identifier)), "away.bin", seed: 1)

        let recorder = Recorder()
        let again = FerrySession(configuration: configuration(identifier), delegate: recorder)
        defer { again.detach() }
        try await again.attach()
        try await recorder.wait(for: "idle")
        XCTAssertEqual(recorder.recorded.filter { !$0.hasPrefix("progress") },
                       ["finished \(away.id) \(work!)/away.bin", "completed \(away.id) ok", "kept", "idle"])

        let live = try await again.download(from: URL(string: server.url("/u/live.bin"))!, to: URL(fileURLWithPath: work + "/live.bin"))
        _ = try await live.value
        try await recorder.wait(for: "completed \(live.id)")
        let deadline = Date().addingTimeInterval(20)
        while recorder.recorded.filter({ $0 == "idle" }).count < 2 {
            guard Date() < deadline else { return XCTFail("no second idle: \(recorder.recorded)") }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTAssertEqual(recorder.recorded.filter { $0 == "kept" }.count, 1, "a live event is not a kept one: \(recorder.recorded)")
        XCTAssertEqual(recorder.recorded.last, "idle")

        // The same told apart to a reader of FerrySessionEvents.
        let second = try await completedAfterTheAppLeft(again, "away2.bin", seed: 5)
        let events = FerrySessionEvents()
        let third = FerrySession(configuration: configuration(identifier), delegate: events)
        defer { third.detach() }
        let seen: [String] = try await withDeadline(20, "the kept events and idle") {
            var seen: [String] = []
            for await e in events {
                switch e {
                case .completed(let t, _): seen.append("completed \(t.id)")
                case .finishedBackgroundEvents: seen.append("kept")
                case .becameIdle: seen.append("idle"); return seen
                default: continue
                }
            }
            return seen
        }
        XCTAssertEqual(seen, ["completed \(second.id)", "kept", "idle"])
    }

    /// Serves `/u/` + `name` (40,000 bytes, slow enough to end after the app left),
    /// downloads it in `session` to `work` and detaches; returns once it has completed
    /// and its batch has ended.
    private func completedAfterTheAppLeft(_ session: FerrySession, _ name: String, seed: UInt64) async throws -> FerryTask {
        serve("/u/" + name, size: 40_000, seed: seed)
        server.set(.slow(bytesPerSecond: 64 * 1024), on: "/u/" + name)
        let task = try await session.download(from: URL(string: server.url("/u/" + name))!, to: URL(fileURLWithPath: work + "/" + name))
        session.detach()
        try await signals.completedWithItsBatch("/org/ferry/Ferry1/transfer/\(task.id)")
        return task
    }
}
