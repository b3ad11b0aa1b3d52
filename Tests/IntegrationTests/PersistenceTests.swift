import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The daemon owns the transfers: they survive a restart of ferryd.
final class PersistenceTests: FerryTestCase {
    func restart() async throws {
        try await stopFerryd()
        try await startFerryd()
    }

    /// Sessions, finished and paused transfers and unacknowledged events are all
    /// there after a restart, under the same paths; a paused one resumes from its
    /// partial file; new ids are never reused.
    func testRestartKeepsSessionsTransfersAndEvents() async throws {
        let s = try await session("com.example.Persist", ["retries": .uint32(1)])
        let doneBody = serve("/done.bin", size: 20_000)
        let done = try await s.download(server.url("/done.bin"), options: ["destination": .string(work + "/done.bin")])
        let (serial, _, _) = try await signals.completed(done.path)

        let bigBody = serve("/big.bin", size: 512 * 1024)
        server.set(.stallAfter(bytes: 128 * 1024, times: 1), on: "/big.bin")
        let paused = try await s.download(server.url("/big.bin"), options: ["destination": .string(work + "/big.bin")])
        try await waitForState(paused, "running")
        try await waitForFileSize(work + "/big.bin.part", atLeast: 128 * 1024)
        _ = try await paused.pause()
        try await waitForState(paused, "paused")

        try await restart()

        let again = try await session("com.example.Persist")
        XCTAssertEqual(again.path, s.path, "the session keeps its path")
        let config = try await again.properties()["Configuration"]?.vardict
        XCTAssertEqual(config?["retries"]?.uint32, 1, "and its configuration")
        let listed = try await client.listTransfers().map(\.path)
        XCTAssertEqual(listed, [done.path, paused.path], "the transfers keep their paths")
        let di = try await done.info()
        XCTAssertEqual(di.state, "completed")
        XCTAssertEqual(di.destination, work + "/done.bin")
        XCTAssertEqual(di.bytesTransferred, Int64(doneBody.count))
        let pi = try await paused.info()
        XCTAssertEqual(pi.state, "paused")
        XCTAssertEqual(pi.bytesTransferred, 128 * 1024)
        let events = try await again.pendingEvents()
        XCTAssertEqual(events.map(\.serial), [serial], "the unacknowledged event waits across the restart")
        XCTAssertEqual(events.first?.kind, "finished")

        try await paused.resume()
        let info = try await finish(paused)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/big.bin", equals: bigBody)
        XCTAssertEqual(server.requests(for: "/big.bin").last?.header("Range"), "bytes=\(128 * 1024)-")

        // Ids are never reused.
        let fresh = try await again.download(server.url("/done.bin"), options: ["destination": .string(work + "/fresh.bin")])
        XCTAssertGreaterThan(fresh.id, paused.id)
        try await finish(fresh)
        // A new event gets a new serial.
        let newSerials = try await again.pendingEvents().map(\.serial)
        XCTAssertEqual(Set(newSerials).count, newSerials.count)
        XCTAssertTrue(newSerials.allSatisfy { $0 >= serial })
    }

    /// A transfer running when ferryd stops carries on when it is back.
    func testRunningTransferContinuesAfterRestart() async throws {
        let body = serve("/long.bin", size: 512 * 1024)
        server.set(.slow(bytesPerSecond: 256 * 1024), on: "/long.bin")
        let s = try await session()
        let dest = work + "/long.bin"
        let t = try await s.download(server.url("/long.bin"), options: ["destination": .string(dest)])
        try await waitForState(t, "running")
        try await waitForFileSize(dest + ".part", atLeast: 64 * 1024)
        try await restart()
        server.clearBehaviours(on: "/long.bin")
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        let ranges = server.requests(for: "/long.bin").compactMap { $0.header("Range") }
        XCTAssertFalse(ranges.isEmpty, "after the restart it continued from its partial file")
    }

