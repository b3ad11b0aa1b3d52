import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// CurlEngine's PUT against `curl -T`, both to the test server (which hashes what it
/// receives), and how much the process's peak RSS grows while the engine uploads.
/// Opt-in: FERRY_ENGINE_BENCH=1 swift test -c release --filter UploadBenchmarkTests
/// FERRY_ENGINE_BENCH_UPLOAD_MIB sets the size (default 1024).
final class UploadBenchmarkTests: XCTestCase {
    func testPutAgainstCurl() throws {
        let env = ProcessInfo.processInfo.environment
        guard env["FERRY_ENGINE_BENCH"] != nil else { throw XCTSkip("set FERRY_ENGINE_BENCH=1 to run") }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else { throw XCTSkip("needs curl") }
        let mib = Int(env["FERRY_ENGINE_BENCH_UPLOAD_MIB"] ?? "") ?? 1024
        let server = TestHTTPServer()
        try server.start()
        defer { server.stop() }
        server.set(.acceptUploads(), on: "/up")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("upload.bin").path
        let block = Data(TestData.bytes(count: 1 << 20, seed: 97))
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        for _ in 0..<mib { handle.write(block) }
        try handle.close()

        let engine = CurlEngine()
        defer { engine.shutdown() }
        let log = EventLog()
        engine.setEventHandler { log.append($0) }
        var curlWalls: [Double] = []
        var engineWalls: [Double] = []
        var rssGrowth: Int = 0
        for round in 0..<3 {
            let curl = Process()
            curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            // No Expect: 100-continue (the engine sends none; the test server does not answer it).
            curl.arguments = ["-s", "-o", "/dev/null", "-H", "Expect:", "-T", path, server.url("/up")]
            let t0 = Date()
            try curl.run()
            curl.waitUntilExit()
            curlWalls.append(Date().timeIntervalSince(t0))
            XCTAssertEqual(curl.terminationStatus, 0)

            let source = try EngineUpload.open(path: path)
            defer { source.closeSource() }
            var request = EngineRequest(id: TransferID(round + 1), url: server.url("/up"), partPath: "")
            request.upload = source
            let before = Self.peakRSS()
            let t1 = Date()
            engine.start(request)
            XCTAssertEqual(log.outcome(of: TransferID(round + 1), timeout: 600), .succeeded(bytesOnDisk: Int64(mib) << 20, sha256: nil))
            engineWalls.append(Date().timeIntervalSince(t1))
            rssGrowth = max(rssGrowth, Self.peakRSS() - before)
        }
        XCTAssertEqual(Set(server.uploads(for: "/up").map(\.byteCount)), [mib << 20])
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        print(String(format: "BENCH upload %d MiB PUT: curl -T %.3f s, engine %.3f s, ratio %.3f; peak RSS grew by %d KiB during engine uploads (peak %d KiB in all)",
                     mib, median(curlWalls), median(engineWalls), median(engineWalls) / median(curlWalls), rssGrowth, Self.peakRSS()))
    }

    /// The process's peak resident set, in KiB.
    private static func peakRSS() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss
    }
}
