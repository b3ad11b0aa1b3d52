@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

/// FerryClient's tasks: directory destinations, many readers of one task's events, pause with resume data.
extension FerryClientTests {
    /// A directory URL is a directory: an existing one gets the file under the URL's
    /// name; one that does not exist is refused, not made a file of that name.
    func testADirectoryURLIsTakenForADirectory() async throws {
        let body = serve("/c/into.bin", size: 1_000)
        let session = FerrySession(configuration: configuration("org.example.Directories"))
        defer { session.detach() }
        let missing = URL(fileURLWithPath: work + "/not-yet", isDirectory: true)
        do {
            let t = try await session.download(from: URL(string: server.url("/c/into.bin"))!, to: missing)
            XCTFail("queued into a directory that does not exist: \(t)")
        } catch let error as FerryError {
            guard case .invalidDestination(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("not-yet"), message)
            XCTAssertEqual((error as Error).localizedDescription, message, "what an app shows is the service's message")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing.path), "no file made of the directory's name")
        try FileManager.default.createDirectory(atPath: work + "/into", withIntermediateDirectories: true)
        let t = try await session.download(from: URL(string: server.url("/c/into.bin"))!,
                                           to: URL(fileURLWithPath: work + "/into", isDirectory: true))
        let r = try await withDeadline(20, "the download's end") { try await t.value }
        XCTAssertEqual(r.location?.path, work + "/into/into.bin")
        assertFile(work + "/into/into.bin", equals: body)
    }

    /// Any number of readers follow a task's events, each from the run's start, and a
    /// reader that went away (its task cancelled) may read again.
    func testATasksEventsHaveManyReaders() async throws {
        let (body, session, task) = try await startSlowDownload("readers.bin", size: 400_000, bytesPerSecond: 400 * 1024,
                                                                app: "org.example.Readers")
        defer { session.detach() }
        @Sendable func readAll() async throws -> [FerryTaskEvent] {
            var seen: [FerryTaskEvent] = []
            for try await e in task.events { seen.append(e) }
            return seen
        }
        // One reader leaves once data moves; its stream ends, the task goes on.
        let progressed = Mailbox<Bool>()
        let leaving = Task {
            for try await e in task.events {
                if case .progress(_, let total, _) = e, total > 0 { progressed.put(true) }
            }
        }
        _ = try await progressed.next(timeout: 20, "progress")
        leaving.cancel()
        _ = await leaving.result
        // Two readers at once (the second read used to trap), and one after the first left.
        let (a, b) = try await withDeadline(30, "two readers' ends") {
            async let first = readAll()
            async let second = readAll()
            return try await (first, second)
        }
        for seen in [a, b] {
            XCTAssertEqual(seen.first, .stateChanged(.running), "from the run's start: \(seen)")
            XCTAssertTrue(seen.contains(.finished(location: URL(fileURLWithPath: work + "/readers.bin"))), "\(seen)")
            XCTAssertEqual(seen.last, .stateChanged(.completed), "\(seen)")
            guard case .progress(_, let total, _)? = seen.last(where: { if case .progress = $0 { return true } else { return false } }) else {
                return XCTFail("no progress: \(seen)")
            }
            XCTAssertEqual(total, Int64(body.count))
        }
        // A completed task's events come at once, and end.
        let after = try await withDeadline(5, "a completed task's events") { try await readAll() }
        XCTAssertEqual(after.last, .stateChanged(.completed))
        assertFile(work + "/readers.bin", equals: body)
    }

    /// pause() hands back resume data; resumeDownload(with:) continues from it to
    /// the same, complete file; the paused task can be pointed at a new URL.
    func testPauseResumeDataAndSetURL() async throws {
        let (body, session, task) = try await startSlowDownload("resumable.bin", size: 600_000, bytesPerSecond: 300 * 1024,
                                                                app: "org.example.Resume")
        defer { session.detach() }
        for try await event in task.events {
            if case .progress(_, let total, _) = event, total > 0 { break }
        }
        let data = try await task.pause()
        XCTAssertFalse(data.isEmpty, "the server has ranges and an ETag: resumable")
        let paused = try await task.snapshot()
        XCTAssertEqual(paused.state, .paused)
        XCTAssertTrue(paused.isResumable)
        server.set(.slow(bytesPerSecond: 8 * 1024 * 1024), on: "/c/resumable.bin")
        let again = try await session.resumeDownload(with: data)
        let done = try await again.value
        XCTAssertEqual(done.location?.path, work + "/resumable.bin")
        assertFile(work + "/resumable.bin", equals: body)
        do {
            _ = try await session.resumeDownload(with: Data("not resume data".utf8))
            XCTFail("garbage resume data accepted")
        } catch let e as FerryError {
            guard case .invalidResumeData = e else { return XCTFail("\(e)") }
        }

        serve("/c/moved.bin", size: 50_000, seed: 9)
        var options = DownloadOptions()
        options.startsSuspended = true
        let held = try await session.download(from: URL(string: server.url("/c/gone.bin"))!,
                                              to: URL(fileURLWithPath: work + "/moved.bin"), options: options)
        try await held.setURL(URL(string: server.url("/c/moved.bin"))!)
        XCTAssertEqual(held.url?.absoluteString, server.url("/c/moved.bin"))
        try await held.resume()
        let moved = try await held.value
        XCTAssertEqual(moved.location?.path, work + "/moved.bin")

        // A failed task resumed after its link was renewed runs again, and `value` and
        // `events` follow the new run to its end.
        serve("/c/renewed.bin", size: 40_000, seed: 10)
        let expired = try await session.download(from: URL(string: server.url("/c/expired.bin"))!,
                                                 to: URL(fileURLWithPath: work + "/renewed.bin"))
        do {
            let r = try await expired.value
            XCTFail("an absent file downloaded: \(r)")
        } catch let e as FerryError {
            guard case .http(let status, _) = e else { return XCTFail("\(e)") }
            XCTAssertEqual(status, 404)
        }
        try await expired.setURL(URL(string: server.url("/c/renewed.bin"))!)
        try await expired.resume()
        var states: [TransferState] = []
        for try await event in expired.events {
            if case .stateChanged(let s) = event { states.append(s) }
        }
        XCTAssertEqual(states.last, .completed, "\(states)")
        let renewed = try await withDeadline(20, "the resumed task's value") { try await expired.value }
        XCTAssertEqual(renewed.location?.path, work + "/renewed.bin")
    }
}
