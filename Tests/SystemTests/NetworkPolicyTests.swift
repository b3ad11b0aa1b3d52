import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Metered and offline networks, as NetworkManager (python-dbusmock) reports them on
/// a private system bus, seen through the real ferryd.
final class NetworkPolicyTests: SystemTestCase {
    func testMeteredHoldsBackSessionsThatDoNotAllowItUntilUnmetered() async throws {
        try await startNetworkManager(metered: 1) // yes
        try await startFerryd()
        let frugal = try await client.openSession("com.example.Frugal", configuration: ["allow-metered": .boolean(false)])
        let relaxed = try await client.openSession("com.example.Relaxed", configuration: ["allow-metered": .boolean(true)])
        let held = serve("/held.bin", size: 200_000, seed: 1)
        let free = serve("/free.bin", size: 100_000, seed: 2)

        let a = try await download(frugal, "/held.bin")
        let b = try await download(relaxed, "/free.bin")
        try await waitFor(a, "waiting", reason: "metered")
        // allow-metered = true is unaffected.
        let bInfo = try await finish(b)
        XCTAssertEqual(bInfo.state, "completed")
        assertFile(work + "/free.bin", equals: free)
        // The held one never touched the metered network.
        let stillWaiting = try await a.info().state
        XCTAssertEqual(stillWaiting, "waiting")
        XCTAssertEqual(server.requests(for: "/held.bin").count, 0)

        // Not metered any more: it goes on by itself.
        try await setMetered(2) // no
        let aInfo = try await finish(a)
        XCTAssertEqual(aInfo.state, "completed", aInfo.errorMessage)
        XCTAssertEqual(aInfo.errorName, "")
        XCTAssertEqual(aInfo.attempts, 1, "the wait was no attempt")
        assertFile(work + "/held.bin", equals: held)
        XCTAssertEqual(logCount("NetworkManager is not on the system bus"), 0)
    }

    func testRunningTransferStopsWhenTheNetworkBecomesMeteredAndResumes() async throws {
        try await startNetworkManager(metered: 4) // guess-no
        try await startLogind()
        try await startFerryd()
        let frugal = try await client.openSession("com.example.Frugal", configuration: ["allow-metered": .boolean(false)])
        let body = serve("/slow.bin", size: 120_000, bytesPerSecond: 40_000)
        let t = try await download(frugal, "/slow.bin")
        try await waitForBytes(t, atLeast: 8_000)
        try await waitForFerryInhibitors(1)

        let mark = signals.mark
        try await setMetered(3) // guess-yes
        try await waitFor(t, "waiting", reason: "metered", since: mark)
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/slow.bin.part"), "the partial file stays")
        // Nothing runs: the sleep inhibitor goes.
        try await waitForFerryInhibitors(0)

        server.clearBehaviours(on: "/slow.bin")
        try await setMetered(2)
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/slow.bin", equals: body)
        let requests = server.requests(for: "/slow.bin")
        XCTAssertEqual(requests.count, 2, "one attempt before, one after")
        XCTAssertNotNil(requests.last?.header("Range"), "continued from the partial file")
        XCTAssertFalse(sawReason(t, "retry"), "the stop was no failure")
    }

    func testOfflineWaitsWithoutSpendingRetriesAndGoesOnWhenOnline() async throws {
        try await startNetworkManager()
        try await startFerryd()
        // No retries at all: a failure while offline would fail the transfer.
        let s = try await client.openSession("com.example.Offline", configuration: ["retries": .uint32(0)])
        let relaxed = try await client.openSession("com.example.Relaxed")
        let slowBody = serve("/slow.bin", size: 100_000, bytesPerSecond: 40_000)
        let t = try await download(s, "/slow.bin")
        try await waitForBytes(t, atLeast: 4_000)

        let mark = signals.mark
        try await setConnectivity(1) // none
        try await waitFor(t, "waiting", reason: "offline", since: mark)
        // New downloads wait too, whatever their session allows.
        let laterBody = serve("/later.bin", size: 50_000, seed: 3)
        let later = try await download(relaxed, "/later.bin")
        try await waitFor(later, "waiting", reason: "offline")
        XCTAssertEqual(server.requests(for: "/later.bin").count, 0)
        let active = try await client.managerProperties()["ActiveTransfers"]?.uint32
        XCTAssertEqual(active, 0, "nothing runs offline")

        server.clearBehaviours(on: "/slow.bin")
        try await setConnectivity(4) // full
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/slow.bin", equals: slowBody)
        let laterInfo = try await finish(later)
        XCTAssertEqual(laterInfo.state, "completed", laterInfo.errorMessage)
        assertFile(work + "/later.bin", equals: laterBody)
        XCTAssertFalse(sawReason(t, "retry"))
    }

