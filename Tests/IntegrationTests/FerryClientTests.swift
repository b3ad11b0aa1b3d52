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
        while names != namesBefore, Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
            names = try await busNames()
        }
        XCTAssertEqual(names, namesBefore, "the finished session's connection left the bus")
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

    /// The come-back flow: queue, leave; the download ends while the app is away;
    /// the app comes back and its delegate gets the event, once.
    func testEventsKeptWhileAwayAreReplayedOnce() async throws {
        serve("/c/away.bin", size: 200_000)
        server.set(.slow(bytesPerSecond: 1024 * 1024), on: "/c/away.bin")
        let first = FerrySession(configuration: configuration("org.example.Away"))
        let task = try await first.download(from: URL(string: server.url("/c/away.bin"))!, to: URL(fileURLWithPath: work + "/away.bin"))
        let id = task.id
        first.detach()
        try await signals.completedWithItsBatch("/org/ferry/Ferry1/transfer/\(id)")

        let recorder = Recorder()
        let again = FerrySession(configuration: configuration("org.example.Away"), delegate: recorder)
        defer { again.detach() }
        try await again.attach()
        XCTAssertEqual(recorder.recorded, ["finished \(id) \(work!)/away.bin", "completed \(id) ok", "kept", "idle"])
        let pending = try await pendingCountOnceAcknowledged("org.example.Away")
        XCTAssertEqual(pending, 0)
        let tasks = try await again.allTasks()
        XCTAssertEqual(tasks.map(\.id), [id])
        let value = try await tasks[0].value
        XCTAssertEqual(value.location?.path, work + "/away.bin")

        let third = Recorder()
        let once = FerrySession(configuration: configuration("org.example.Away"), delegate: third)
        defer { once.detach() }
        try await once.attach()
        XCTAssertEqual(third.recorded, [], "acknowledged events are not delivered again")
    }

    /// A previous run's completion, replayed to a session without a delegate, stays
    /// pending until the app takes its task; once taken, it and the app's later ones
    /// are acknowledged (before, one event not yet taken stopped every acknowledgement).
    func testACompletionTakenLaterIsAcknowledged() async throws {
        let id = "org.example.Take"
        let (t1, again) = try await attachAfterACompletionWhileAway(id, "take1.bin", then: "take2.bin")
        defer { again.detach() }
        let before = try await pendingCount(id)
        XCTAssertEqual(before, 1, "replayed to no one: kept for whoever takes it")
        let tasks = try await again.allTasks()
        XCTAssertEqual(tasks.map(\.id), [t1.id])
        _ = try await tasks[0].value
        let t2 = try await again.download(from: URL(string: server.url("/c/take2.bin"))!, to: URL(fileURLWithPath: work + "/take2.bin"))
        _ = try await withDeadline(20, "the second download") { try await t2.value }
        let left = try await pendingCountOnceAcknowledged(id)
        XCTAssertEqual(left, 0, "both completions were taken, so both are acknowledged")
    }

    /// An event no one took is not dropped by acknowledging a later one, also after
    /// the session attached again (ferryd restarted): a later run's delegate hears it.
    func testAnEventNoOneTookSurvivesAReattach() async throws {
        let id = "org.example.Keep"
        let (t1, again) = try await attachAfterACompletionWhileAway(id, "keep1.bin", then: "keep2.bin")
        XCTAssertEqual(again.attachCount, 1)
        try await stopFerryd()
        try await startFerryd()
        // The session attaches again by itself (the service came back); wait for it, so
        // the next completion is acknowledged after the re-attach.
        let deadline = Date().addingTimeInterval(20)
        while again.attachCount < 2 && Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
        XCTAssertEqual(again.attachCount, 2, "attached again after the restart")
        let t2 = try await again.download(from: URL(string: server.url("/c/keep2.bin"))!, to: URL(fileURLWithPath: work + "/keep2.bin"))
        _ = try await withDeadline(20, "the download after the restart") { try await t2.value }
        _ = try await t2.snapshot() // a call after the acknowledgement, on the same connection
        again.detach()

        let recorder = Recorder()
        let later = FerrySession(configuration: configuration(id), delegate: recorder)
        defer { later.detach() }
        try await later.attach()
        XCTAssertTrue(recorder.recorded.contains("completed \(t1.id) ok"),
                      "the completion no one took reaches the next run: \(recorder.recorded)")
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
    private func downloadCompletedWhileAway(_ id: String, _ name: String) async throws -> FerryTask {
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
    private func attachAfterACompletionWhileAway(_ id: String, _ first: String, then second: String) async throws
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
    private func settledValues(_ id: String) async throws -> [FerryTaskResult] {
        let session = FerrySession(configuration: configuration(id))
        defer { session.detach() }
        var values: [FerryTaskResult] = []
        for t in try await session.allTasks().sorted(by: { $0.id < $1.id }) { values.append(try await t.value) }
        return values
    }

    /// `DownloadOptions.metalink` (v1.2): the file comes from the document's URL,
    /// checked against its SHA-256; a document with entities ends the task with
    /// `.invalidMetalink`, and nothing is saved.
    func testAMetalinkDownloadAndAHostileDocument() async throws {
        let body = serve("/c/ml.bin", size: 70_000, seed: 9)
        let doc = """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="ml.bin"><size>\(body.count)</size>
            <hash type="sha-256">\(TestData.sha256Hex(body))</hash><url>\(server.url("/c/ml.bin"))</url></file></metalink>
            """
        server.add(path: "/c/ml.meta4", body: Array(doc.utf8))
        server.add(path: "/c/evil.meta4", body: Array("<!DOCTYPE m [<!ENTITY a \"b\">]><metalink>&a;</metalink>".utf8))
        let session = FerrySession(configuration: configuration("org.example.Metalink"))
        defer { session.detach() }
        var options = DownloadOptions()
        options.metalink = URL(string: server.url("/c/ml.meta4"))
        let task = try await session.download(from: options.metalink!, to: URL(fileURLWithPath: work + "/ml.bin"), options: options)
        let result = try await task.value
        XCTAssertEqual(result.location?.path, work + "/ml.bin")
        XCTAssertEqual(result.sha256, TestData.sha256Hex(body), "checked against the document's hash")
        assertFile(work + "/ml.bin", equals: body)

        options.metalink = URL(string: server.url("/c/evil.meta4"))
        let evil = try await session.download(from: options.metalink!, to: URL(fileURLWithPath: work + "/evil.bin"), options: options)
        do {
            _ = try await evil.value
            XCTFail("a document with entities is refused")
        } catch let error as FerryError {
            guard case .invalidMetalink(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("DOCTYPE"), message)
        }
        XCTAssertFalse(exists(work + "/evil.bin"))
    }

    /// A download with the `sha256` option ends with its bytes and its checked digest,
    /// the same whether heard live, replayed to a later run, or settled from its
    /// properties (its event acknowledged before).
    func testADownloadEndsWithItsBytesAndDigest() async throws {
        let body = serve("/c/digest.bin", size: 120_000)
        let digest = TestData.sha256Hex(body)
        let id = "org.example.Digest"
        var options = DownloadOptions()
        options.sha256 = digest

        let session = FerrySession(configuration: configuration(id))
        let live = try await session.download(from: URL(string: server.url("/c/digest.bin"))!,
                                              to: URL(fileURLWithPath: work + "/live.bin"), options: options)
        let r = try await withDeadline(20, "the download") { try await live.value }
        XCTAssertEqual(r, FerryTaskResult(location: URL(fileURLWithPath: work + "/live.bin"), bytes: 120_000, sha256: digest))

        options.startsSuspended = true
        let away = try await session.download(from: URL(string: server.url("/c/digest.bin"))!,
                                              to: URL(fileURLWithPath: work + "/away.bin"), options: options)
        session.detach()
        try await client.transfer(id: away.id).resume()
        _ = try await signals.completed("/org/ferry/Ferry1/transfer/\(away.id)")
        let again = FerrySession(configuration: configuration(id))
        let replayed = try await again.allTasks().first { $0.id == away.id }?.value
        XCTAssertEqual(replayed, FerryTaskResult(location: URL(fileURLWithPath: work + "/away.bin"), bytes: 120_000, sha256: digest))
        again.detach()

        let settled = try await settledValues(id)
        XCTAssertEqual(settled.map(\.bytes), [120_000, 120_000])
        XCTAssertEqual(settled.map(\.sha256), [digest, digest])
    }

    /// A sandboxed app's way: a download into a file it opened (from the file chooser
    /// portal) and an upload from one; the app keeps and closes its own descriptors.
    func testDownloadIntoAndUploadFromOpenFiles() async throws {
        let body = serve("/c/fd.bin", size: 150_000)
        server.set(.acceptUploads(status: 200, body: Array("stored".utf8)), on: "/c/fd-up")
        let session = FerrySession(configuration: configuration("org.example.Fd"))
        defer { session.detach() }

        let target = work + "/chosen.bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: Data("old contents".utf8)))
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: target))
        let down = try await session.download(from: URL(string: server.url("/c/fd.bin"))!, into: out)
        let r = try await withDeadline(20, "the download into a descriptor") { try await down.value }
        XCTAssertEqual(r, FerryTaskResult(location: nil, bytes: 150_000))
        assertFile(target, equals: body)
        try out.close() // still the app's: closing it works

        let source = work + "/to-send.bin"
        let sent = Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        try sent.write(to: URL(fileURLWithPath: source))
        let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: source))
        let up = try await session.upload(from: input, to: URL(string: server.url("/c/fd-up"))!)
        let u = try await withDeadline(20, "the upload from a descriptor") { try await up.value }
        XCTAssertEqual(u, FerryTaskResult(location: nil, response: Data("stored".utf8), bytes: 70_000))
        XCTAssertEqual(server.uploads(for: "/c/fd-up").map(\.sha256), [TestData.sha256Hex(sent)])
        try input.close()
    }

    /// A transfer that failed, was fixed and completed while the app was away: both
    /// events are replayed, and the task's value is its last run's, the success.
    func testAFailureMendedWhileAwayEndsInItsLastOutcome() async throws {
        serve("/c/mended.bin", size: 3_000)
        let id = "org.example.Mended"
        let first = FerrySession(configuration: configuration(id))
        var options = DownloadOptions()
        options.startsSuspended = true
        let t = try await first.download(from: URL(string: server.url("/c/missing.bin"))!,
                                         to: URL(fileURLWithPath: work + "/mended.bin"), options: options)
        first.detach()
        let path = "/org/ferry/Ferry1/transfer/\(t.id)"
        let transfer = client.transfer(id: t.id)
        try await transfer.resume()
        let failed = try await signals.completed(path)
        XCTAssertFalse(failed.errorName.isEmpty, "the missing file fails first")
        try await transfer.setURL(server.url("/c/mended.bin"))
        try await transfer.resume()
        try await signals.wait("the second Completed") { s in s.filter { $0.path == path && $0.member == "Completed" }.count == 2 }

        let recorder = Recorder()
        let again = FerrySession(configuration: configuration(id), delegate: recorder)
        defer { again.detach() }
        try await again.attach()
        XCTAssertEqual(recorder.recorded.filter { $0.hasPrefix("completed") }.count, 2, "\(recorder.recorded)")
        XCTAssertEqual(recorder.recorded.last { $0.hasPrefix("completed") }, "completed \(t.id) ok")
        let task = try await again.allTasks().first { $0.id == t.id }
        let value = try await XCTUnwrap(task).value
        XCTAssertEqual(value.location?.path, work + "/mended.bin")
    }

    /// An ephemeral session vanishes with ferryd: its running task ends with an error
    /// when the session attaches again (it does not wait forever), and the new
    /// session's events, whose serials count from 1 again, are delivered.
    func testAnEphemeralSessionAfterARestartDeliversItsNewEvents() async throws {
        serve("/c/e1.bin", size: 2_000)
        serve("/c/e2.bin", size: 2_000)
        serve("/c/lost.bin", size: 200_000)
        server.set(.stallAfter(bytes: 50_000, times: 1), on: "/c/lost.bin")
        var c = configuration("org.example.Eph")
        c.isPersistent = false
        let recorder = Recorder()
        let session = FerrySession(configuration: c, delegate: recorder)
        defer { session.detach() }
        for name in ["e1", "e2"] {
            let t = try await session.download(from: URL(string: server.url("/c/\(name).bin"))!,
                                               to: URL(fileURLWithPath: work + "/\(name).bin"))
            _ = try await t.value
        }
        let lost = try await session.download(from: URL(string: server.url("/c/lost.bin"))!,
                                              to: URL(fileURLWithPath: work + "/lost.bin"))
        try await stopFerryd()
        try await startFerryd()
        do {
            let r = try await withDeadline(20, "the vanished task") { try await lost.value }
            XCTFail("a transfer that vanished with ferryd ended with \(r)")
        } catch let e as FerryError {
            guard case .noSuchTransfer = e else { return XCTFail("\(e)") }
        }
        serve("/c/new.bin", size: 3_000)
        let fresh = try await session.download(from: URL(string: server.url("/c/new.bin"))!,
                                               to: URL(fileURLWithPath: work + "/new.bin"))
        let r = try await withDeadline(20, "the new session's first download") { try await fresh.value }
        XCTAssertEqual(r.location?.path, work + "/new.bin")
        try await recorder.wait(for: "completed \(fresh.id) ok")
    }

    /// A running download survives a restart of ferryd; the session attaches
    /// again by itself and its delegate hears the end.
    func testReattachesWhenTheServiceRestarts() async throws {
        let recorder = Recorder()
        let (body, session, task) = try await startSlowDownload("restart.bin", size: 400_000, bytesPerSecond: 256 * 1024,
                                                                app: "org.example.Restart", delegate: recorder)
        defer { session.detach() }
        try await recorder.wait(for: "progress \(task.id)")
        try await stopFerryd()
        server.set(.slow(bytesPerSecond: 4 * 1024 * 1024), on: "/c/restart.bin")
        try await startFerryd()
        try await recorder.wait(for: "completed \(task.id)", timeout: 30)
        XCTAssertTrue(recorder.recorded.contains("completed \(task.id) ok"), "\(recorder.recorded)")
        assertFile(work + "/restart.bin", equals: body)
        let value = try await task.value
        XCTAssertEqual(value.location?.path, work + "/restart.bin")
    }

    /// Ferry wakes the app (ActivateAction on its application id) once its client
    /// has left; the wake-up helper opens the session and the delegate gets the event.
    func testWakeUpOpensTheSessionForTheDelegate() async throws {
        serve("/c/wake.bin", size: 64 * 1024)
        server.set(.slow(bytesPerSecond: 256 * 1024), on: "/c/wake.bin")
        let recorder = Recorder()
        let address = bus.address
        let wake = FerryWakeUp(applicationID: "org.example.Wakeful", busAddress: bus.address, delegate: recorder) { c in
            c.busAddress = address
        }
        try await wake.start()
        defer { wake.stop() }

        var c = configuration("org.example.Wakeful.background")
        c.applicationID = "org.example.Wakeful"
        c.isPersistent = false // woken, it must stay ephemeral (nothing of it on disk)
        let app = FerrySession(configuration: c)
        let task = try await app.download(from: URL(string: server.url("/c/wake.bin"))!, to: URL(fileURLWithPath: work + "/wake.bin"))
        app.detach()

        try await recorder.wait(for: "completed \(task.id)", timeout: 30)
        XCTAssertEqual(recorder.recorded.filter { !$0.hasPrefix("progress") && $0 != "idle" && $0 != "kept" },
                       ["finished \(task.id) \(work!)/wake.bin", "completed \(task.id) ok"])
        XCTAssertEqual(wake.sessions.map(\.configuration.identifier), ["org.example.Wakeful.background"])
        // The helper acknowledges after its delegate returned.
        let pending = try await pendingCountOnceAcknowledged("org.example.Wakeful.background")
        XCTAssertEqual(pending, 0, "the delivered event was acknowledged")
        let stored = try await client.openSession("org.example.Wakeful.background").properties()["Configuration"]?.vardict
        XCTAssertEqual(stored?["persistent"]?.bool, false, "waking the app did not make its ephemeral session persistent")
    }

    /// Examples/QueueAndCollect, the re-attach story: a first run makes the downloads
    /// suspended, resumes them and exits; they end while it is away; a second run opens
    /// the session by its identifier, its delegate gets what was kept (then "delivered
    /// what was kept"), and it prints each file; a third run has nothing left to collect.
    func testExampleQueuesExitsAndCollectsOnRelaunch() async throws {
        guard let example = Binaries.locate("ferry-queue-and-collect", variable: "FERRY_EXAMPLE_PATH") else {
            return XCTFail("the example ferry-queue-and-collect was not built beside ferry")
        }
        let a = serve("/ex/a.bin", size: 150_000, seed: 4)
        let b = serve("/ex/b.bin", size: 150_000, seed: 5)
        // Slow enough to end after the first run has exited.
        server.set(.slow(bytesPerSecond: 128 * 1024), on: "/ex/a.bin")
        server.set(.slow(bytesPerSecond: 128 * 1024), on: "/ex/b.bin")
        let env = environment(["FERRY_EXAMPLE_ADDRESS": bus.address])
        try FileManager.default.createDirectory(atPath: work + "/ex", withIntermediateDirectories: true)
        let queue = try runTool(example, ["queue", work + "/ex", server.url("/ex/a.bin"), server.url("/ex/b.bin")],
                                environment: env, timeout: 30)
        XCTAssertEqual(queue.status, 0, queue.stderr)
        let ids = queue.stdout.split(separator: "\n").compactMap { $0.hasPrefix("queued ") ? UInt64($0.dropFirst(7)) : nil }
        guard ids.count == 2 else { return XCTFail("two ids: \(queue.stdout) \(queue.stderr)") }
        XCTAssertFalse(queue.stdout.contains("completed"), "ended before the first run exited: \(queue.stdout)")
        for id in ids { try await signals.completedWithItsBatch("/org/ferry/Ferry1/transfer/\(id)") }

        let collect = try runTool(example, ["collect"], environment: env, timeout: 30)
        XCTAssertEqual(collect.status, 0, collect.stderr)
        let lines = collect.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.filter { $0.hasPrefix("completed") }.sorted(), ids.map { "completed \($0) ok" }.sorted(), collect.stdout)
        XCTAssertEqual(lines.filter { $0.hasPrefix("finished") }.count, 2, collect.stdout)
        let kept = lines.firstIndex(of: "delivered what was kept")
        XCTAssertNotNil(kept, collect.stdout)
        XCTAssertEqual(lines.lastIndex { $0.hasPrefix("completed") }.map { $0 < (kept ?? 0) }, true, "after the kept events: \(collect.stdout)")
        XCTAssertEqual(lines.filter { $0.hasPrefix("file ") }.sorted(),
                       ["file \(ids[0]) \(work!)/ex/a.bin 150000 bytes", "file \(ids[1]) \(work!)/ex/b.bin 150000 bytes"].sorted(),
                       collect.stdout)
        assertFile(work + "/ex/a.bin", equals: a)
        assertFile(work + "/ex/b.bin", equals: b)
        let again = try runTool(example, ["collect"], environment: env, timeout: 30)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertFalse(again.stdout.contains("completed") || again.stdout.contains("file "), "collected once: \(again.stdout)")
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
