import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The desktop's proxy settings, as the XDG desktop portal's `ProxyResolver` gives them
/// (python-dbusmock presenting `org.freedesktop.portal.Desktop` on ferryd's private
/// session bus), for the requests that neither their session nor ferryd's environment
/// give a proxy. The test server is the proxy (it serves a request in absolute form as
/// its own path); the proxied URLs name a port where nothing listens, so a request that
/// went around the proxy would fail to connect.
final class DesktopProxyTests: SystemTestCase {
    private static let portalName = "org.freedesktop.portal.Desktop"
    private static let portalPath = "/org/freedesktop/portal/desktop"
    /// Nothing listens on the discard port of loopback.
    private let unreachableOrigin = "http://127.0.0.1:9"
    private var portal: ChildProcess?
    private var session: BusConnection!

    override func setUp() async throws {
        try await super.setUp()
        session = try BusConnection(address: sessionBus.address, queue: DispatchQueue(label: "test.session"))
    }

    override func tearDown() async throws {
        portal?.stop()
        session?.close()
        try await super.tearDown()
    }

    /// Starts the portal's mock with `Lookup` answering from `answers` (origin → proxies),
    /// `direct://` for any other origin; with a `gate`, only once that file exists (at
    /// most 4.5 s: ferryd waits 5).
    private func startPortal(_ answers: [String: [String]], gate: String? = nil) async throws {
        portal = try await startDBusMock([Self.portalName, Self.portalPath, "org.freedesktop.portal.ProxyResolver"],
                                         owning: Self.portalName, onSessionBus: true, waitingOn: session, label: "portal mock")
        try await setPortalAnswers(answers, gate: gate)
    }

    /// (Re)defines the mock's `Lookup`.
    private func setPortalAnswers(_ answers: [String: [String]], gate: String? = nil) async throws {
        let table = answers.map { "'\($0.key)': [" + $0.value.map { "'\($0)'" }.joined(separator: ", ") + "]" }.joined(separator: ", ")
        let wait = gate.map { "import os, time\nend = time.time() + 4.5\nwhile not os.path.exists('\($0)') and time.time() < end: time.sleep(0.01)\n" } ?? ""
        let code = wait + "ret = {\(table)}.get(args[0], ['direct://'])"
        try await session.call(destination: Self.portalName, path: Self.portalPath, interface: Self.mockInterface, method: "AddMethod",
                               arguments: [.string("org.freedesktop.portal.ProxyResolver"), .string("Lookup"),
                                           .string("s"), .string("as"), .string(code)])
    }

    /// The URIs ferryd asked the portal about, in order.
    private func lookups() async throws -> [String] {
        let r = try await session.call(destination: Self.portalName, path: Self.portalPath, interface: Self.mockInterface,
                                       method: "GetMethodCalls", arguments: [.string("Lookup")])
        return (r.first?.arrayElements ?? []).compactMap { $0.structFields?[1].arrayElements?.first?.string }
    }

    /// The test server as a proxy ("http://127.0.0.1:PORT").
    private var proxy: String { server.url("") }

    /// Every request the server saw for `path` came to it as a proxy (or none did).
    private func assertProxied(_ path: String, _ proxied: Bool, file: StaticString = #filePath, line: UInt = #line) {
        let requests = server.requests(for: path)
        XCTAssertFalse(requests.isEmpty, "requests for \(path) reached the server", file: file, line: line)
        for request in requests {
            XCTAssertEqual(request.viaProxy, proxied, "\(request.method) \(request.uri)", file: file, line: line)
        }
    }

    /// ferryd, its environment without `no_proxy` (the harness sets `*`, which keeps every
    /// request off a proxy that is not a session's).
    private func startFerrydWithoutNoProxy(_ extra: [String: String] = [:]) async throws {
        try await startFerryd(extraEnvironment: ["no_proxy": "", "NO_PROXY": ""].merging(extra) { _, e in e })
    }

