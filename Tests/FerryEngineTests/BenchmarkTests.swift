import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// CurlEngine against `curl -o`, both fetching one large file from a local nginx.
/// Opt-in (it writes a GiB): FERRY_ENGINE_BENCH=1 swift test -c release --filter BenchmarkTests
/// FERRY_ENGINE_BENCH_MIB sets the size (default 1024); FERRY_ENGINE_BENCH_CONNECTIONS the
/// engine's connections (default 1).
final class BenchmarkTests: XCTestCase {
    private struct Sample {
        var wall: Double
        var cpu: Double
    }

    func testDownloadAgainstCurlFromNginx() throws {
        let env = ProcessInfo.processInfo.environment
        guard env["FERRY_ENGINE_BENCH"] != nil else { throw XCTSkip("set FERRY_ENGINE_BENCH=1 to run") }
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx"),
              FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else { throw XCTSkip("needs nginx and curl") }
        let mib = Int(env["FERRY_ENGINE_BENCH_MIB"] ?? "") ?? 1024
        let connections = Int(env["FERRY_ENGINE_BENCH_CONNECTIONS"] ?? "") ?? 1
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("www"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }

        // The file: 1 MiB of noise repeated.
        let source = dir.appendingPathComponent("www/big.bin").path
        let block = Data(TestData.bytes(count: 1 << 20, seed: 99))
        _ = FileManager.default.createFile(atPath: source, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: source))
        for _ in 0..<mib { handle.write(block) }
        try handle.close()

        let port = try TestNginx.freePort()
        let nginx = try Self.startNginx(in: dir, port: port)
        defer { nginx.terminate(); nginx.waitUntilExit() }
        let url = "http://127.0.0.1:\(port)/big.bin"
        try Self.waitForServer(port: port)

        let engine = CurlEngine()
        defer { engine.shutdown() }
        let done = DispatchSemaphore(value: 0)
        let outcomes = EventLog()
        engine.setEventHandler { event in
            outcomes.append(event)
            if case .completed = event { done.signal() }
        }

        var curlSamples: [Sample] = []
        var engineSamples: [Sample] = []
        let out = dir.appendingPathComponent("out.part").path
        for round in 0..<4 {
            // curl -o
            unlink(out)
            let c0 = Self.cpu(RUSAGE_CHILDREN.rawValue), t0 = Date()
            let curl = Process()
            curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            curl.arguments = ["-s", "-o", out, url]
            try curl.run()
            curl.waitUntilExit()
            let curlSample = Sample(wall: Date().timeIntervalSince(t0), cpu: Self.cpu(RUSAGE_CHILDREN.rawValue) - c0)
            XCTAssertEqual(curl.terminationStatus, 0)

            // CurlEngine (includes its fdatasync)
            unlink(out)
            let s0 = Self.cpu(RUSAGE_SELF.rawValue), t1 = Date()
            var request = EngineRequest(id: TransferID(round + 1), url: url, partPath: out)
            request.connections = connections
            engine.start(request)
            XCTAssertEqual(done.wait(timeout: .now() + 600), .success)
            let engineSample = Sample(wall: Date().timeIntervalSince(t1), cpu: Self.cpu(RUSAGE_SELF.rawValue) - s0)
            XCTAssertEqual(outcomes.outcome(of: TransferID(round + 1), timeout: 0),
                           .succeeded(bytesOnDisk: Int64(mib) << 20, sha256: nil))
            if round > 0 { // round 0 warms the page cache
                curlSamples.append(curlSample)
                engineSamples.append(engineSample)
            }
        }
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        let cw = median(curlSamples.map(\.wall)), cc = median(curlSamples.map(\.cpu))
        let ew = median(engineSamples.map(\.wall)), ec = median(engineSamples.map(\.cpu))
        print(String(format: "BENCH %d MiB, %d connection(s)  curl: wall %.3f s cpu %.3f s | engine: wall %.3f s cpu %.3f s | ratio wall %.3f cpu %.3f",
                     mib, connections, cw, cc, ew, ec, ew / cw, ec / cc))
    }

    private static func cpu(_ who: Int32) -> Double {
        var usage = rusage()
        getrusage(who, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    private static func startNginx(in dir: URL, port: Int) throws -> Process {
        let root = dir.path
        let conf = """
        daemon off;
        master_process off;
        worker_processes 1;
        pid \(root)/nginx.pid;
        error_log stderr warn;
        events { worker_connections 64; }
        http {
            access_log off;
            sendfile on;
            tcp_nopush on;
            client_body_temp_path \(root)/tmp-body;
            proxy_temp_path \(root)/tmp-proxy;
            fastcgi_temp_path \(root)/tmp-fcgi;
            uwsgi_temp_path \(root)/tmp-uwsgi;
            scgi_temp_path \(root)/tmp-scgi;
            server {
                listen 127.0.0.1:\(port);
                root \(root)/www;
            }
        }
        """
        try conf.write(toFile: "\(root)/nginx.conf", atomically: true, encoding: .utf8)
        let nginx = Process()
        nginx.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
        nginx.arguments = ["-p", root, "-c", "\(root)/nginx.conf", "-e", "stderr"]
        try nginx.run()
        return nginx
    }

    /// Bounded wait for nginx to accept connections.
    private static func waitForServer(port: Int) throws {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            close(fd)
            if rc == 0 { return }
            usleep(20_000) // polling a port that is not up yet; not synchronising with the engine
        }
        throw XCTSkip("nginx did not start")
    }
}