    /// An ephemeral session (persistent = false) and its transfers vanish with the daemon.
    func testEphemeralSessionVanishesOnRestart() async throws {
        serve("/e.bin", size: 1000)
        let keep = try await session("com.example.Keep")
        let kept = try await keep.download(server.url("/e.bin"), options: ["destination": .string(work + "/k.bin")])
        try await finish(kept)
        let eph = try await session("com.example.Ephemeral", ["persistent": .boolean(false)])
        let gone = try await eph.download(server.url("/e.bin"), options: ["destination": .string(work + "/e.bin")])
        try await finish(gone)

        try await restart()
        let sessions = try await client.listSessions().map(\.path)
        XCTAssertEqual(sessions, [keep.path])
        let transfers = try await client.listTransfers().map(\.path)
        XCTAssertEqual(transfers, [kept.path])
        XCTAssertTrue(exists(work + "/e.bin"), "the downloaded file itself stays")
        let reopened = try await session("com.example.Ephemeral")
        let events = try await reopened.pendingEvents()
        XCTAssertEqual(events.count, 0, "its events lived in memory only")
    }

    /// Ids and serials never come again, for ephemeral sessions too (nothing of theirs
    /// is stored): after a SIGKILL and after a clean stop, a new ephemeral session's
    /// session, transfer and event serial are above every one handed out before.
    func testEphemeralIdsAndSerialsNeverComeAgainAfterARestart() async throws {
        serve("/e.bin", size: 1000)
        var highest: (session: UInt64, transfer: UInt64, serial: UInt64) = (0, 0, 0)
        for (round, restart) in ["kill -9", "stop", "none"].enumerated() {
            let eph = try await session("com.example.Ephemeral\(round)", ["persistent": .boolean(false)])
            let t = try await eph.download(server.url("/e.bin"), options: ["destination": .string(work + "/e\(round).bin")])
            let (serial, error, _) = try await signals.completed(t.path)
            XCTAssertEqual(error, "")
            let sessionID = UInt64(eph.path.split(separator: "/").last ?? "") ?? 0
            XCTAssertGreaterThan(sessionID, highest.session, "round \(round): a new session id")
            XCTAssertGreaterThan(t.id, highest.transfer, "round \(round): a new transfer id")
            XCTAssertGreaterThan(serial, highest.serial, "round \(round): a new event serial")
            highest = (max(highest.session, sessionID), max(highest.transfer, t.id), max(highest.serial, serial))
            switch restart {
            case "kill -9": try await killAndRestart()
            case "stop": try await self.restart()
            default: break
            }
        }
    }

    /// An ephemeral session's unfinished downloads vanish with the daemon, and so do
    /// their `.part` files: none is left in the download folder after a stop. Only a
    /// partial file that `Pause` handed out resume data for stays, and that data
    /// continues it in the next ferryd.
    func testEphemeralPartialFilesGoWithTheDaemon() async throws {
        let body = serve("/eph.bin", size: 256 * 1024)
        serve("/plain.bin", size: 256 * 1024, etag: nil, ranges: false)
        server.set(.stallAfter(bytes: 64 * 1024, times: 3), on: "/eph.bin")
        server.set(.stallAfter(bytes: 64 * 1024, times: 1), on: "/plain.bin")
        let eph = try await session("com.example.Private", ["persistent": .boolean(false)])
        let running = try await eph.download(server.url("/eph.bin"), options: ["destination": .string(work + "/running.bin")])
        let noData = try await eph.download(server.url("/plain.bin"), options: ["destination": .string(work + "/nodata.bin")])
        // Its own fetch (not a dedupe follower of `running`): it has a partial file to keep.
        let withData = try await eph.download(server.url("/eph.bin"), options: ["destination": .string(work + "/withdata.bin"), "dedupe": .boolean(false)])
        for (t, name) in [(running, "running"), (noData, "nodata"), (withData, "withdata")] {
            try await waitForState(t, "running")
            try await waitForFileSize(work + "/\(name).bin.part", atLeast: 64 * 1024)
        }
        let none = try await noData.pause()
        XCTAssertEqual(none, [], "no validator, no resume data")
        let data = try await withData.pause()
        XCTAssertFalse(data.isEmpty)

        try await stopFerryd()
        XCTAssertFalse(exists(work + "/running.bin.part"), "a running download's partial file goes with it")
        XCTAssertFalse(exists(work + "/nodata.bin.part"), "and a paused one's that no resume data names")
        XCTAssertTrue(exists(work + "/withdata.bin.part"), "the one resume data names stays for it")

        try await startFerryd()
        server.clearBehaviours(on: "/eph.bin")
        let again = try await session("com.example.Private", ["persistent": .boolean(false)])
        let resumed = try await again.resumeDownload(data)
        let info = try await finish(resumed)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/withdata.bin", equals: body)
        XCTAssertEqual(server.requests(for: "/eph.bin").last?.header("Range"), "bytes=\(64 * 1024)-")
    }
}
