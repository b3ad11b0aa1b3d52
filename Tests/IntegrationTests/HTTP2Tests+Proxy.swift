import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// HTTPS through a session's proxy, as on a network whose only way out is an HTTP proxy:
/// libcurl asks the proxy for a tunnel (`CONNECT`) and speaks TLS, and HTTP/2 where the
/// server offers it, inside. The proxy's own answer to `CONNECT` is never taken for the
/// server's, every kind of request goes through it (ferryd's environment says to reach
/// every host directly, `no_proxy=*`, which a session's proxy overrides), and streams
/// share tunnels as they share direct connections.
extension HTTP2Tests {
    /// A tunnelling proxy on a free loopback port (Python): it answers `CONNECT host:port`
    /// with `200 Connection established`, relays both ways, and logs a line per tunnel;
    /// anything but `CONNECT` gets a 405. Returns its URL and its log.
    func startTunnellingProxy() throws -> (url: String, log: String) {
        let dir = work + "/tunnel"
        let log = dir + "/tunnels.log"
        let script = """
        import socket, sys, threading
        log = open(sys.argv[1], "a", buffering=1)
        lock = threading.Lock()

        def relay(source, sink):
            try:
                while True:
                    data = source.recv(65536)
                    if not data:
                        break
                    sink.sendall(data)
            except OSError:
                pass
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        def serve(client):
            head = b""
            while b"\\r\\n\\r\\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    client.close()
                    return
                head += chunk
            head, early = head.split(b"\\r\\n\\r\\n", 1)
            method, target = head.split(b"\\r\\n")[0].decode("latin-1").split(" ")[:2]
            if method != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
                client.close()
                return
            host, port = target.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)))
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
                client.close()
                return
            with lock:
                log.write("CONNECT " + target + "\\n")
            client.sendall(b"HTTP/1.1 200 Connection established\\r\\nProxy-Agent: ferry-test\\r\\n\\r\\n")
            if early:
                upstream.sendall(early)
            back = threading.Thread(target=relay, args=(upstream, client), daemon=True)
            back.start()
            relay(client, upstream)
            back.join()
            client.close()
            upstream.close()

        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(128)
        print(server.getsockname()[1], flush=True)
        while True:
            connection, _ = server.accept()
            threading.Thread(target=serve, args=(connection,), daemon=True).start()
        """
        let port = try startPythonServer(script, in: dir, arguments: [log], what: "the tunnelling proxy")
        return ("http://127.0.0.1:\(port)", log)
    }

    /// ferryd again, trusting the test CA and told to reach every host directly.
    private func restartTrustingWithoutProxies(_ certificates: TestCertificates) async throws {
        try await stopFerryd()
        try await startFerryd(extraEnvironment: ["CURL_CA_BUNDLE": certificates.authority, "no_proxy": "*", "NO_PROXY": "*"])
    }

    /// The `CONNECT` targets the proxy logged, one per tunnel.
    private func tunnels(_ log: String) -> [String] {
        ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map { String($0.dropFirst("CONNECT ".count)) }
    }

    /// 30 downloads from an HTTP/2 origin over HTTPS, through the session's proxy: each
    /// byte-exact on its first attempt, every request over HTTP/2, every connection nginx
    /// saw a tunnel of the proxy, and the downloads shared tunnels as streams (at most
    /// the 6 connections the session allows a host).
    func testHTTPSDownloadsThroughASessionProxyShareItsTunnelsAsHTTP2Streams() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let count = 30
        let (root, bodies) = try makeSite(count: count)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates)
        let proxy = try startTunnellingProxy()
        try await restartTrustingWithoutProxies(certificates)
        let s = try await session("com.example.Tunnelled", ["proxy": .string(proxy.url), "retries": .uint32(0)])

        for (t, info) in try await fetchAll(s, base + "/", bodies: bodies) {
            XCTAssertEqual(info.attempts, 1, "\(t.path) took one attempt")
            XCTAssertEqual(info.httpStatus, 200, "\(t.path): the server's status, not the proxy's")
        }
        let lines = try accessLogLines(accessLog)
        XCTAssertEqual(lines.count, count, "one request per file")
        XCTAssertTrue(lines.allSatisfy { $0.count >= 2 && $0[1] == "HTTP/2.0" }, "every request over HTTP/2: \(lines)")
        let opened = tunnels(proxy.log)
        let origin = String(base.dropFirst("https://".count))
        XCTAssertFalse(opened.isEmpty, "the downloads went through the proxy")
        XCTAssertTrue(opened.allSatisfy { $0 == origin }, "tunnels to the origin only: \(opened)")
        XCTAssertEqual(Set(lines.map { $0[0] }).count, opened.count, "every connection nginx saw was a tunnel")
        XCTAssertLessThanOrEqual(opened.count, 6, "the streams shared tunnels: \(opened.count) for \(count) files")
    }

    /// A download over four ranges and a PUT, over HTTPS through the session's proxy:
    /// each range takes a tunnel of its own (ranges go over HTTP/1.1), the PUT's body
    /// arrives byte-exact, and nothing reached nginx but through a tunnel.
    func testRangesAndUploadsOverHTTPSGoThroughTheSessionProxy() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, _) = try makeSite(count: 0)
        let body = TestData.bytes(count: 6 * 1024 * 1024 + 4_321, seed: 4343)
        FileManager.default.createFile(atPath: root + "/big.bin", contents: Data(body))
        try FileManager.default.createDirectory(atPath: root + "/up", withIntermediateDirectories: true)
        // 2 MiB/s a request, so that the download is split before one connection ends it.
        let (base, accessLog) = try startNginx(root: root, certificates: certificates, serverDirectives: """
            location /paced/ { alias \(root)/; limit_rate 2m; }
            location /up/ { dav_methods PUT; client_max_body_size 0; }
            """)
        let proxy = try startTunnellingProxy()
        try await restartTrustingWithoutProxies(certificates)
        let s = try await session("com.example.TunnelledRanges", ["proxy": .string(proxy.url), "retries": .uint32(0)])

        let download = try await s.download(base + "/paced/big.bin", options: ["destination": .string(work + "/big.bin"),
                                                                               "connections": .uint32(4)])
        let sent = TestData.bytes(count: 900_001, seed: 4344)
        FileManager.default.createFile(atPath: work + "/up.bin", contents: Data(sent))
        let upload = try await s.upload(base + "/up/up.bin", file: work + "/up.bin")

        let downloaded = try await finish(download, timeout: 60)
        XCTAssertEqual(downloaded.state, "completed", "\(downloaded.errorName) \(downloaded.errorMessage)")
        assertFile(work + "/big.bin", equals: body)
        let uploaded = try await finish(upload, timeout: 60)
        XCTAssertEqual(uploaded.state, "completed", "\(uploaded.errorName) \(uploaded.errorMessage)")
        XCTAssertEqual(uploaded.httpStatus, 201)
        assertFile(root + "/up/up.bin", equals: sent)

        let lines = try accessLogLines(accessLog)
        let ranges = lines.filter { $0.count >= 4 && $0[2] == "206" }
        XCTAssertGreaterThanOrEqual(Set(ranges.map { $0[0] }).count, 2, "the ranges came over tunnels of their own: \(lines)")
        XCTAssertEqual(lines.filter { $0.count >= 4 && $0[3] == "/up/up.bin" }.count, 1, "one PUT: \(lines)")
        XCTAssertEqual(Set(lines.map { $0[0] }).count, tunnels(proxy.log).count, "every connection nginx saw was a tunnel: \(lines)")
    }
}
