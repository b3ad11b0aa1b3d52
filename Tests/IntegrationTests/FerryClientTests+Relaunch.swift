@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

/// FerryClient across restarts of the app and of the service: outcomes kept while away, reattaching, wake-ups and the example app.
extension FerryClientTests {
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
}
