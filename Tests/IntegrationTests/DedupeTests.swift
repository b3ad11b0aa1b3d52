import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Dedupe (contract v1.2) on the real ferryd: downloads of one URL by one caller while
/// the first is still running are one GET at the server, and every destination gets
/// the whole file; `dedupe` false is one GET each.
final class DedupeIntegrationTests: FerryTestCase {
    /// Queues `count` downloads of `path` while the server holds its first answer back
    /// (so the first is still running when the others come), releases it, waits for
    /// every download and returns them with their destinations.
    func downloadTogether(_ path: String, count: Int, dedupe: Bool?, session s: BusSession)
        async throws -> [(FerryTransfer, String)] {
        server.set(.holdAnswers, on: path)
        var made: [(FerryTransfer, String)] = []
        for i in 0..<count {
            let destination = downloads + "/copy-\(dedupe.map { $0 ? "on" : "off" } ?? "default")-\(i).bin"
            var options: [String: DBusValue] = ["destination": .string(destination)]
            if let dedupe { options["dedupe"] = .boolean(dedupe) }
            made.append((try await s.download(server.url(path), options: options), destination))
            if i == 0 { try await waitUntilAsync("the first GET, its answer held") { server.isHoldingAnswer(for: path) } }
        }
        server.release(path)
        for (t, _) in made {
            let info = try await finish(t, timeout: 30)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
        }
        return made
    }

    func testDownloadsOfOneURLAreOneGETAndEveryCopyIsWhole() async throws {
        let body = serve("/same.bin", size: 300 * 1024, seed: 7)
        let s = try await session()
        let made = try await downloadTogether("/same.bin", count: 5, dedupe: nil, session: s)
        XCTAssertEqual(server.requests(for: "/same.bin").count, 1, "five downloads, one GET")
        for (t, destination) in made {
            assertFile(destination, equals: body)
            XCTAssertFalse(exists(destination + ".part"))
            let finished = signals.signals(path: t.path, member: "Finished")
            XCTAssertEqual(finished.count, 1, "each download its own Finished")
        }
        let events = try await s.pendingEvents()
        XCTAssertEqual(events.count, 5, "each its own completion event")
    }

    func testDedupeFalseFetchesEachOnItsOwn() async throws {
        let body = serve("/each.bin", size: 100 * 1024, seed: 8)
        let s = try await session()
        let made = try await downloadTogether("/each.bin", count: 4, dedupe: false, session: s)
        XCTAssertEqual(server.requests(for: "/each.bin").count, 4, "dedupe false: one GET each")
        for (_, destination) in made { assertFile(destination, equals: body) }
    }

    /// A follower cancelled goes alone; the leader cancelled hands the fetch on: the
    /// server sees the second GET only then, and the rest still get whole files.
    func testCancellingTheLeaderHandsTheFetchOn() async throws {
        let body = serve("/handed.bin", size: 100 * 1024, seed: 9)
        server.set(.holdAnswers, on: "/handed.bin")
        let s = try await session()
        var made: [FerryTransfer] = []
        for i in 0..<3 {
            made.append(try await s.download(server.url("/handed.bin"), options: ["destination": .string(downloads + "/h\(i).bin")]))
            if i == 0 { try await waitUntilAsync("the first GET held") { server.isHoldingAnswer(for: "/handed.bin") } }
        }
        try await made[0].cancel()
        try await waitUntilAsync("the second GET (the fetch handed on)") { server.requests(for: "/handed.bin").count == 2 }
        server.release("/handed.bin")
        let first = try await finish(made[0])
        XCTAssertEqual(first.state, "cancelled")
        for i in 1..<3 {
            let info = try await finish(made[i], timeout: 30)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
            assertFile(downloads + "/h\(i).bin", equals: body)
        }
        XCTAssertEqual(server.requests(for: "/handed.bin").count, 2)
    }

    /// `ferry get` merges one URL given three times; `--no-dedupe` fetches each: with the
    /// server holding its answers until both commands have queued, 1 + 3 GETs.
    func testFerryGetNoDedupe() async throws {
        let body = serve("/cli.bin", size: 100 * 1024, seed: 12)
        server.set(.holdAnswers, on: "/cli.bin")
        let url = server.url("/cli.bin")
        for (flags, dir) in [([String](), "merged"), (["--no-dedupe"], "separate")] {
            try FileManager.default.createDirectory(atPath: work + "/" + dir, withIntermediateDirectories: true)
            let r = try ferry(["get", url, url, url, "-d", work + "/" + dir] + flags)
            XCTAssertEqual(r.status, 0, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        }
        try await waitUntilAsync("the first GET, its answer held") { server.isHoldingAnswer(for: "/cli.bin") }
        server.release("/cli.bin")
        let transfers = try await client.listTransfers()
        XCTAssertEqual(transfers.count, 6)
        for t in transfers {
            let info = try await finish(t, timeout: 30)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
        }
        XCTAssertEqual(server.requests(for: "/cli.bin").count, 4, "one GET for the three merged, one each for --no-dedupe")
        for dir in ["merged", "separate"] {
            let names = try FileManager.default.contentsOfDirectory(atPath: work + "/" + dir)
            XCTAssertEqual(names.count, 3, "\(dir): \(names)")
            for name in names { assertFile(work + "/" + dir + "/" + name, equals: body) }
        }
    }
}
