import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// connections=8 against connections=1 (and aria2c -x8 -s8 -k1M when installed), from
/// the test server limited to 8 MB/s per connection. Opt-in, it takes a while:
///   FERRY_ENGINE_BENCH=1 swift test -c release --filter SegmentedBenchmarkTests
/// FERRY_ENGINE_BENCH_SEGMENTED_MIB sets the size (default 128).
final class SegmentedBenchmarkTests: XCTestCase {
    func testEightConnectionsAgainstOne() throws {
        let env = ProcessInfo.processInfo.environment
        guard env["FERRY_ENGINE_BENCH"] != nil else { throw XCTSkip("set FERRY_ENGINE_BENCH=1 to run") }
        let mib = Int(env["FERRY_ENGINE_BENCH_SEGMENTED_MIB"] ?? "") ?? 128
        let perConnection = 8_000_000
        let server = TestHTTPServer()
        try server.start()
        defer { server.stop() }
        let body = TestData.bytes(count: mib << 20, seed: 98)
        let digest = TestData.sha256Hex(body)
        server.add(path: "/big.bin", body: body, etag: "\"bench\"")
        server.set(.slow(bytesPerSecond: perConnection), on: "/big.bin")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }

        let engine = CurlEngine()
        defer { engine.shutdown() }
        let log = EventLog()
        engine.setEventHandler { log.append($0) }
        var nextID: TransferID = 0

        func ferry(connections: Int) -> Double {
            nextID += 1
            let part = dir.appendingPathComponent("ferry-\(nextID).part").path
            // No hashing while timed (aria2c does not hash either); checked after.
            var request = EngineRequest(id: nextID, url: server.url("/big.bin"), partPath: part)
            request.connections = connections
            let started = Date()
            engine.start(request)
            let outcome = log.outcome(of: nextID, timeout: 900)
            let wall = Date().timeIntervalSince(started)
            XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
            XCTAssertEqual((try? Data(contentsOf: URL(fileURLWithPath: part))).map(TestData.sha256Hex), digest)
            unlink(part)
            return wall
        }

        func aria2() throws -> Double? {
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/aria2c") else { return nil }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/aria2c")
            process.arguments = ["-q", "-x8", "-s8", "-k1M", "--file-allocation=none", "--allow-overwrite=true",
                                 "-d", dir.path, "-o", "aria2.bin", server.url("/big.bin")]
            let started = Date()
            try process.run()
            process.waitUntilExit()
            let wall = Date().timeIntervalSince(started)
            XCTAssertEqual(process.terminationStatus, 0)
            unlink(dir.appendingPathComponent("aria2.bin").path)
            return wall
        }

        let eight = ferry(connections: 8)
        let ariaWall = try aria2()
        let one = ferry(connections: 1)
        var line = String(format: "BENCH segmented %d MiB at %d B/s per connection: connections=8 %.2f s, connections=1 %.2f s, ratio %.2fx",
                          mib, perConnection, eight, one, one / eight)
        if let ariaWall {
            line += String(format: "; aria2c -x8 -s8 -k1M %.2f s (ferry/aria2c %.2f)", ariaWall, eight / ariaWall)
        }
        print(line)
    }
}