    /// The download completes, its file whole, every request for `path` through a proxy or none.
    private func assertFetched(_ t: FerryTransfer, _ path: String, _ body: [UInt8], proxied: Bool,
                               file: StaticString = #filePath, line: UInt = #line) async throws {
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage, file: file, line: line)
        assertFile(work + path, equals: body, file: file, line: line)
        assertProxied(path, proxied, file: file, line: line)
    }

    private func get(_ s: BusSession, _ url: String, _ name: String, options: [String: DBusValue] = [:]) async throws -> FerryTransfer {
        try await s.download(url, options: options.merging(["destination": .string(work + "/" + name)]) { a, _ in a })
    }

    /// The real portal (xdg-desktop-portal, its `GProxyResolver` glib-networking's GNOME
    /// one) reading GNOME's proxy settings (`org.gnome.system.proxy`, from a key file as
    /// GSettings' keyfile backend keeps them): a manual HTTP proxy, and hosts it ignores.
    func testGNOMEsManualProxySettingsThroughTheRealPortal() async throws {
        let portalBinary = "/usr/libexec/xdg-desktop-portal"
        guard FileManager.default.isExecutableFile(atPath: portalBinary) else {
            throw XCTSkip("xdg-desktop-portal is not installed (Debian: xdg-desktop-portal, glib-networking)")
        }
        let config = work + "/gnome-config"
        try FileManager.default.createDirectory(atPath: config + "/glib-2.0/settings", withIntermediateDirectories: true)
        try """
            [system/proxy]
            mode='manual'
            ignore-hosts=['localhost', '*.ignored.example']

            [system/proxy/http]
            host='127.0.0.1'
            port=\(server.port)

            """.write(toFile: config + "/glib-2.0/settings/keyfile", atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SESSION_BUS_ADDRESS"] = sessionBus.address
        env["DBUS_SYSTEM_BUS_ADDRESS"] = systemBus.address
        env["XDG_CONFIG_HOME"] = config
        env["GSETTINGS_BACKEND"] = "keyfile"
        env["XDG_CURRENT_DESKTOP"] = "GNOME"
        env["GIO_USE_PROXY_RESOLVER"] = "gnome"
        for k in TemporaryHome.proxyVariables + ["no_proxy", "NO_PROXY"] { env.removeValue(forKey: k) }
        let p = try withUnblockedSignals { try ChildProcess(executable: portalBinary, environment: env) }
        portal = p
        extraLogs.append { "===== xdg-desktop-portal =====\n" + p.log }
        try await waitForBusName(Self.portalName, on: session, process: p, timeout: 20)

        try await startFerrydWithoutNoProxy()
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let body = serve("/gnome.bin", size: 120_000)
        let t = try await get(s, unreachableOrigin + "/gnome.bin", "gnome.bin")
        try await assertFetched(t, "/gnome.bin", body, proxied: true)
        XCTAssertEqual(logCount("proxy for http://127.0.0.1:9/: \(proxy) (the desktop's settings)"), 1)
        // A host the settings ignore goes direct.
        let near = serve("/near.bin", size: 50_000, seed: 2)
        let direct = try await get(s, "http://localhost:\(server.port)/near.bin", "near.bin")
        try await assertFetched(direct, "/near.bin", near, proxied: false)
    }

    func testDownloadsGoThroughTheDesktopsProxyForTheirOriginWhichIsAskedOnceWithoutPathOrCredentials() async throws {
        try await startPortal(["http://127.0.0.1:9/": [proxy]])
        try await startFerrydWithoutNoProxy()
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let bodies = (0..<3).map { serve("/p\($0).bin", size: 150_000, seed: UInt64($0 + 1)) }
        var transfers: [FerryTransfer] = []
        for i in 0..<3 {
            transfers.append(try await get(s, "http://user:secret@127.0.0.1:9/p\(i).bin?k=v", "p\(i).bin"))
        }
        for (i, t) in transfers.enumerated() {
            let info = try await finish(t)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
            assertFile(work + "/p\(i).bin", equals: bodies[i])
            assertProxied("/p\(i).bin", true)
        }
        let asked = try await lookups()
        XCTAssertEqual(asked, ["http://127.0.0.1:9/"], "one question for the origin, nothing of the path or credentials")
        XCTAssertEqual(logCount("proxy for http://127.0.0.1:9/: \(proxy) (the desktop's settings)"), 1)
    }

    func testAnOriginTheDesktopSendsDirectGoesDirectAndUploadsAskToo() async throws {
        let local = server.url("/")
        try await startPortal([local: ["direct://"], "http://127.0.0.1:9/": [proxy]])
        try await startFerrydWithoutNoProxy()
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let body = serve("/direct.bin", size: 120_000)
        let t = try await download(s, "/direct.bin")
        try await assertFetched(t, "/direct.bin", body, proxied: false)

        server.set(.acceptUploads(), on: "/put")
        let content = TestData.bytes(count: 200_000, seed: 9)
        XCTAssertTrue(FileManager.default.createFile(atPath: work + "/up.bin", contents: Data(content)))
        let up = try await s.upload(unreachableOrigin + "/put", file: work + "/up.bin")
        let upInfo = try await finish(up)
        XCTAssertEqual(upInfo.state, "completed", upInfo.errorMessage)
        XCTAssertEqual(server.uploads(for: "/put").first?.sha256, TestData.sha256Hex(content))
        assertProxied("/put", true)
        let asked = try await lookups()
        XCTAssertEqual(Set(asked), [local, "http://127.0.0.1:9/"])
    }

    func testTheEnvironmentsProxyComesFirstAndThePortalIsNotAsked() async throws {
        // The desktop would send everything to a proxy that is not there.
        try await startPortal(["http://127.0.0.1:9/": ["http://127.0.0.1:9"]])
        try await startFerrydWithoutNoProxy(["http_proxy": proxy])
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let body = serve("/env.bin", size: 100_000)
        let t = try await get(s, unreachableOrigin + "/env.bin", "env.bin")
        try await assertFetched(t, "/env.bin", body, proxied: true)
        XCTAssertEqual(logCount("proxy: from the environment (http_proxy)"), 1)
        let asked = try await lookups()
        XCTAssertEqual(asked, [], "the portal was asked about \(asked)")
    }

    func testASessionsProxyComesFirstAndThePortalIsNotAsked() async throws {
        try await startPortal(["http://127.0.0.1:9/": ["http://127.0.0.1:9"]])
        try await startFerrydWithoutNoProxy()
        let own = try await client.openSession("com.example.Proxied", configuration: ["retries": .uint32(0), "proxy": .string(proxy)])
        let body2 = serve("/own.bin", size: 100_000, seed: 2)
        let t2 = try await get(own, unreachableOrigin + "/own.bin", "own.bin")
        try await assertFetched(t2, "/own.bin", body2, proxied: true)
        let asked = try await lookups()
        XCTAssertEqual(asked, [], "the portal was asked about \(asked)")
    }

    func testATransferCancelledOrPausedWhileItsProxyIsAskedSendsNothingAndResumesLater() async throws {
        let gate = work + "/answer-now"
        try await startPortal(["http://127.0.0.1:9/": [proxy]], gate: gate)
        try await startFerrydWithoutNoProxy()
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let body = serve("/later.bin", size: 100_000)
        serve("/never.bin", size: 100_000)
        let cancelled = try await get(s, unreachableOrigin + "/never.bin", "never.bin")
        let paused = try await get(s, unreachableOrigin + "/later.bin", "later.bin")
        // The question is out (ferryd says it asks; the mock holds its answer).
        try await waitForLog("asking the desktop which proxy http://127.0.0.1:9/ goes through")
        try await cancelled.cancel()
        _ = try await paused.pause()
        let cancelledInfo = try await finish(cancelled)
        XCTAssertEqual(cancelledInfo.state, "cancelled")
        try await waitFor(paused, "paused")
        XCTAssertTrue(FileManager.default.createFile(atPath: gate, contents: nil))
        // The answer comes, and starts neither.
        try await waitForLog("proxy for http://127.0.0.1:9/", timeout: 20)
        let asked = try await lookups()
        XCTAssertEqual(asked.count, 1, "one question")
        XCTAssertTrue(server.requests(for: "/later.bin").isEmpty, "the paused download sent a request")
        try await paused.resume()
        let info = try await finish(paused)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/later.bin", equals: body)
        assertProxied("/later.bin", true)
        XCTAssertTrue(server.requests(for: "/never.bin").isEmpty, "the cancelled download sent a request")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/never.bin"))
    }

    /// `no_proxy` in ferryd's environment applies to the desktop's proxy too (where a
    /// session's proxy carries every request): `no_proxy=*` is the way to keep ferryd
    /// off the desktop's proxy.
    func testTheEnvironmentsNoProxyAppliesToTheDesktopsProxy() async throws {
        // The desktop sends the test server's origin to a proxy that is not there.
        try await startPortal([server.url("/"): ["http://127.0.0.1:9"]])
        try await startFerrydWithoutNoProxy(["no_proxy": "127.0.0.1"])
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let body = serve("/near.bin", size: 90_000)
        let t = try await download(s, "/near.bin")
        try await assertFetched(t, "/near.bin", body, proxied: false)
        let asked = try await lookups()
        XCTAssertEqual(asked, [server.url("/")])
    }

    func testNoProxyStarKeepsThePortalOutOfIt() async throws {
        try await startPortal([server.url("/"): ["http://127.0.0.1:9"]])
        try await startFerryd() // the harness's environment: no_proxy=*
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let body = serve("/star.bin", size: 30_000)
        let t = try await download(s, "/star.bin")
        try await assertFetched(t, "/star.bin", body, proxied: false)
        let asked = try await lookups()
        XCTAssertEqual(asked, [])
        XCTAssertEqual(logCount("proxy: none (no_proxy=*)"), 1)
    }

    func testAfterAMoveTheDesktopIsAskedAgain() async throws {
        try await startNetworkManager()
        try await startPortal(["http://127.0.0.1:9/": [proxy]])
        try await startFerrydWithoutNoProxy()
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        serve("/a.bin", size: 50_000)
        let body = serve("/b.bin", size: 50_000, seed: 2)
        let a = try await get(s, unreachableOrigin + "/a.bin", "a.bin")
        let aInfo = try await finish(a)
        XCTAssertEqual(aInfo.state, "completed", aInfo.errorMessage)
        // On the new network, the desktop names another proxy for the origin.
        let other = TestHTTPServer()
        try other.start()
        defer { other.stop() }
        other.add(path: "/b.bin", body: body)
        try await setPortalAnswers(["http://127.0.0.1:9/": [other.url("")]])
        try await setNetworkManagerProperty("PrimaryConnection", .objectPath(Self.activeConnection(2)))
        try await waitForLog("network: moved from")
        let b = try await get(s, unreachableOrigin + "/b.bin", "b.bin")
        let info = try await finish(b)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/b.bin", equals: body)
        XCTAssertEqual(other.requests(for: "/b.bin").map(\.viaProxy), [true], "went through the new network's proxy")
        let asked = try await lookups()
        XCTAssertEqual(asked.count, 2)
    }

    func testWithoutAPortalDownloadsGoDirectAndThatIsSaidOnce() async throws {
        try await startFerrydWithoutNoProxy()
        let s = try await client.openSession("com.example.Office", configuration: ["retries": .uint32(0)])
        let bodies = (0..<2).map { serve("/d\($0).bin", size: 80_000, seed: UInt64($0 + 1)) }
        for i in 0..<2 {
            let t = try await download(s, "/d\(i).bin")
            let info = try await finish(t)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
            assertFile(work + "/d\(i).bin", equals: bodies[i])
            assertProxied("/d\(i).bin", false)
        }
        XCTAssertEqual(logCount("no desktop proxy settings"), 1)
    }
}
