import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// logind's sleep inhibitor (python-dbusmock's logind template on a private system
/// bus). The template's Inhibit hands out the write end of a pipe and drops the
/// inhibitor from ListInhibitors when every copy of it is closed, so the list shows
/// whether ferryd still holds its file descriptor.
final class SleepInhibitorTests: SystemTestCase {
    func testHeldWhileADownloadRunsAndReleasedWhenItEnds() async throws {
        try await startLogind()
        try await startFerryd()
        let before = try await ferryInhibitors().count
        XCTAssertEqual(before, 0, "nothing runs yet")

        let s = try await client.openSession("com.example.Sleepy")
        let body = serve("/slow.bin", size: 90_000, bytesPerSecond: 45_000)
        let t = try await download(s, "/slow.bin")
        try await waitForFerryInhibitors(1)
        let held = try await ferryInhibitors()
        XCTAssertEqual(held.first?.what, "sleep")
        XCTAssertEqual(held.first?.who, "Ferry")
        XCTAssertEqual(held.first?.why, "Downloads are in progress")
        XCTAssertEqual(held.first?.mode, "delay")
        let state = try await t.info().state
        XCTAssertEqual(state, "running")

        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/slow.bin", equals: body)
        // Released: ferryd closed the descriptor.
        try await waitForFerryInhibitors(0)
        XCTAssertEqual(logCount("sleep inhibitor taken"), 1)
        let releasedLines = try await waitForLog("sleep inhibitor released")
        XCTAssertEqual(releasedLines, 1)
    }

    func testOneInhibitorForManyTransfersAndAgainForTheNextBatch() async throws {
        try await startLogind()
        try await startFerryd()
        let s = try await client.openSession("com.example.Sleepy")
        serve("/a.bin", size: 60_000, seed: 1, bytesPerSecond: 40_000)
        serve("/b.bin", size: 160_000, seed: 2, bytesPerSecond: 40_000) // 2.5 s longer than a: time to look
        let a = try await download(s, "/a.bin")
        let b = try await download(s, "/b.bin")
        try await waitForFerryInhibitors(1)
        try await finish(a)
        // b still runs: still exactly one.
        let bState = try await b.info().state
        XCTAssertEqual(bState, "running")
        let held = try await ferryInhibitors().count
        XCTAssertEqual(held, 1)
        try await finish(b)
        try await waitForFerryInhibitors(0)

        // A pause releases it too; the next batch takes a new one.
        serve("/c.bin", size: 200_000, seed: 3, bytesPerSecond: 40_000)
        let c = try await download(s, "/c.bin")
        try await waitForFerryInhibitors(1)
        // logind has granted it; ferryd holds it once it has read the answer.
        try await waitForLog("sleep inhibitor taken", count: 2)
        _ = try await c.pause()
        try await waitForFerryInhibitors(0)
        XCTAssertEqual(logCount("sleep inhibitor taken"), 2)
    }

    func testWithoutLogindDownloadsWork() async throws {
        try await startNetworkManager()
        try await startFerryd()
        let s = try await client.openSession("com.example.Sleepy")
        // Slow enough to be still running when the inhibitor asks for logind (a download
        // that ends first rightly asks for nothing, and the test would prove nothing).
        let body = serve("/x.bin", size: 50_000, bytesPerSecond: 25_000)
        let transfer = try await download(s, "/x.bin")
        let logindLines = try await waitForLog("logind is not on the system bus")
        XCTAssertEqual(logindLines, 1)
        let info = try await finish(transfer)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/x.bin", equals: body)
    }
}

extension SleepInhibitorTests {
    /// logind's PrepareForSleep, sent from the mock.
    func prepareForSleep(_ going: Bool) async throws {
        try await system.call(destination: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                              interface: Self.mockInterface, method: "EmitSignal",
                              arguments: [.string("org.freedesktop.login1.Manager"), .string("PrepareForSleep"),
                                          .signature("b"), .array(element: "v", [.variant(.boolean(going))])])
    }

    func testLetGoWhenTheSystemGoesToSleepAndTakenAgainAfter() async throws {
        try await startLogind()
        try await startFerryd()
        let s = try await client.openSession("com.example.Sleepy")
        let body = serve("/slow.bin", size: 120_000, bytesPerSecond: 40_000)
        let t = try await download(s, "/slow.bin")
        try await waitForFerryInhibitors(1)

        try await prepareForSleep(true)
        try await waitForFerryInhibitors(0)
        try await prepareForSleep(false)
        try await waitForFerryInhibitors(1)

        server.clearBehaviours(on: "/slow.bin")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/slow.bin", equals: body)
        try await waitForFerryInhibitors(0)
    }

    /// Without NetworkManager (systemd-networkd), a sleep is the only word that the
    /// connections may be dead: after the wake-up a download whose server stopped
    /// sending (request-timeout 10 minutes, no retry) starts over at once from its
    /// partial file, on a new connection, spending no retry.
    func testAfterTheSystemWokeUpAStalledDownloadStartsOverAtOnce() async throws {
        try await startLogind()
        try await startFerryd()
        let s = try await client.openSession("com.example.Sleepy", configuration: ["retries": .uint32(0), "request-timeout": .double(600)])
        let body = serve("/stalled.bin", size: 300_000)
        server.set(.stallAfter(bytes: 100_000), on: "/stalled.bin")
        let t = try await download(s, "/stalled.bin")
        try await waitForBytes(t, atLeast: 100_000)
        try await waitForFerryInhibitors(1)

        try await prepareForSleep(true)
        try await waitForFerryInhibitors(0)
        try await prepareForSleep(false)
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.errorName, "")
        XCTAssertEqual(info.attempts, 2)
        assertFile(work + "/stalled.bin", equals: body)
        let requests = server.requests(for: "/stalled.bin")
        XCTAssertEqual(requests.count, 2)
        XCTAssertEqual(requests.last?.header("Range"), "bytes=100000-", "continued from the partial file")
        XCTAssertNotEqual(requests.last?.connection, requests.first?.connection, "went on the connection of before the sleep")
        XCTAssertEqual(logCount("the system woke up; starting over on a new connection"), 1)
    }
}
