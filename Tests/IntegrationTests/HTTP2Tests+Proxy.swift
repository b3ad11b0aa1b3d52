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
    /// anything but `CONNECT` gets a 405. With `credentials` ("user:password") a
    /// `CONNECT` without them (Basic) gets a 407 and the log a line `refused`. Returns
    /// its URL and its log.
    func startTunnellingProxy(credentials: String? = nil) throws -> (url: String, log: String) {
        let dir = work + "/tunnel"
        let log = dir + "/tunnels.log"
        let script = """
        import base64, socket, sys, threading
        log = open(sys.argv[1], "a", buffering=1)
        wanted = None
        if len(sys.argv) > 2:
            wanted = "basic " + base64.b64encode(sys.argv[2].encode()).decode()
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
            if wanted is not None:
                given = [line.split(b":", 1)[1].strip().decode("latin-1") for line in head.split(b"\\r\\n")[1:]
                         if line.lower().startswith(b"proxy-authorization:")]
                if not given or given[0].lower() != wanted.lower():
                    with lock:
                        log.write("refused " + target + "\\n")
                    client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\\r\\nProxy-Authenticate: Basic realm=ferry\\r\\n"
                                   b"Content-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
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
        let port = try startPythonServer(script, in: dir, arguments: [log] + (credentials.map { [$0] } ?? []), what: "the tunnelling proxy")
        return ("http://127.0.0.1:\(port)", log)
    }

    /// ferryd again, trusting the test CA and told to reach every host directly.
    private func restartTrustingWithoutProxies(_ certificates: TestCertificates) async throws {
        try await stopFerryd()
        try await startFerryd(extraEnvironment: ["CURL_CA_BUNDLE": certificates.authority, "no_proxy": "*", "NO_PROXY": "*"])
    }

    /// The `CONNECT` targets the proxy logged, one per tunnel it opened.
    private func tunnels(_ log: String) -> [String] {
        ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
            .filter { $0.hasPrefix("CONNECT ") }.map { String($0.dropFirst("CONNECT ".count)) }
    }

    /// The `CONNECT`s the proxy refused (407).
    private func refusals(_ log: String) -> Int {
        ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.hasPrefix("refused ") }.count
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

    /// A proxy that wants credentials: given in the session's proxy URL, they reach it and
    /// the download completes, and they show nowhere (`Configuration` gives the proxy
    /// without them; not in ferryd's log). Wrong ones: the proxy's 407 fails the download
    /// with `Http` 407 at once, naming the proxy and the credentials, not the server, and
    /// it is not tried again (the same credentials would be refused again).
    func testAProxyThatWantsCredentialsGetsThemAndATunnelItRefusesFailsNamingIt() async throws {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, bodies) = try makeSite(count: 1)
        let (base, accessLog) = try startNginx(root: root, certificates: certificates)
        let proxy = try startTunnellingProxy(credentials: "alice:open-sesame")
        try await restartTrustingWithoutProxies(certificates)
        let address = String(proxy.url.dropFirst("http://".count))

        let good = try await session("com.example.ProxyCredentials", ["proxy": .string("http://alice:open-sesame@" + address),
                                                                       "retries": .uint32(0)])
        _ = try await fetchAll(good, base + "/", bodies: bodies)
        XCTAssertEqual(tunnels(proxy.log).count, 1, "the tunnel was opened with the credentials")
        XCTAssertEqual(refusals(proxy.log), 0)
        let shown = try await good.properties()["Configuration"]?.vardict?["proxy"]?.string
        XCTAssertEqual(shown, "http://" + address, "Configuration shows the proxy without its credentials")

        let bad = try await session("com.example.ProxyWrongCredentials", ["proxy": .string("http://alice:wrong-word@" + address),
                                                                           "retries": .uint32(3)])
        let t = try await bad.download(base + "/f0.bin", options: ["destination": .string(work + "/refused.bin")])
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Http", info.errorMessage)
        XCTAssertEqual(info.httpStatus, 407)
        XCTAssertEqual(info.attempts, 1, "refused credentials are not tried again")
        XCTAssertTrue(info.errorMessage.contains("proxy \(address)"), "the proxy is named: \(info.errorMessage)")
        XCTAssertTrue(info.errorMessage.contains("407"), info.errorMessage)
        XCTAssertFalse(info.errorMessage.contains("wrong-word") || info.errorMessage.contains("alice"), info.errorMessage)
        XCTAssertEqual(refusals(proxy.log), 1)
        XCTAssertFalse(exists(work + "/refused.bin"))
        XCTAssertEqual(try accessLogLines(accessLog).count, 1, "the refused download never reached the server")

        let log = ferryd?.log ?? ""
        XCTAssertFalse(log.isEmpty, "ferryd's log is read")
        XCTAssertFalse(log.contains("open-sesame") || log.contains("wrong-word"), "no password in ferryd's log")
    }
}
