import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A batch is everything queued until nothing has been queued, waiting or running for
/// the settle time (1 s by default): a script that hands over files one call at a time
/// gets one AllFinished (and so one notification), not one per file that happened to
/// finish before the next call.
final class BatchTests: FerryTestCase {
    func testOneThousandOneByOneDownloadsEndOneBatch() async throws {
        // A settle time that a slow machine's longest pause between two calls stays under
        // (each call waits for its transfer to be stored): what is tested is that pauses
        // shorter than the settle time do not end the batch.
        try await stopFerryd()
        try await startFerryd(["--batch-settle", "5"])
        let count = 1_000
        for i in 0..<count { _ = serve("/b\(i).bin", size: 512, seed: UInt64(i)) }
        let s = try await session()
        var paths: [String] = []
        for i in 0..<count {
            // One call at a time, each answered before the next is sent, as a shell loop does.
            let t = try await s.download(server.url("/b\(i).bin"), options: ["destination": .string(work + "/b\(i).bin")])
            paths.append(t.path)
        }
        try await signals.wait("the manager's AllFinished", timeout: 120) { s in
            s.contains { $0.member == "AllFinished" && $0.path == BusClient.managerPath }
        }
        let batches = signals.signals(path: BusClient.managerPath, member: "AllFinished")
        XCTAssertEqual(batches.count, 1)
        XCTAssertEqual(batches.first?.args.map { $0.uint32 ?? 0 }, [UInt32(count), 0, 0], "one batch with every file in it")
        let completed = Set(signals.signals(member: "Completed").map(\.path))
        XCTAssertEqual(completed, Set(paths))
        // Many files finished before the next call came: without the settle time each of
        // those moments would have ended a batch.
        XCTAssertGreaterThan(signals.signals(member: "AllFinished").filter { $0.path == s.path }.count, 1,
                             "the session's own AllFinished is not held back")
    }
}