    /// Behind a sign-in page (hotel or train Wi-Fi: NetworkManager's connectivity
    /// `PORTAL`), requests beyond the network fail until the user signs in. A download
    /// of a session that allows no retry does not fail then: it waits (`retry`, its
    /// error saying why), and goes again as soon as NetworkManager reports the sign-in
    /// done, then completes on that attempt with no error left.
    func testBehindASignInPageADownloadWaitsForTheSignInAndSpendsNoRetry() async throws {
        try await startNetworkManager()
        try await startFerryd()
        try await setConnectivity(2) // portal
        try await waitForLog("behind a sign-in page")
        let s = try await client.openSession("com.example.Hotel", configuration: ["retries": .uint32(0)])
        let body = serve("/behind.bin", size: 60_000)
        // The portal cuts every request beyond it.
        server.set(.dropAfter(bytes: 0, times: 1_000), on: "/behind.bin")
        let t = try await download(s, "/behind.bin")
        try await waitFor(t, "waiting", reason: "retry")
        let waiting = try await t.info()
        XCTAssertEqual(waiting.errorName, "org.ferry.Ferry1.Error.Network")
        XCTAssertTrue(waiting.errorMessage.contains("sign-in"), waiting.errorMessage)

        // Signed in: the network lets requests through, and NetworkManager says so.
        server.clearBehaviours(on: "/behind.bin")
        try await setConnectivity(4) // full
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.errorName, "")
        XCTAssertEqual(info.attempts, 2)
        assertFile(work + "/behind.bin", equals: body)
        XCTAssertEqual(logCount("the network no longer wants a sign-in; trying again"), 1, "tried again for the sign-in, not by its timer")
    }

    /// Wi-Fi to wired: NetworkManager's primary connection changes. A download whose
    /// connection went dead without a word (the server stopped sending; a request-timeout
    /// of 10 minutes) starts over at once from its partial file, on a new connection
    /// (not the idle one another download left), spending no retry (it has none).
    func testAMoveToAnotherNetworkStartsAStalledDownloadOverAtOnce() async throws {
        try await startNetworkManager()
        try await startFerryd()
        let s = try await client.openSession("com.example.Laptop", configuration: ["retries": .uint32(0), "request-timeout": .double(600)])
        let body = serve("/moving.bin", size: 300_000)
        server.set(.stallAfter(bytes: 100_000), on: "/moving.bin")
        let t = try await download(s, "/moving.bin")
        try await waitForBytes(t, atLeast: 100_000)
        // Meanwhile another download leaves its connection idle, to be used again.
        let otherBody = serve("/other.bin", size: 20_000, seed: 4)
        let other = try await finish(try await download(s, "/other.bin"))
        XCTAssertEqual(other.state, "completed", other.errorMessage)

        try await moveThenFinishOnASecondAttempt(t)
        assertFile(work + "/moving.bin", equals: body)
        assertFile(work + "/other.bin", equals: otherBody)
        XCTAssertEqual(server.requests(for: "/moving.bin").count, 2)
        let all = server.requests
        let again = try XCTUnwrap(all.last)
        XCTAssertEqual(again.path, "/moving.bin")
        XCTAssertEqual(again.header("Range"), "bytes=100000-", "continued from the partial file")
        XCTAssertFalse(all.dropLast().map(\.connection).contains(again.connection), "went on a connection made before the move")
        XCTAssertFalse(sawReason(t, "retry"), "the move was no failure")
        XCTAssertEqual(logCount("the network moved; starting over on a new connection"), 1)
    }

    /// A VPN goes down under a download: its connection is cut, and it waits to try
    /// again after a backoff of minutes (retry base 5 minutes here). When NetworkManager
    /// names another primary connection, it goes again at once and completes, on its
    /// one retry; a download waiting after the server's 503 keeps waiting (the server's
    /// state did not change with the network).
    func testAMoveTriesAgainAtOnceADownloadThatFailedOnTheOldNetwork() async throws {
        try await startNetworkManager()
        try await startFerryd(extraEnvironment: ["FERRY_RETRY_BASE_MS": "300000"])
        let s = try await client.openSession("com.example.Laptop", configuration: ["retries": .uint32(1)])
        let body = serve("/cut.bin", size: 80_000)
        server.set(.dropAfter(bytes: 0, times: 1), on: "/cut.bin")
        _ = serve("/busy.bin", size: 10_000, seed: 5)
        server.set(.failFirst(1, status: 503), on: "/busy.bin")
        let t = try await download(s, "/cut.bin")
        let busy = try await download(s, "/busy.bin")
        try await waitFor(t, "waiting", reason: "retry")
        try await waitFor(busy, "waiting", reason: "retry")
        let waiting = try await t.info()
        XCTAssertEqual(waiting.errorName, "org.ferry.Ferry1.Error.Network")

        try await moveThenFinishOnASecondAttempt(t)
        assertFile(work + "/cut.bin", equals: body)
        let busyInfo = try await busy.info()
        XCTAssertEqual(busyInfo.state, "waiting", "the server's wait runs its course")
        XCTAssertEqual(busyInfo.waitingReason, "retry")
        XCTAssertEqual(server.requests(for: "/busy.bin").count, 1)
        XCTAssertEqual(logCount("the network moved; trying again now rather than after its wait"), 1)
    }

    /// Over HTTP/2 (nginx over TLS, its test CA trusted): downloads share a connection
    /// as streams, and it stays open, idle, for the next. After a move the next
    /// downloads go on a new connection, not on that one (on a real network it may be
    /// dead, and every stream on it would stall).
    func testAfterAMoveHTTP2DownloadsTakeANewConnection() async throws {
        let site = try await startHTTP2Site(["a0", "a1", "a2", "b0", "b1", "b2"])
        defer { site.nginx.stop() }
        let s = try await client.openSession("com.example.Roaming")
        try await fetch(s, site, ["a0", "a1", "a2"])
        XCTAssertEqual(Set(try TestNginx.accessLogLines(site.nginx.accessLog).map { $0[1] }), ["HTTP/2.0"])
        try await setNetworkManagerProperty("PrimaryConnection", .objectPath(Self.activeConnection(2)))
        try await waitForLog("network: moved from")
        try await fetch(s, site, ["b0", "b1", "b2"])
        let before = try nginxConnections(site, "/a"), after = try nginxConnections(site, "/b")
        XCTAssertFalse(after.isEmpty)
        XCTAssertTrue(before.isDisjoint(with: after), "went on a connection made before the move: \(before) then \(after)")
    }

    /// Over HTTP/2, a POST awaiting its answer when the machine moves goes on, on its
    /// connection, and gets its answer, sent once. Meanwhile new downloads from the
    /// same origin take a new connection rather than become streams of that one (of the
    /// old network), and after it none goes on it. nginx holds the answer back by
    /// passing the POST on to the test server, which holds it.
    func testAcrossAMoveAnHTTP2POSTAwaitingItsAnswerKeepsItsConnectionToItself() async throws {
        server.set(.acceptUploads(), on: "/form")
        server.set(.holdAnswers, on: "/form")
        let site = try await startHTTP2Site(["a0", "b0", "b1", "c0"],
                                            serverDirectives: "location /form { proxy_pass http://127.0.0.1:\(server.port); }")
        defer { site.nginx.stop() }
        let s = try await client.openSession("com.example.Roaming")
        try await fetch(s, site, ["a0"])
        let content = TestData.bytes(count: 60_000, seed: 61)
        let source = work + "/form.bin"
        FileManager.default.createFile(atPath: source, contents: Data(content))
        let post = try await s.upload(site.nginx.base + "/form", file: source, options: ["method": .string("POST")])
        try await waitForBytes(post, atLeast: Int64(content.count))
        XCTAssertTrue(waitUntil(timeout: 20) { self.server.isHoldingAnswer(for: "/form") }, "the POST reached the server, its answer held")

        try await setNetworkManagerProperty("PrimaryConnection", .objectPath(Self.activeConnection(2)))
        try await waitForLog("network: moved from")
        try await fetch(s, site, ["b0", "b1"])
        XCTAssertTrue(server.isHoldingAnswer(for: "/form"), "the POST still waits (else this says nothing)")
        server.release("/form")
        let info = try await finish(post)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.attempts, 1)
        XCTAssertEqual(server.uploads(for: "/form").count, 1, "sent once")
        XCTAssertEqual(server.uploads(for: "/form").first?.sha256, TestData.sha256Hex(content))
        try await fetch(s, site, ["c0"])

        let old = try nginxConnections(site, "/a"), form = try nginxConnections(site, "/form")
        let meanwhile = try nginxConnections(site, "/b"), after = try nginxConnections(site, "/c")
        XCTAssertEqual(form, old, "the POST went on the connection of before the move (else this says nothing)")
        XCTAssertTrue(meanwhile.isDisjoint(with: form), "a download became a stream of the POST's connection: \(form) and \(meanwhile)")
        XCTAssertTrue(after.isDisjoint(with: form), "a download went on the POST's connection after it: \(form) and \(after)")
        XCTAssertEqual(logCount("a POST awaiting its answer goes on after the network moved"), 1)
    }

    /// NetworkManager names another primary connection; `t` then completes, with no
    /// error left, on its second attempt.
    private func moveThenFinishOnASecondAttempt(_ t: FerryTransfer) async throws {
        try await setNetworkManagerProperty("PrimaryConnection", .objectPath(Self.activeConnection(2)))
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.errorName, "")
        XCTAssertEqual(info.attempts, 2)
    }

    /// nginx over TLS with HTTP/2 (its test CA trusted by ferryd, started here with
    /// NetworkManager's mock) serving `names` as `/NAME.bin`, each 30,000 bytes.
    private func startHTTP2Site(_ names: [String], serverDirectives: String = "") async throws -> HTTP2Site {
        let certificates = try TestCertificates(in: work + "/tls")
        let root = work + "/site"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        var bodies: [String: [UInt8]] = [:]
        for (i, name) in names.enumerated() {
            bodies[name] = TestData.bytes(count: 30_000, seed: UInt64(40 + i))
            try Data(bodies[name]!).write(to: URL(fileURLWithPath: root + "/\(name).bin"))
        }
        let nginx = try TestNginx(in: work + "/nginx", root: root, certificates: certificates, serverDirectives: serverDirectives)
        extraLogs.append { nginx.log }
        try await startNetworkManager()
        try await startFerryd(extraEnvironment: ["CURL_CA_BUNDLE": certificates.authority])
        return HTTP2Site(nginx: nginx, bodies: bodies)
    }

    private struct HTTP2Site {
        let nginx: TestNginx
        let bodies: [String: [UInt8]]
    }

    /// Downloads the site's `names` at once and checks each file.
    private func fetch(_ s: BusSession, _ site: HTTP2Site, _ names: [String]) async throws {
        var transfers: [(String, FerryTransfer)] = []
        for name in names {
            transfers.append((name, try await s.download(site.nginx.base + "/\(name).bin", options: ["destination": .string(work + "/\(name).bin")])))
        }
        for (name, t) in transfers {
            let info = try await finish(t)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
            assertFile(work + "/\(name).bin", equals: site.bodies[name]!)
        }
    }

    /// nginx's connection serials of the requests whose path starts with `prefix`.
    private func nginxConnections(_ site: HTTP2Site, _ prefix: String) throws -> Set<Substring> {
        Set(try TestNginx.accessLogLines(site.nginx.accessLog).filter { $0.count > 3 && $0[3].hasPrefix(prefix) }.map { $0[0] })
    }

    /// A VPN comes up with its own DNS: after the move the server's name leads to
    /// another address. ferryd runs under bubblewrap with an /etc/hosts of its own,
    /// which names 127.0.0.1 for the server, then 127.0.0.2 (a second server on the
    /// same port). The download after the move goes to the new address, not to the one
    /// looked up before it (libcurl keeps names a minute, and a request to the old
    /// address would succeed too).
    func testAfterAMoveNamesAreLookedUpAgain() async throws {
        guard let bwrap = findExecutable("bwrap") else { throw XCTSkip("bwrap is needed (Debian package bubblewrap)") }
        let hosts = work + "/hosts"
        try Data("127.0.0.1 files.example.test\n".utf8).write(to: URL(fileURLWithPath: hosts))
        let sandbox = [bwrap, "--dev-bind", "/", "/", "--bind", hosts, "/etc/hosts", "--"]
        let probe = try ChildProcess.run(sandbox[0], Array(sandbox.dropFirst()) + ["/bin/true"], timeout: 10)
        guard probe.status == 0 else { throw XCTSkip("bwrap cannot make a mount namespace here: \(probe.stderr)") }
        let vpn = TestHTTPServer()
        try vpn.start(host: "127.0.0.2", port: server.port)
        defer { vpn.stop() }
        try await startNetworkManager()
        // Not --die-with-parent: that follows the thread that started bwrap, gone at once.
        try await startFerryd(wrapper: sandbox)
        let wrapped = try XCTUnwrap(ferryd)
        addTeardownBlock {
            // bwrap does not pass SIGTERM on: ferryd first, and bwrap ends with it.
            for child in childProcesses(of: wrapped.pid).reversed() { _ = kill(child, SIGTERM) }
        }
        let s = try await client.openSession("com.example.Roaming")
        func fetch(_ name: String) async throws -> TransferInfo {
            try await finish(try await s.download("http://files.example.test:\(server.port)/\(name)",
                                                  options: ["destination": .string(work + "/\(name)")]))
        }
        let first = serve("/first.bin", size: 20_000, seed: 6)
        let firstInfo = try await fetch("first.bin")
        XCTAssertEqual(firstInfo.state, "completed", firstInfo.errorMessage)
        assertFile(work + "/first.bin", equals: first)

        let second = TestData.bytes(count: 30_000, seed: 7)
        server.add(path: "/second.bin", body: second)
        vpn.add(path: "/second.bin", body: second)
        // Rewritten in place: the bind mount shows the same file.
        let file = try XCTUnwrap(FileHandle(forWritingAtPath: hosts))
        try file.truncate(atOffset: 0)
        try file.write(contentsOf: Data("127.0.0.2 files.example.test\n".utf8))
        try file.close()
        try await setNetworkManagerProperty("PrimaryConnection", .objectPath(Self.activeConnection(2)))
        try await waitForLog("network: moved from")
        let secondInfo = try await fetch("second.bin")
        XCTAssertEqual(secondInfo.state, "completed", secondInfo.errorMessage)
        assertFile(work + "/second.bin", equals: second)
        XCTAssertEqual(vpn.requests(for: "/second.bin").count, 1, "the name was looked up again")
        XCTAssertEqual(server.requests(for: "/second.bin").count, 0, "went to the address of before the move")
    }

    func testLimitedConnectivityIsNotOffline() async throws {
        try await startNetworkManager()
        try await startFerryd()
        try await setConnectivity(3) // limited: the server may be on the local network
        let s = try await client.openSession("com.example.Lan")
        let body = serve("/lan.bin", size: 30_000)
        let info = try await finish(try await download(s, "/lan.bin"))
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/lan.bin", equals: body)
    }

    func testNetworkManagerLeavingMeansOnlineAndUnmetered() async throws {
        try await startNetworkManager(metered: 1)
        try await startFerryd()
        let frugal = try await client.openSession("com.example.Frugal", configuration: ["allow-metered": .boolean(false)])
        let body = serve("/f.bin", size: 40_000)
        let t = try await download(frugal, "/f.bin")
        try await waitFor(t, "waiting", reason: "metered")

        networkManager?.terminate()
        _ = networkManager?.waitForExit(timeout: 10)
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/f.bin", equals: body)
        XCTAssertEqual(logCount("NetworkManager left the system bus"), 1)
    }

    func testWithoutNetworkManagerDownloadsWork() async throws {
        // A system bus, but no NetworkManager (nor logind) on it.
        try await startFerryd()
        let frugal = try await client.openSession("com.example.Frugal", configuration: ["allow-metered": .boolean(false)])
        let body = serve("/n.bin", size: 60_000)
        let info = try await finish(try await download(frugal, "/n.bin"))
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/n.bin", equals: body)
        let second = serve("/n2.bin", size: 10_000, seed: 5)
        let secondInfo = try await finish(try await download(frugal, "/n2.bin"))
        XCTAssertEqual(secondInfo.state, "completed")
        assertFile(work + "/n2.bin", equals: second)
        XCTAssertEqual(logCount("NetworkManager is not on the system bus"), 1, "said once")
        let logindLines = try await waitForLog("logind is not on the system bus")
        XCTAssertEqual(logindLines, 1, "said once, for two batches")
    }

    func testWithoutASystemBusDownloadsWork() async throws {
        try await startFerryd(systemBusAddress: "unix:path=\(home!)/no-such-socket")
        let frugal = try await client.openSession("com.example.Frugal", configuration: ["allow-metered": .boolean(false)])
        let body = serve("/x.bin", size: 60_000)
        let info = try await finish(try await download(frugal, "/x.bin"))
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/x.bin", equals: body)
        XCTAssertEqual(logCount("assuming the network is online and not metered"), 1)
        try await waitForLog("cannot hold off sleep")
        XCTAssertEqual(logCount("assuming mains power"), 1)
        XCTAssertEqual(logCount("no system bus"), 3, "the network and power monitors and the inhibitor each say it once")
    }
}
