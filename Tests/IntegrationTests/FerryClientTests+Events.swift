@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

/// FerryClient's events kept while the app was away: replayed once, acknowledged once taken, never dropped.
extension FerryClientTests {
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
}
