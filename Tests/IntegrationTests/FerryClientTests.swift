@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// FerryClient's URLSession-style API against the real ferryd on a private bus.
/// (This file imports FerryClient only: `FerrySession` here is the library's.)
final class FerryClientTests: FerryTestCase {
    /// Records delegate calls in order.
    final class Recorder: FerrySessionDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private(set) var lines: [String] = []
        private var waiters: [(String, CheckedContinuation<Void, Never>)] = []

        func add(_ s: String) {
            lock.lock()
            lines.append(s)
            let ready = waiters.filter { w in lines.contains { $0.hasPrefix(w.0) } }
            waiters.removeAll { w in lines.contains { $0.hasPrefix(w.0) } }
            lock.unlock()
            for w in ready { w.1.resume() }
        }

        var recorded: [String] { lock.withLock { lines } }

        /// Waits (bounded) until a line starting with `prefix` was recorded.
        func wait(for prefix: String, timeout: TimeInterval = 20) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    await withCheckedContinuation { c in
                        self.lock.lock()
                        if self.lines.contains(where: { $0.hasPrefix(prefix) }) {
                            self.lock.unlock()
                            c.resume()
                        } else {
                            self.waiters.append((prefix, c))
                            self.lock.unlock()
                        }
                    }
                }
                group.addTask {
                    try await Task.sleep(nanoseconds: UInt64(timeout * 1e9))
                    throw TimedOut(description: "no delegate call '\(prefix)' in \(timeout) s; got \(self.recorded)")
                }
                try await group.next()
                group.cancelAll()
            }
        }

        func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL) {
            add("finished \(downloadTask.id) \(location.path)")
        }

        func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
            add("completed \(task.id) \(error.map { "\($0)" } ?? "ok")")
        }

        func ferrySessionDidBecomeIdle(_ session: FerrySession) { add("idle") }

        func ferrySessionDidFinishEvents(forBackgroundSession session: FerrySession) { add("kept") }

        func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didWriteData bytesWritten: Int64,
                          totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
            add("progress \(downloadTask.id) \(totalBytesWritten)/\(totalBytesExpectedToWrite)")
        }
    }

    /// Serves `/c/NAME` (`size` bytes) at `bytesPerSecond` and starts its download to
    /// `work/NAME` in a new session of `app`; the caller detaches the session.
    func startSlowDownload(_ name: String, size: Int, bytesPerSecond: Int, app: String,
                           delegate: FerrySessionDelegate? = nil) async throws -> ([UInt8], FerrySession, FerryTask) {
        let body = serve("/c/" + name, size: size)
        server.set(.slow(bytesPerSecond: bytesPerSecond), on: "/c/" + name)
        let session = FerrySession(configuration: configuration(app), delegate: delegate)
        do {
            let task = try await session.download(from: URL(string: server.url("/c/" + name))!,
                                                  to: URL(fileURLWithPath: work + "/" + name))
            return (body, session, task)
        } catch {
            session.detach()
            throw error
        }
    }

    func configuration(_ identifier: String = "org.example.ClientTests") -> FerrySession.Configuration {
        var c = FerrySession.Configuration.background(identifier: identifier)
        c.busAddress = bus.address
        return c
    }

    func pendingCount(_ identifier: String) async throws -> Int {
        try await client.openSession(identifier).pendingEvents().count
    }

    /// The session's pending events once none is left, or after `timeout` s those left.
    /// The library acknowledges on its own connection after the delegate returned, so
    /// this test's connection can ask before the acknowledgement has reached the service.
    func pendingCountOnceAcknowledged(_ identifier: String, timeout: TimeInterval = 10) async throws -> Int {
        var pending = try await pendingCount(identifier)
        let deadline = Date().addingTimeInterval(timeout)
        while pending != 0, Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
            pending = try await pendingCount(identifier)
        }
        return pending
    }

    /// A download through the delegate and through `task.value`/`task.events`;
    /// the delivered event is acknowledged.
    func testDownloadDeliversToDelegateAndTask() async throws {
        let body = serve("/c/one.bin", size: 100_000)
        let recorder = Recorder()
        let session = FerrySession(configuration: configuration(), delegate: recorder)
        defer { session.detach() }
        var options = DownloadOptions()
        options.sha256 = TestData.sha256Hex(body)
        options.description = "one"
        let task = try await session.download(from: URL(string: server.url("/c/one.bin"))!,
                                              to: URL(fileURLWithPath: work + "/one.bin"), options: options)
        var sawProgress = false
        var sawFinished: URL?
        var last: FerryTaskEvent?
        for try await event in task.events {
            switch event {
            case .progress(_, let total, let expected):
                sawProgress = true
                XCTAssertEqual(expected, Int64(body.count))
                XCTAssertLessThanOrEqual(total, expected)
            case .finished(let location): sawFinished = location
            default: break
            }
            last = event
        }
        XCTAssertTrue(sawProgress)
        XCTAssertEqual(sawFinished?.path, work + "/one.bin")
        XCTAssertEqual(last, .stateChanged(.completed), "a reader that stops at .completed has seen .finished")
        let result = try await task.value
        XCTAssertEqual(result.location?.path, work + "/one.bin")
        assertFile(work + "/one.bin", equals: body)
        try await recorder.wait(for: "idle")
        let lines = recorder.recorded.filter { !$0.hasPrefix("progress") }
        XCTAssertEqual(lines, ["finished \(task.id) \(work!)/one.bin", "completed \(task.id) ok", "idle"])
        let snapshot = try await task.snapshot()
        XCTAssertEqual(snapshot.state, .completed)
        XCTAssertEqual(snapshot.description, "one")
        XCTAssertEqual(snapshot.sha256, TestData.sha256Hex(body))
        let pending = try await pendingCountOnceAcknowledged("org.example.ClientTests")
        XCTAssertEqual(pending, 0, "delivered events are acknowledged")
    }

    /// `DownloadOptions.mirrors` and `.pieces` (v1.2) reach the service: a URL whose
    /// piece 0 is bad completes from its mirror, byte-exact.
    func testMirrorsAndPiecesFromTheLibrary() async throws {
        let body = serve("/c/main.bin", size: 1_000_000)
        serve("/c/mirror.bin", size: 1_000_000)
        server.set(.corruptByte(at: 10), on: "/c/main.bin")
        let session = FerrySession(configuration: configuration(), delegate: nil)
        defer { session.detach() }
        let length = 256 * 1024
        var options = DownloadOptions()
        options.mirrors = [URL(string: server.url("/c/mirror.bin"))!]
        options.pieces = .init(length: UInt64(length), sha256: stride(from: 0, to: body.count, by: length).map {
            TestData.sha256Hex(Array(body[$0..<min($0 + length, body.count)]))
        })
        let task = try await session.download(from: URL(string: server.url("/c/main.bin"))!,
                                              to: URL(fileURLWithPath: work + "/mp.bin"), options: options)
        let result = try await task.value
        XCTAssertEqual(result.location?.path, work + "/mp.bin")
        assertFile(work + "/mp.bin", equals: body)
        XCTAssertFalse(server.requests(for: "/c/mirror.bin").isEmpty, "the mirror was asked")
    }

    /// A session with `privateSignals` (v1.2): its signals come to it alone, addressed,
    /// and it takes them as the service's: the task reports progress and its end, the
    /// delegate hears of it, and the harness's client (a broadcast listener) hears nothing.
    func testAPrivateSessionHearsItsOwnSignals() async throws {
        let body = serve("/c/private.bin", size: 300_000)
        let recorder = Recorder()
        var c = configuration("org.example.Private")
        c.privateSignals = true
        let session = FerrySession(configuration: c, delegate: recorder)
        defer { session.detach() }
        let task = try await session.download(from: URL(string: server.url("/c/private.bin"))!,
                                              to: URL(fileURLWithPath: work + "/private.bin"))
        // Bounded: a client that drops its own private signals would wait forever.
        let (sawProgress, last) = try await withDeadline(20, "the task's events to their end") {
            var sawProgress = false
            var last: FerryTaskEvent?
            for try await event in task.events {
                if case .progress = event { sawProgress = true }
                last = event
            }
            return (sawProgress, last)
        }
        XCTAssertTrue(sawProgress, "no Progress reached the session's own client")
        XCTAssertEqual(last, .stateChanged(.completed))
        assertFile(work + "/private.bin", equals: body)
        try await recorder.wait(for: "idle")
        let stored = try await session.storedConfiguration()
        XCTAssertEqual(stored.privateSignals, true)
        let path = "/org/ferry/Ferry1/transfer/\(task.id)"
        _ = try await client.listSessions() // a round trip: ferryd's earlier signals have arrived
        XCTAssertEqual(signals.signals(path: path).map(\.description), [], "a broadcast listener heard a private session")
    }

    /// `downloadGroup` (v1.2): one call makes every download, a task for each item in
    /// order; the group's snapshot counts them as they end. A bad item makes none.
    func testADownloadGroupGivesATaskPerItem() async throws {
        let bodies = (0..<3).map { serve("/c/g\($0).bin", size: 20_000 + $0, seed: UInt64($0 + 3)) }
        let session = FerrySession(configuration: configuration("org.example.Grouped"))
        defer { session.detach() }
        let items = (0..<3).map { (url: URL(string: server.url("/c/g\($0).bin"))!,
                                   destination: Optional(URL(fileURLWithPath: work + "/g\($0).bin")), options: DownloadOptions()) }
        let group = try await session.downloadGroup(items, description: "three")
        XCTAssertEqual(group.tasks.count, 3)
        for (i, task) in group.tasks.enumerated() {
            let result = try await withDeadline(20, "task \(i)") { try await task.value }
            XCTAssertEqual(result.location?.path, work + "/g\(i).bin")
            assertFile(work + "/g\(i).bin", equals: bodies[i])
        }
        let path = "/org/ferry/Ferry1/group/\(group.id)"
        try await signals.wait("the group's Finished") { s in s.contains { $0.path == path && $0.member == "Finished" } }
        let snapshot = try await group.snapshot()
        XCTAssertEqual(snapshot.state, .completed)
        XCTAssertEqual(snapshot.succeeded, 3)
        XCTAssertEqual(snapshot.description, "three")
        XCTAssertEqual(snapshot.transferIDs, group.tasks.map(\.id))

        var bad = items
        bad[1].url = URL(string: "ftp://example.com/x")!
        do {
            _ = try await session.downloadGroup(bad)
            XCTFail("a group with an ftp URL was accepted")
        } catch let e as FerryError {
            XCTAssertTrue(e.message.hasPrefix("item 1: "), e.message)
        }
    }

    /// `configuration.onClientExit = .pause` (v1.2 `on-client-exit`): the service keeps it,
    /// and when the app's session lets go of its connection its running download pauses.
    func testOnClientExitPausesWhenTheAppLeaves() async throws {
        serve("/c/leaving.bin", size: stalledSize)
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: "/c/leaving.bin")
        var c = configuration("org.example.Leaving")
        c.onClientExit = .pause
        let session = FerrySession(configuration: c)
        let task = try await session.download(from: URL(string: server.url("/c/leaving.bin"))!,
                                              to: URL(fileURLWithPath: work + "/leaving.bin"))
        let seen = client.transfer(id: task.id)
        try await waitForState(seen, "running")
        let stored = try await session.storedConfiguration()
        XCTAssertEqual(stored.onClientExit, .pause)
        session.detach()
        try await waitForState(seen, "paused")
    }

    /// Nothing waits forever on a session that stopped following: `detach()` ends a
    /// task still running here with `detached` (the download goes on in the
    /// service); `finishTasksAndInvalidate()` keeps the session and delivers its tasks'
    /// ends, to the delegate and to `value`, even with the app's reference gone.
    func testTasksEndWhenTheSessionStopsFollowingThem() async throws {
        let body = serve("/c/slow.bin", size: 200_000)
        server.set(.stallAfter(bytes: 50_000, times: 1), on: "/c/slow.bin")
        let detached = FerrySession(configuration: configuration("org.example.Detached"))
        let held = try await detached.download(from: URL(string: server.url("/c/slow.bin"))!,
                                               to: URL(fileURLWithPath: work + "/held.bin"))
        detached.detach()
        do {
            let r = try await withDeadline(10, "the task of a detached session") { try await held.value }
            XCTFail("a detached session's running task ended with \(r)")
        } catch let e as FerryError {
            guard case .detached(let m) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(m.contains("detached"), m)
        }
        let info = try await client.transfer(id: held.id).info()
        XCTAssertNotEqual(info.state, "cancelled", "the transfer itself goes on")

        serve("/c/later.bin", size: 150_000)
        server.set(.stallAfter(bytes: 50_000, times: 1), on: "/c/later.bin")
        let recorder = Recorder()
        let namesBefore = try await busNames()
        var finishing: FerrySession? = FerrySession(configuration: configuration("org.example.Finishing"), delegate: recorder)
        let task = try await finishing!.download(from: URL(string: server.url("/c/later.bin"))!,
                                                 to: URL(fileURLWithPath: work + "/later.bin"))
        // The finishing session's own connection: what came on the bus since. (Another
        // connection may leave meanwhile, such as the detached session's: not this one.)
        let own = try await busNames().subtracting(namesBefore)
        XCTAssertFalse(own.isEmpty, "the session has a connection of its own")
        try await finishing!.finishTasksAndInvalidate()
        finishing = nil // the app lets go; the session lives until its task ends
        server.clearBehaviours(on: "/c/later.bin")
        // The stalled try fails after its request-timeout and is retried; or cancel the wait:
        try await client.transfer(id: task.id).pause()
        try await client.transfer(id: task.id).resume()
        let result = try await withDeadline(30, "the task after finishTasksAndInvalidate") { try await task.value }
        XCTAssertEqual(result.location?.path, work + "/later.bin")
        try await recorder.wait(for: "completed \(task.id) ok")
        // Then it lets go of itself and leaves the bus (its connection's name goes).
        var names = try await busNames()
        let deadline = Date().addingTimeInterval(10)
        while !names.isDisjoint(with: own), Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
            names = try await busNames()
        }
        XCTAssertTrue(names.isDisjoint(with: own), "the finished session's connection left the bus: \(own) in \(names)")
        _ = body
    }

    /// The unique names on the private bus now.
    func busNames() async throws -> Set<String> {
        let r = try await client.bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                          interface: "org.freedesktop.DBus", method: "ListNames")
        return Set((r.first?.arrayElements ?? []).compactMap(\.string).filter { $0.hasPrefix(":") })
    }

    /// Refusals and failures are typed `FerryError`s, the HTTP status included.
    func testErrorsAreTyped() async throws {
        let session = FerrySession(configuration: configuration())
        defer { session.detach() }
        do {
            _ = try await session.download(from: URL(string: "ftp://example.com/x")!)
            XCTFail("ftp accepted")
        } catch let e as FerryError {
            guard case .unsupportedScheme = e else { return XCTFail("\(e)") }
        }
        let task = try await session.download(from: URL(string: server.url("/c/missing"))!, to: URL(fileURLWithPath: work + "/missing"))
        do {
            _ = try await task.value
            XCTFail("a 404 succeeded")
        } catch let e as FerryError {
            XCTAssertEqual(e.httpStatus, 404, "\(e)")
        }
        let stopped = try await session.download(from: URL(string: server.url("/c/missing"))!, to: URL(fileURLWithPath: work + "/m2"),
                                                 options: { var o = DownloadOptions(); o.startsSuspended = true; return o }())
        XCTAssertEqual(stopped.state, .paused, "made suspended: paused as soon as it is handed out")
        do {
            try await stopped.remove()
            XCTFail("removing a paused task")
        } catch let e as FerryError {
            guard case .invalidState = e else { return XCTFail("\(e)") }
        }
    }

    /// An upload ends with the file it sent and the server's answer, the same whether
    /// its completion is heard live, replayed to a later run, or settled before it;
    /// the delegate is not told an upload "finished downloading".
    func testAnUploadEndsWithTheFileItSentAndTheServersAnswer() async throws {
        let answer = Data(#"{"id": 7}"#.utf8)
        server.set(.acceptUploads(status: 201, body: [UInt8](answer)), on: "/c/up")
        let file = work + "/photo.jpg"
        try Data(repeating: 0x5a, count: 30_000).write(to: URL(fileURLWithPath: file))
        let id = "org.example.Up"

        // Live.
        let recorder = Recorder()
        let session = FerrySession(configuration: configuration(id), delegate: recorder)
        let live = try await session.upload(file: URL(fileURLWithPath: file), to: URL(string: server.url("/c/up"))!)
        let r = try await withDeadline(20, "the upload") { try await live.value }
        XCTAssertEqual(r, FerryTaskResult(location: URL(fileURLWithPath: file), response: answer, bytes: 30_000))
        try await recorder.wait(for: "completed \(live.id) ok")
        XCTAssertFalse(recorder.recorded.contains { $0.hasPrefix("finished") }, "\(recorder.recorded)")
        let snapshot = try await live.snapshot()
        XCTAssertEqual(snapshot.response, answer)

        // Completed while no one followed it: replayed to the next run.
        var options = UploadOptions()
        options.startsSuspended = true
        let away = try await session.upload(file: URL(fileURLWithPath: file), to: URL(string: server.url("/c/up"))!, options: options)
        session.detach()
        let path = "/org/ferry/Ferry1/transfer/\(away.id)"
        try await client.transfer(id: away.id).resume()
        try await signals.completedWithItsBatch(path)
        let next = Recorder()
        let again = FerrySession(configuration: configuration(id), delegate: next)
        try await again.attach()
        XCTAssertEqual(next.recorded, ["completed \(away.id) ok", "kept", "idle"])
        let replayed = try await again.allTasks().first { $0.id == away.id }?.value
        XCTAssertEqual(replayed, FerryTaskResult(location: URL(fileURLWithPath: file), response: answer, bytes: 30_000))
        again.detach()

        // Acknowledged before: settled from its properties.
        let sent = FerryTaskResult(location: URL(fileURLWithPath: file), response: answer, bytes: 30_000)
        let settled = try await settledValues(id)
        XCTAssertEqual(settled, [sent, sent])
    }

    /// A download (of `/c/NAME` into `work/NAME`) by a run that left at once: it
    /// completed with no one following the session.
    /// (Created suspended and started once the run has left: a download that ended
    /// before `detach` would be delivered to that run, and acknowledged.)
    func downloadCompletedWhileAway(_ id: String, _ name: String) async throws -> FerryTask {
        let first = FerrySession(configuration: configuration(id))
        var options = DownloadOptions()
        options.startsSuspended = true
        let t = try await first.download(from: URL(string: server.url("/c/" + name))!, to: URL(fileURLWithPath: work + "/" + name),
                                         options: options)
        first.detach()
        try await client.transfer(id: t.id).resume()
        try await signals.completedWithItsBatch("/org/ferry/Ferry1/transfer/\(t.id)")
        return t
    }

    /// Serves `/c/` + `first` and `/c/` + `second` (2,000 bytes each); the first completes
    /// while no app of `id` is attached (`downloadCompletedWhileAway`); then a new session
    /// of `id`, without a delegate, attaches.
    func attachAfterACompletionWhileAway(_ id: String, _ first: String, then second: String) async throws
        -> (FerryTask, FerrySession) {
        serve("/c/" + first, size: 2_000)
        serve("/c/" + second, size: 2_000)
        let t = try await downloadCompletedWhileAway(id, first)
        let again = FerrySession(configuration: configuration(id))
        try await again.attach()
        return (t, again)
    }

    /// The values of a session's tasks in a run after their events were acknowledged:
    /// settled from the transfers' properties.
    func settledValues(_ id: String) async throws -> [FerryTaskResult] {
        let session = FerrySession(configuration: configuration(id))
        defer { session.detach() }
        var values: [FerryTaskResult] = []
        for t in try await session.allTasks().sorted(by: { $0.id < $1.id }) { values.append(try await t.value) }
        return values
    }

    /// FerrySessionEvents, the session's events as an AsyncSequence, read on the main
    /// actor: what completed while the app was away waits for the first reader, then
    /// live events come in the delegate's order; what comes while no one reads waits for
    /// the next reader; a completion is acknowledged once read (one never read comes
    /// again in the next run); the sequence ends when the session is detached.
    func testSessionEventsAreReadOnTheMainActor() async throws {
        serve("/c/away.bin", size: 2_000)
        let body = serve("/c/live.bin", size: 50_000)
        serve("/c/gap1.bin", size: 3_000)
        serve("/c/gap2.bin", size: 4_000)
        let away = try await downloadCompletedWhileAway("org.example.Stream", "away.bin")

        @MainActor final class Model {
            var lines: [String] = []
            /// Reads until `completions` completions were read (nil: until the sequence ends).
            func follow(_ events: FerrySessionEvents, completions wanted: Int?) async {
                var completions = 0
                for await event in events {
                    MainActor.assertIsolated()
                    switch event {
                    case .wroteData: continue
                    case .finishedDownloading(let t, let location): lines.append("finished \(t.id) \(location.lastPathComponent)")
                    case .completed(let t, let error):
                        lines.append("completed \(t.id) \(error == nil ? "ok" : "failed")")
                        completions += 1
                        if let wanted, completions >= wanted { return }
                    case .becameIdle: lines.append("idle")
                    case .finishedBackgroundEvents: lines.append("kept")
                    default: lines.append("\(event)")
                    }
                }
                lines.append("end")
            }
            func take() -> [String] { defer { lines = [] }; return lines }
        }
        func download(_ session: FerrySession, _ name: String) async throws -> FerryTask {
            try await session.download(from: URL(string: server.url("/c/" + name))!, to: URL(fileURLWithPath: work + "/" + name))
        }
        let events = FerrySessionEvents()
        let session = FerrySession(configuration: configuration("org.example.Stream"), delegate: events)
        let model = await Model()

        // The first reader: what waited, then live events.
        let live = try await download(session, "live.bin")
        try await withDeadline(30, "the first reader's two completions") { await model.follow(events, completions: 2) }
        let first = await model.take()
        XCTAssertEqual(first, ["finished \(away.id) away.bin", "completed \(away.id) ok", "kept", "idle",
                               "finished \(live.id) live.bin", "completed \(live.id) ok"], "\(first)")
        assertFile(work + "/live.bin", equals: body)
        var pending = try await pendingCountOnceAcknowledged("org.example.Stream")
        XCTAssertEqual(pending, 0, "what was read is acknowledged")

        // While no one reads: kept for the next reader.
        let gap1 = try await download(session, "gap1.bin")
        _ = try await withDeadline(20, "gap1's end") { try await gap1.value }
        try await withDeadline(10, "the next reader") { await model.follow(events, completions: 1) }
        let second = await model.take()
        XCTAssertEqual(second.filter { $0 != "idle" }, ["finished \(gap1.id) gap1.bin", "completed \(gap1.id) ok"], "\(second)")

        // Never read in this run: the sequence ends with the session, and the next run
        // gets the completion again.
        let gap2 = try await download(session, "gap2.bin")
        _ = try await withDeadline(20, "gap2's end") { try await gap2.value }
        session.detach()
        try await withDeadline(10, "the sequence's end after detach") { await model.follow(events, completions: nil) }
        let ended = await model.take()
        XCTAssertEqual(ended.last, "end")
        let again = FerrySessionEvents()
        let next = FerrySession(configuration: configuration("org.example.Stream"), delegate: again)
        defer { next.detach() }
        try await withDeadline(20, "the next run's reader") { await model.follow(again, completions: 1) }
        let third = await model.take()
        XCTAssertEqual(third, ["finished \(gap2.id) gap2.bin", "completed \(gap2.id) ok"], "not acknowledged unread: \(third)")
        pending = try await pendingCountOnceAcknowledged("org.example.Stream")
        XCTAssertEqual(pending, 0)
    }

}
