import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Against a real HTTP/2 server (nginx over TLS, with a test CA ferryd is told to
/// trust): transfers to one origin share a connection as streams, so the limits, which
/// count connections, let many more run at once than the 6 connections they allow.
final class HTTP2Tests: FerryTestCase {
    private var nginx: ChildProcess?

    /// A free loopback port (bound, read, closed).
    func freePort() throws -> Int { try TestNginx.freePort() }

    /// nginx serving `root` over TLS (`TestNginx`), stopped when the test ends.
    func startNginx(root: String, certificates: TestCertificates, httpDirectives: String = "",
                            serverDirectives: String = "", http2: Bool = true) throws
        -> (base: String, accessLog: String) {
        let server = try TestNginx(in: work + "/nginx", root: root, certificates: certificates, httpDirectives: httpDirectives,
                                   serverDirectives: serverDirectives, http2: http2)
        nginx = server.process
        cleanups.append { server.stop() }
        extraLogs.append { server.log }
        return (server.base, server.accessLog)
    }

    /// The most transfers among `paths` that were running at the same time (from their
    /// State signals).
    private func mostRunningAtOnce(_ paths: Set<String>) -> Int {
        var running: Set<String> = []
        var most = 0
        for s in signals.all where s.member == "PropertiesChanged" && paths.contains(s.path) {
            guard let state = s.changed["State"]?.string else { continue }
            if state == "running" { running.insert(s.path) } else { running.remove(s.path) }
            most = max(most, running.count)
        }
        return most
    }

    /// How many transfers among `paths` are running by the State signals in `sigs`.
    private func runningNow(_ sigs: [RecordedSignal], _ paths: Set<String>) -> Int {
        var running: Set<String> = []
        for s in sigs where s.member == "PropertiesChanged" && paths.contains(s.path) {
            guard let state = s.changed["State"]?.string else { continue }
            if state == "running" { running.insert(s.path) } else { running.remove(s.path) }
        }
        return running.count
    }

    /// `count` files of 24 KiB under a new site folder, and their bodies.
    func makeSite(count: Int) throws -> (root: String, bodies: [[UInt8]]) {
        let root = work + "/site"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        var bodies: [[UInt8]] = []
        for i in 0..<count {
            let body = TestData.bytes(count: 24 * 1024, seed: UInt64(100 + i))
            bodies.append(body)
            FileManager.default.createFile(atPath: root + "/f\(i).bin", contents: Data(body))
        }
        return (root, bodies)
    }

    /// A relay to nginx at `base` that can cut its connections, stopped with the test.
    private func cuttingProxy(to base: String) throws -> CuttingProxy {
        guard let port = URLComponents(string: base)?.port else { throw TestProcessError("no port in \(base)") }
        let proxy = try CuttingProxy(to: port)
        cleanups.append { proxy.stop() }
        return proxy
    }

    /// ferryd again, trusting the test CA.
    func restartTrusting(_ certificates: TestCertificates) async throws {
        try await stopFerryd()
        try await startFerryd(extraEnvironment: ["CURL_CA_BUNDLE": certificates.authority])
    }

    /// Downloads `base/prefix f0.bin …` of the site into `work`, waits for each and checks it
    /// completed byte-exact; returns the transfers with their final properties.
    func fetchAll(_ s: BusSession, _ urlPrefix: String, bodies: [[UInt8]]) async throws -> [(FerryTransfer, TransferInfo)] {
        var transfers: [FerryTransfer] = []
        for i in bodies.indices {
            transfers.append(try await s.download(urlPrefix + "f\(i).bin", options: ["destination": .string(work + "/f\(i).bin")]))
        }
        var ended: [(FerryTransfer, TransferInfo)] = []
        for t in transfers {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorMessage)")
            ended.append((t, info))
        }
        for i in bodies.indices { assertFile(work + "/f\(i).bin", equals: bodies[i]) }
        return ended
    }

    /// nginx's access log, a line per request: connection serial, protocol, status, path, TLS session reused.
    func accessLogLines(_ path: String) throws -> [[Substring]] { try TestNginx.accessLogLines(path) }

    func testTransfersToAnHTTP2OriginShareConnectionsAndRunBeyondTheConnectionLimit() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 60
        let (root, bodies) = try makeSite(count: count)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates)
        try await restartTrusting(certificates)

        // At 16 KiB/s a request each takes 1.5 s: six at a time would take 15 s, and
        // more than six run at once only if they share connections.
        let ended = try await fetchAll(try await session("com.example.H2"), base + "/slow/", bodies: bodies)

        let most = mostRunningAtOnce(Set(ended.map(\.0.path)))
        XCTAssertGreaterThan(most, 6, "more transfers ran at once than the 6 connections allowed")
        let lines = try accessLogLines(accessLog)
        XCTAssertEqual(lines.count, count, "one request per file")
        XCTAssertTrue(lines.allSatisfy { $0.count >= 2 && $0[1] == "HTTP/2.0" }, "every request over HTTP/2")
        let connections = Set(lines.map { $0[0] })
        XCTAssertLessThanOrEqual(connections.count, 6, "the requests shared connections: \(connections.count) for \(count) files")
    }

    /// nginx closes each HTTP/2 connection after 7 requests with a GOAWAY (its
    /// `keepalive_requests`), with other streams of the batch in flight or about to go:
    /// every download still completes on its first attempt, byte-exact, none failed or
    /// retried after a backoff.
    func testAGoawayMidBatchCostsNoTransferAnAttempt() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 60
        let (root, bodies) = try makeSite(count: count)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates, serverDirectives: "keepalive_requests 7;")
        try await restartTrusting(certificates)

        for (t, info) in try await fetchAll(try await session("com.example.Goaway"), base + "/", bodies: bodies) {
            XCTAssertEqual(info.attempts, 1, "\(t.path) took one attempt")
        }
        let lines = try accessLogLines(accessLog)
        XCTAssertGreaterThan(Set(lines.map { $0[0] }).count, 1, "nginx did close connections mid-batch")
    }

    /// nginx allows 4 streams a connection, below the 100 ferryd would open: the others
    /// wait for a stream (or take another connection), and none fails or is retried.
    func testAServerStreamLimitBelowOursQueuesStreamsAndFailsNone() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 40
        let (root, bodies) = try makeSite(count: count)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates,
                                               serverDirectives: "http2_max_concurrent_streams 4;")
        try await restartTrusting(certificates)
        let s = try await session("com.example.FewStreams", ["retries": .uint32(0)])
        for (t, info) in try await fetchAll(s, base + "/slow/", bodies: bodies) {
            XCTAssertEqual(info.attempts, 1, "\(t.path) took one attempt")
        }
        let lines = try accessLogLines(accessLog)
        XCTAssertEqual(lines.count, count, "one request per file")
        XCTAssertTrue(lines.allSatisfy { $0.count >= 3 && $0[1] == "HTTP/2.0" && $0[2] == "200" }, "every request over HTTP/2, answered 200")
    }

    /// Upload bodies go over HTTP/2 too: six PUTs to nginx (its WebDAV module stores
    /// them) arrive byte-exact, each answered 201 over HTTP/2.
    func testUploadsOverHTTP2ArriveByteExact() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, _) = try makeSite(count: 1)
        try FileManager.default.createDirectory(atPath: root + "/up", withIntermediateDirectories: true)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates, serverDirectives: """
            location /up/ { dav_methods PUT; client_max_body_size 0; }
            """)
        try await restartTrusting(certificates)
        let s = try await session("com.example.H2Up", ["retries": .uint32(0)])
        var uploads: [(FerryTransfer, [UInt8])] = []
        for i in 0..<6 {
            let body = TestData.bytes(count: 700_000 + i * 1_001, seed: UInt64(500 + i))
            let file = work + "/u\(i).bin"
            FileManager.default.createFile(atPath: file, contents: Data(body))
            uploads.append((try await s.upload(base + "/up/u\(i).bin", file: file), body))
        }
        for (i, (t, body)) in uploads.enumerated() {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorMessage)")
            XCTAssertEqual(info.httpStatus, 201)
            XCTAssertEqual(info.bytesTransferred, Int64(body.count))
            assertFile(root + "/up/u\(i).bin", equals: body)
        }
        let puts = try accessLogLines(accessLog).filter { $0.count >= 4 && $0[3].hasPrefix("/up/") }
        XCTAssertEqual(puts.count, 6)
        XCTAssertTrue(puts.allSatisfy { $0[1] == "HTTP/2.0" && $0[2] == "201" }, "every PUT over HTTP/2: \(puts)")
    }

    /// The HTTP/2 connection dies with dozens of streams in flight (nginx's worker is
    /// killed; the master starts another): every transfer is tried again at once and
    /// completes byte-exact, though its session allows no retry at all.
    func testAConnectionLostWithStreamsInFlightFailsNoTransfer() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 40
        let (root, bodies) = try makeSite(count: count)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates)
        try await restartTrusting(certificates)
        let s = try await session("com.example.Dropped", ["retries": .uint32(0)])
        var transfers: [FerryTransfer] = []
        for i in bodies.indices {
            transfers.append(try await s.download(base + "/slow/f\(i).bin", options: ["destination": .string(work + "/f\(i).bin")]))
        }
        // Every one has had bytes: all are streams in flight on the connection.
        let paths = Set(transfers.map(\.path))
        try await signals.wait("a Progress of every transfer", timeout: 20) { sigs in
            Set(sigs.filter { $0.member == "Progress" && paths.contains($0.path) }.map(\.path)).count == paths.count
        }
        guard let master = nginx?.pid else { return XCTFail("nginx is not running") }
        let workers = childProcesses(of: master)
        XCTAssertFalse(workers.isEmpty, "nginx has a worker")
        for worker in workers { _ = Glibc.kill(worker, SIGKILL) }

        var cutShort = 0
        for t in transfers {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorName) \(info.errorMessage)")
            if info.attempts > 1 { cutShort += 1 }
        }
        for i in bodies.indices { assertFile(work + "/f\(i).bin", equals: bodies[i]) }
        XCTAssertGreaterThan(cutShort, count / 2, "the loss cut most attempts short")
        XCTAssertFalse(try accessLogLines(accessLog).isEmpty, "the new worker served the tries again")
    }

    /// An HTTP/1.1 server that closes every connection after one request, so each
    /// download needs a new one: from the second on, the TLS handshake resumes the
    /// session an earlier download's connection made (ferryd's attempts share TLS
    /// sessions; libcurl keeps them per handle otherwise, and each attempt's is new).
    func testNewConnectionsResumeTheTLSSessionOfEarlierOnes() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, bodies) = try makeSite(count: 4)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates,
                                               serverDirectives: "keepalive_timeout 0; ssl_session_cache shared:TLS:1m;", http2: false)
        try await restartTrusting(certificates)
        let s = try await session("com.example.Resumed")
        for i in bodies.indices {
            let t = try await s.download(base + "/f\(i).bin", options: ["destination": .string(work + "/f\(i).bin")])
            let info = try await finish(t, timeout: 30)
            XCTAssertEqual(info.state, "completed", "\(info.errorName) \(info.errorMessage)")
            assertFile(work + "/f\(i).bin", equals: bodies[i])
        }
        let lines = try accessLogLines(accessLog)
        XCTAssertEqual(lines.count, 4)
        XCTAssertEqual(Set(lines.map { $0[0] }).count, 4, "a connection per download: \(lines)")
        XCTAssertEqual(lines.dropFirst().map { String($0[4]) }, ["r", "r", "r"],
                       "every connection after the first resumed a TLS session: \(lines)")
    }

    /// The server of an origin that answered over HTTP/2 stops: a download to it meets a
    /// refused connection, its own failure and no lost stream (libcurl on OpenSSL tells
    /// ferryd which requests went out as streams), so with no retries allowed it fails
    /// after one attempt, saying why.
    func testARefusedConnectionToAnHTTP2OriginIsNoLostStream() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, bodies) = try makeSite(count: 2)
        let (base, _) = try startNginx(root: root, certificates: certificates)
        try await restartTrusting(certificates)
        let s = try await session("com.example.StoppedOrigin", ["retries": .uint32(0)])
        let first = try await s.download(base + "/f0.bin", options: ["destination": .string(work + "/f0.bin")])
        try await finishCompleted(first, at: work + "/f0.bin", equals: bodies[0])
        let server = try XCTUnwrap(nginx)
        server.kill(SIGTERM)
        XCTAssertNotNil(server.waitForExit(timeout: 10), "nginx stopped")

        let second = try await s.download(base + "/f1.bin", options: ["destination": .string(work + "/f1.bin")])
        let info = try await finish(second, timeout: 60)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network")
        XCTAssertTrue(info.errorMessage.contains("refused"), info.errorMessage)
        XCTAssertEqual(info.attempts, 1, "a refused connection costs the attempt: no free tries")
    }

    /// The HTTP/2 connection is closed under its streams, no GOAWAY first (as when the
    /// server goes away): see `cutUnderSixtyStreams`.
    func testAConnectionClosedWithSixtyStreamsInFlightFailsNoTransfer() async throws {
        try await cutUnderSixtyStreams(reset: false)
    }

    /// The HTTP/2 connection is reset under its streams (as by a middlebox that drops
    /// it): see `cutUnderSixtyStreams`.
    func testAConnectionResetWithSixtyStreamsInFlightFailsNoTransfer() async throws {
        try await cutUnderSixtyStreams(reset: true)
    }

    /// A network path that drops under a busy HTTP/2 connection: a relay between ferryd
    /// and nginx cuts the connection while 55 or more of 60 transfers are streams on it —
    /// ten or more answered and part-way through their bodies, twenty or more still queued
    /// at the server (its `limit_req`) with no answer yet. Every transfer is tried again at once
    /// on a new connection and completes byte-exact, though its session allows no retry:
    /// none counts the loss as a failed attempt (none waits to retry, none keeps an error).
    private func cutUnderSixtyStreams(reset: Bool) async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 60
        let (root, bodies) = try makeSite(count: count)
        // 20 requests a second are answered (3 s for all), each body at 8 KiB/s (3 s a file).
        let (base, accessLog) = try startNginx(
            root: root, certificates: certificates,
            httpDirectives: "limit_req_zone $binary_remote_addr zone=queue:1m rate=20r/s;",
            serverDirectives: "location /queued/ { alias \(root)/; limit_rate 8k; limit_req zone=queue burst=500; }")
        let proxy = try cuttingProxy(to: base)
        try await restartTrusting(certificates)

        let s = try await session("com.example.Cut", ["retries": .uint32(0)])
        var transfers: [FerryTransfer] = []
        for i in bodies.indices {
            transfers.append(try await s.download("https://127.0.0.1:\(proxy.port)/queued/f\(i).bin",
                                                  options: ["destination": .string(work + "/f\(i).bin")]))
        }
        let paths = Set(transfers.map(\.path))
        func answered(_ sigs: [RecordedSignal]) -> Int {
            Set(sigs.filter { $0.member == "PropertiesChanged" && paths.contains($0.path) && $0.changed["HttpStatus"] != nil }
                .map(\.path)).count
        }
        try await signals.wait("55 of the \(count) running, 10 of them answered", timeout: 20) { sigs in
            self.runningNow(sigs, paths) >= 55 && answered(sigs) >= 10
        }
        let connectionsBefore = proxy.connectionsAccepted
        XCTAssertGreaterThanOrEqual(proxy.cutAll(reset: reset), 1, "a connection was cut")
        let unanswered = count - answered(signals.all)

        for t in transfers {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorName) \(info.errorMessage)")
            XCTAssertEqual(info.errorName, "", "\(t.path) keeps no error")
        }
        for i in bodies.indices { assertFile(work + "/f\(i).bin", equals: bodies[i]) }
        let waitedToRetry = signals.all.filter {
            $0.member == "PropertiesChanged" && paths.contains($0.path) && $0.changed["WaitingReason"]?.string == "retry"
        }
        XCTAssertEqual(waitedToRetry.count, 0, "no transfer waited to retry: the loss was no failed attempt")
        XCTAssertGreaterThanOrEqual(unanswered, 20, "many streams were still unanswered when the connection went")
        XCTAssertLessThanOrEqual(connectionsBefore, 2, "the streams shared a connection before the cut")
        XCTAssertGreaterThan(proxy.connectionsAccepted, connectionsBefore, "the tries again went over a new connection")
        XCTAssertTrue(try accessLogLines(accessLog).allSatisfy { $0.count >= 2 && $0[1] == "HTTP/2.0" }, "every request over HTTP/2")
    }

    /// A download with a mirror, on one connection: its ranges go as HTTP/2 streams. The
    /// connection is cut part-way through the body; the download goes on (from the other
    /// source, or tried again at once from the bytes it has), though its session allows no
    /// retry, and the file arrives byte-exact.
    func testAMirroredDownloadCutPartWayOverHTTP2GoesOnWithoutARetry() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, _) = try makeSite(count: 0)
        let body = TestData.bytes(count: 384 * 1024 + 321, seed: 77)
        FileManager.default.createFile(atPath: root + "/m.bin", contents: Data(body))
        // 64 KiB/s a request: 6 s for the whole file.
        let (base, accessLog) = try startNginx(
            root: root, certificates: certificates,
            serverDirectives: "location /paced/ { alias \(root)/; limit_rate 64k; } location /mirror/ { alias \(root)/; limit_rate 64k; }")
        let proxy = try cuttingProxy(to: base)
        try await restartTrusting(certificates)
        let s = try await session("com.example.H2Mirrors", ["retries": .uint32(0)])
        let origin = "https://127.0.0.1:\(proxy.port)"
        let t = try await s.download(origin + "/paced/m.bin", options: [
            "destination": .string(work + "/m.bin"), "mirrors": .stringArray([origin + "/mirror/m.bin"])])
        try await signals.wait("bytes of the download", timeout: 20) { sigs in
            sigs.contains { $0.member == "Progress" && $0.path == t.path }
        }
        XCTAssertGreaterThanOrEqual(proxy.cutAll(reset: false), 1, "a connection was cut")

        let info = try await finish(t, timeout: 60)
        XCTAssertEqual(info.state, "completed", "\(info.errorName) \(info.errorMessage)")
        XCTAssertEqual(info.errorName, "", "the loss left no error")
        assertFile(work + "/m.bin", equals: body)
        let waitedToRetry = signals.all.filter {
            $0.member == "PropertiesChanged" && $0.path == t.path && $0.changed["WaitingReason"]?.string == "retry"
        }
        XCTAssertEqual(waitedToRetry.count, 0, "the download did not wait to retry: the loss was no failed attempt")
        let lines = try accessLogLines(accessLog)
        XCTAssertTrue(lines.allSatisfy { $0.count >= 2 && $0[1] == "HTTP/2.0" }, "every request over HTTP/2: \(lines)")
    }

    /// A download with a mirror, on one connection, is the first to reach an HTTP/2
    /// origin: its answer (a range, over HTTP/2) marks the origin as multiplexing, so the
    /// twelve downloads queued after it all start at once as streams, before any of them
    /// is answered (nginx holds their answers back, one each 10 s).
    func testARangedAnswerOverHTTP2LetsTheNextDownloadsStartAsStreams() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 12
        let (root, _) = try makeSite(count: count)
        let body = TestData.bytes(count: 96 * 1024 + 7, seed: 78)
        FileManager.default.createFile(atPath: root + "/m.bin", contents: Data(body))
        // The first request to /held/ is answered at once, each later one 10 s after the last.
        let (base, _) = try startNginx(
            root: root, certificates: certificates,
            httpDirectives: "limit_req_zone $binary_remote_addr zone=held:1m rate=6r/m;",
            serverDirectives: "location /held/ { alias \(root)/; limit_req zone=held burst=50; } location /mirror/ { alias \(root)/; }")
        try await restartTrusting(certificates)
        let s = try await session("com.example.H2RangedFirst")
        let mirrored = try await s.download(base + "/held/m.bin", options: [
            "destination": .string(work + "/m.bin"), "mirrors": .stringArray([base + "/mirror/m.bin"])])
        try await finishCompleted(mirrored, at: work + "/m.bin", equals: body)

        var held: [FerryTransfer] = []
        for i in 0..<count {
            held.append(try await s.download(base + "/held/f\(i).bin", options: ["destination": .string(work + "/f\(i).bin")]))
        }
        let paths = Set(held.map(\.path))
        try await signals.wait("all \(count) downloads running") { self.runningNow($0, paths) == count }
        // In the order the signals came: none of them was answered before all ran.
        var running: Set<String> = []
        var answeredFirst: [String] = []
        for sig in signals.all where sig.member == "PropertiesChanged" && paths.contains(sig.path) {
            if sig.changed["HttpStatus"] != nil { answeredFirst.append(sig.path) }
            if let state = sig.changed["State"]?.string {
                if state == "running" { running.insert(sig.path) } else { running.remove(sig.path) }
            }
            if running.count == count { break }
        }
        XCTAssertEqual(running.count, count)
        XCTAssertEqual(answeredFirst, [], "all started as streams, before any answer")
        for t in held { try? await t.cancel() } // nginx would hold them for two minutes
    }

    /// A download with `connections=4` from an HTTP/2 server: its ranges do not multiplex
    /// on one connection (a server's per-connection limits would hold them all) — each
    /// asks for HTTP/1.1 on a connection of its own — and the file arrives byte-exact.
    func testASegmentedDownloadFromAnHTTP2ServerTakesConnectionsOfItsOwn() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, _) = try makeSite(count: 0)
        let body = TestData.bytes(count: 6 * 1024 * 1024 + 12_345, seed: 4242)
        FileManager.default.createFile(atPath: root + "/big.bin", contents: Data(body))
        // 2 MiB/s a request: one connection alone would take 3 s.
        let (base, accessLog) = try startNginx(root: root, certificates: certificates,
                                               serverDirectives: "location /paced/ { alias \(root)/; limit_rate 2m; }")
        try await restartTrusting(certificates)
        let s = try await session("com.example.H2Ranges", ["retries": .uint32(0)])
        let t = try await s.download(base + "/paced/big.bin", options: ["destination": .string(work + "/big.bin"),
                                                                        "connections": .uint32(4)])
        let info = try await finish(t, timeout: 60)
        XCTAssertEqual(info.state, "completed", "\(info.errorName) \(info.errorMessage)")
        assertFile(work + "/big.bin", equals: body)

        let lines = try accessLogLines(accessLog)
        let ranges = lines.filter { $0.count >= 3 && $0[2] == "206" }
        XCTAssertGreaterThanOrEqual(ranges.count, 2, "the file came in ranges: \(lines)")
        XCTAssertTrue(lines.allSatisfy { $0.count >= 2 && $0[1] == "HTTP/1.1" }, "every request over HTTP/1.1: \(lines)")
        XCTAssertGreaterThanOrEqual(Set(ranges.map { $0[0] }).count, 2, "the ranges came over connections of their own: \(ranges)")
    }

    /// Uploads too: twelve PUT bodies under way as streams of one HTTP/2 connection (the
    /// origin known to multiplex from a download before them) when a relay resets it.
    /// Each is sent again at once, in a session allowing no retry, and nginx stores every
    /// body byte-exact, answered 201; none waits to retry.
    func testUploadsUnderWayWhenTheirConnectionIsResetAreSentAgainWithoutARetry() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, bodies) = try makeSite(count: 1)
        try FileManager.default.createDirectory(atPath: root + "/up", withIntermediateDirectories: true)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates, serverDirectives: """
            location /up/ { dav_methods PUT; client_max_body_size 0; }
            """)
        let proxy = try cuttingProxy(to: base)
        try await restartTrusting(certificates)
        let origin = "https://127.0.0.1:\(proxy.port)"
        // 12 bodies of 300 KB share 1 MiB/s: about 3.5 s for all.
        let s = try await session("com.example.H2UpCut", ["retries": .uint32(0), "speed-limit": .uint64(1024 * 1024)])
        let probe = try await s.download(origin + "/f0.bin", options: ["destination": .string(work + "/f0.bin")])
        let probed = try await finish(probe, timeout: 30)
        XCTAssertEqual(probed.state, "completed")
        assertFile(work + "/f0.bin", equals: bodies[0])

        var uploads: [(FerryTransfer, [UInt8])] = []
        for i in 0..<12 {
            let body = TestData.bytes(count: 300_000 + i * 1_001, seed: UInt64(900 + i))
            let file = work + "/u\(i).bin"
            FileManager.default.createFile(atPath: file, contents: Data(body))
            uploads.append((try await s.upload(origin + "/up/u\(i).bin", file: file), body))
        }
        let paths = Set(uploads.map(\.0.path))
        try await signals.wait("12 uploads running, 6 of them sending", timeout: 20) { sigs in
            self.runningNow(sigs, paths) == paths.count
                && Set(sigs.filter { $0.member == "Progress" && paths.contains($0.path) }.map(\.path)).count >= 6
        }
        XCTAssertGreaterThanOrEqual(proxy.cutAll(reset: true), 1, "a connection was cut")

        for (i, (t, body)) in uploads.enumerated() {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorName) \(info.errorMessage)")
            XCTAssertEqual(info.httpStatus, 201)
            assertFile(root + "/up/u\(i).bin", equals: body)
        }
        let waitedToRetry = signals.all.filter {
            $0.member == "PropertiesChanged" && paths.contains($0.path) && $0.changed["WaitingReason"]?.string == "retry"
        }
        XCTAssertEqual(waitedToRetry.count, 0, "no upload waited to retry")
        let puts = try accessLogLines(accessLog).filter { $0.count >= 4 && $0[3].hasPrefix("/up/") && $0[2] == "201" }
        XCTAssertEqual(puts.count, 12, "each body stored once, after the cut")
        XCTAssertTrue(puts.allSatisfy { $0[1] == "HTTP/2.0" }, "every PUT over HTTP/2: \(puts)")
    }
}
