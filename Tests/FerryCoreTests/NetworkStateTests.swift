import XCTest
@testable import FerryCore

/// The network policy: metered and offline waits, with a fake engine.
final class NetworkStateTests: XCTestCase {
    private let url = "https://example.com/file.bin"

    private func setNetwork(_ h: CoreHarness, metered: Bool = false, online: Bool = true) {
        h.sync { $0.setNetworkState(metered: metered, online: online) }
    }

    private func reason(_ h: CoreHarness, _ t: TransferID) -> String { h.snapshot(t)?.waitingReason ?? "?" }

    /// A session that does not allow metered networks.
    private func frugalSession(_ h: CoreHarness, _ id: String = "com.example.Frugal") throws -> SessionID {
        try h.openSession(id) { $0.allowMetered = false }
    }

    /// A running transfer that got a resumable response and wrote `count` bytes.
    private func running(_ h: CoreHarness, _ s: SessionID, bytes count: Int = 6) throws -> TransferID {
        let t = try h.download(s)
        XCTAssertEqual(h.state(t), .running)
        h.send(.response(t, EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)))
        h.writePart(t, Array(repeating: 1, count: count))
        h.send(.progress(t, bytesWritten: Int64(count), totalOnDisk: Int64(count), expected: 100))
        return t
    }

    func testAssumesOnlineAndUnmeteredUntilTold() throws {
        let h = CoreHarness()
        XCTAssertEqual(h.sync { $0.networkState }, .assumed)
        XCTAssertEqual(NetworkConditions.assumed, NetworkConditions(metered: false, online: true))
        let t = try h.download(try frugalSession(h))
        XCTAssertEqual(h.state(t), .running)
    }

    func testMeteredHoldsBackSessionsThatDoNotAllowIt() throws {
        let h = CoreHarness()
        setNetwork(h, metered: true)
        let frugal = try frugalSession(h)
        let relaxed = try h.openSession("com.example.Relaxed")
        let waiting = try h.download(frugal)
        let going = try h.download(relaxed)
        XCTAssertEqual(h.state(waiting), .waiting)
        XCTAssertEqual(reason(h, waiting), "metered")
        XCTAssertEqual(h.state(going), .running, "allow-metered (the default) is unaffected")
        XCTAssertEqual(h.engine.startedIDs, [going])
        XCTAssertEqual(h.snapshot(waiting)?.attempts, 0)

        // Not metered any more: it goes on by itself.
        h.observer.clear()
        setNetwork(h, metered: false)
        XCTAssertEqual(h.state(waiting), .running)
        XCTAssertEqual(reason(h, waiting), "")
        XCTAssertEqual(h.engine.startedIDs, [going, waiting])
        XCTAssertTrue(h.observer.events.contains(.transferChanged(waiting, .running)))
        h.succeed(waiting)
        XCTAssertEqual(h.state(waiting), .completed)
        XCTAssertEqual(h.snapshot(waiting)?.attempts, 1, "the wait was no attempt")
        XCTAssertEqual(h.snapshot(waiting)?.errorName, "")
    }

    func testRunningTransferStopsAtAResumablePointAndContinues() throws {
        let h = CoreHarness()
        let s = try frugalSession(h)
        let t = try running(h, s)
        setNetwork(h, metered: true)
        XCTAssertEqual(h.engine.stopped, [t], "the attempt was stopped")
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(reason(h, t), "metered")
        // The stopped attempt ends; the transfer keeps waiting and keeps its bytes.
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.snapshot(t)?.bytesTransferred, 6)
        XCTAssertTrue(h.exists(h.destination(t) + ".part"))

        setNetwork(h, metered: false)
        XCTAssertEqual(h.state(t), .running)
        let request = h.engine.lastRequest(t)
        XCTAssertEqual(request?.offset, 6, "continues from the part file")
        XCTAssertEqual(request?.ifRange, "\"v1\"")
    }

    func testNetworkReturningBeforeTheStoppedAttemptEndsWaitsForIt() throws {
        let h = CoreHarness()
        let t = try running(h, try frugalSession(h))
        setNetwork(h, metered: true)
        setNetwork(h, metered: false)
        // Queued again, but not started while the old attempt may still write.
        XCTAssertEqual(h.state(t), .queued)
        XCTAssertEqual(h.engine.startedIDs, [t])
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.engine.startedIDs, [t, t])
    }

    func testOfflineHoldsBackEverythingWithoutSpendingRetries() throws {
        // A session with no retries at all: a failure while offline would fail it.
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 1))
        let s = try h.openSession { $0.retries = 0 }
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        let a = try running(h, s)
        let b = try h.download(s) { $0.priority = -1 }
        XCTAssertEqual(h.state(b), .queued)

        setNetwork(h, online: false)
        XCTAssertEqual(h.state(a), .waiting)
        XCTAssertEqual(reason(h, a), "offline")
        XCTAssertEqual(h.state(b), .waiting)
        XCTAssertEqual(reason(h, b), "offline")
        XCTAssertEqual(h.engine.stopped, [a])
        // The stopped attempt reports the lost connection: it does not count.
        h.fail(a, .network("Could not connect"), bytes: 6)
        XCTAssertEqual(h.state(a), .waiting)
        XCTAssertEqual(reason(h, a), "offline")
        XCTAssertEqual(h.snapshot(a)?.errorName, "")
        // New downloads wait too.
        let c = try h.download(s)
        XCTAssertEqual(h.state(c), .waiting)
        XCTAssertEqual(reason(h, c), "offline")
        XCTAssertEqual(h.sync { $0.manager.activeTransfers }, 0, "nothing runs offline")
        XCTAssertEqual(h.sync { $0.manager.queuedTransfers }, 3)

        setNetwork(h, online: true)
        XCTAssertEqual(h.state(a), .running)
        XCTAssertEqual(h.state(b), .queued, "the concurrency limit still applies")
        XCTAssertEqual(h.state(c), .queued)
        h.succeed(a)
        XCTAssertEqual(h.state(a), .completed)
        XCTAssertEqual(h.snapshot(a)?.attempts, 2, "one attempt before going offline, one after")
    }

    func testOfflineWinsOverMeteredAndTheReasonFollows() throws {
        let h = CoreHarness()
        let t = try h.download(try frugalSession(h)) { $0.start = false }
        setNetwork(h, metered: true, online: false)
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(reason(h, t), "offline")
        h.observer.clear()
        setNetwork(h, metered: true, online: true)
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(reason(h, t), "metered")
        XCTAssertEqual(h.observer.changedSnapshots.last?.waitingReason, "metered", "the reason change is announced")
        setNetwork(h, metered: true, online: false)
        XCTAssertEqual(reason(h, t), "offline")
        setNetwork(h, metered: false, online: true)
        XCTAssertEqual(h.state(t), .running)
    }

    func testRetryWaitRunsItsCourseThenWaitsForTheNetwork() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 10))
        let s = try frugalSession(h)
        let t = try running(h, s)
        h.fail(t, .network("reset"), bytes: 6)
        XCTAssertEqual(reason(h, t), "retry")
        setNetwork(h, metered: true)
        XCTAssertEqual(reason(h, t), "retry", "a wait for a time is left alone")
        h.advanceAndWake(seconds: 11)
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(reason(h, t), "metered")
        XCTAssertEqual(h.engine.startedIDs, [t], "not tried on the metered network")
        // Later due timers (of other transfers) do not wake a network wait.
        h.advanceAndWake(seconds: 1000)
        XCTAssertEqual(reason(h, t), "metered")
        setNetwork(h, metered: false)
        XCTAssertEqual(h.state(t), .running)
    }

    func testStartAfterComesFirst() throws {
        let h = CoreHarness()
        setNetwork(h, metered: true)
        let t = try h.download(try frugalSession(h)) { $0.startAfter = h.clock.now + 60_000_000 }
        XCTAssertEqual(reason(h, t), "start-after")
        h.advanceAndWake(seconds: 61)
        XCTAssertEqual(reason(h, t), "metered")
    }

    func testAllowingMeteredReleasesTheSessionsTransfers() throws {
        let h = CoreHarness()
        setNetwork(h, metered: true)
        let s = try frugalSession(h)
        let t = try h.download(s)
        XCTAssertEqual(reason(h, t), "metered")
        _ = try h.openSession("com.example.Frugal") { $0.allowMetered = true }
        XCTAssertEqual(h.state(t), .running)
        // And forbidding it again stops it.
        _ = try h.openSession("com.example.Frugal") { $0.allowMetered = false }
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.engine.stopped, [t])
    }

    func testPauseAndResumeWhileMetered() throws {
        let h = CoreHarness()
        setNetwork(h, metered: true)
        let t = try h.download(try frugalSession(h))
        _ = try h.sync { try $0.pause(t) }
        XCTAssertEqual(h.state(t), .paused)
        XCTAssertEqual(reason(h, t), "")
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(reason(h, t), "metered")
        try h.sync { try $0.cancel(t) }
        XCTAssertEqual(h.state(t), .cancelled)
    }

    func testRunningCountFollowsTheNetwork() throws {
        let h = CoreHarness()
        let s = try frugalSession(h)
        let t = try running(h, s)
        XCTAssertEqual(h.observer.managerSnapshots.last?.activeTransfers, 1)
        setNetwork(h, metered: true)
        XCTAssertEqual(h.observer.managerSnapshots.last?.activeTransfers, 0, "managerChanged says nothing runs")
        XCTAssertEqual(h.observer.managerSnapshots.last?.queuedTransfers, 1)
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        setNetwork(h, metered: false)
        XCTAssertEqual(h.observer.managerSnapshots.last?.activeTransfers, 1)
    }

    func testSameStateChangesNothing() throws {
        let h = CoreHarness()
        _ = try h.download(try frugalSession(h))
        h.observer.clear()
        setNetwork(h, metered: false, online: true)
        XCTAssertEqual(h.observer.events, [])
    }

    /// A POST whose body is all out may be acted on by the server: stopped for the
    /// network and sent again, it could be acted on twice. It runs on to its answer; one
    /// still sending its body, and a PUT, stop as every transfer does.
    func testAPOSTAwaitingItsAnswerRunsOnWhenTheNetworkBecomesMetered() throws {
        let h = CoreHarness()
        let s = try frugalSession(h)
        let sent = try h.upload(s, method: "POST")
        let sending = try h.upload(s, "https://example.com/up/other.bin", method: "POST")
        let put = try h.upload(s, "https://uploads.example.net/put.bin", method: "PUT")
        XCTAssertEqual([sent, sending, put].map { h.state($0) }, [.running, .running, .running])
        h.send(.progress(sent, bytesWritten: 1000, totalOnDisk: 1000, expected: 1000),
               .progress(sending, bytesWritten: 400, totalOnDisk: 400, expected: 1000),
               .progress(put, bytesWritten: 1000, totalOnDisk: 1000, expected: 1000))
        setNetwork(h, metered: true)
        XCTAssertEqual(Set(h.engine.stopped), [sending, put], "only the POST awaiting its answer went on")
        XCTAssertEqual(h.state(sent), .running)
        XCTAssertEqual(reason(h, sending), "metered")
        XCTAssertEqual(reason(h, put), "metered")

        h.send(.response(sent, EngineResponse(status: 201, expectedTotal: 2, effectiveURL: "https://example.com/up/form.bin")),
               .completed(sent, .succeeded(bytesOnDisk: 1000, sha256: nil)))
        XCTAssertEqual(h.state(sent), .completed)
        XCTAssertEqual(h.snapshot(sent)?.attempts, 1, "sent once")
    }

    /// Offline too, a POST whose body is out runs on. Its answer then stalls: the
    /// engine tells of the success answer before the failure, so it is not sent again;
    /// one that failed without an answer waits to retry, and then for the network.
    func testAPOSTAwaitingItsAnswerRunsOnWhenTheNetworkGoesOffline() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 1))
        let s = try h.openSession { $0.retries = 3 }
        let answered = try h.upload(s, method: "POST")
        let unanswered = try h.upload(s, "https://example.com/up/other.bin", method: "POST")
        for t in [answered, unanswered] { h.send(.progress(t, bytesWritten: 1000, totalOnDisk: 1000, expected: 1000)) }
        setNetwork(h, online: false)
        XCTAssertEqual(h.engine.stopped, [])
        XCTAssertEqual([answered, unanswered].map { h.state($0) }, [.running, .running])
        h.send(.response(answered, EngineResponse(status: 201, expectedTotal: 5000, effectiveURL: "https://example.com/up/form.bin")))
        h.fail(answered, .timeout("No data for 30 seconds"))
        XCTAssertEqual(h.state(answered), .failed, "the server took it: not sent again")
        h.fail(unanswered, .network("Could not reach example.com"))
        XCTAssertEqual(h.state(unanswered), .waiting)
        XCTAssertEqual(reason(h, unanswered), "retry")
        XCTAssertEqual(h.engine.startedIDs, [answered, unanswered])
    }

    /// An empty POST reports no progress: still connecting, it waits for the network
    /// like any transfer instead of failing to connect.
    func testAnEmptyPOSTIsStoppedByTheNetworkAsEveryTransfer() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let empty = h.root + "/empty.bin"
        FileManager.default.createFile(atPath: empty, contents: Data())
        var options = UploadOptions()
        options.method = "POST"
        let t = try h.sync { try $0.upload(session: s, url: "https://example.com/up/empty", file: empty, options: options) }
        XCTAssertEqual(h.state(t), .running)
        setNetwork(h, online: false)
        XCTAssertEqual(h.engine.stopped, [t])
        XCTAssertEqual(reason(h, t), "offline")
    }

    func testNetworkWaitSurvivesARestart() throws {
        let h = CoreHarness()
        setNetwork(h, metered: true)
        let t = try h.download(try frugalSession(h))
        XCTAssertEqual(reason(h, t), "metered")
        // Stored as a network wait; the restarted core (told nothing: it assumes an
        // unmetered network) lets it go at once rather than at some far-off time.
        let h2 = h.restarted()
        XCTAssertEqual(h2.state(t), .running)
        XCTAssertEqual(h2.engine.startedIDs, [t])
    }

    func testNetworkWaitRestoredOnAStillMeteredNetworkKeepsWaiting() throws {
        let h = CoreHarness()
        setNetwork(h, metered: true)
        let t = try h.download(try frugalSession(h))
        h.queue.sync { h.core.shutdown() }
        // As ferryd does: restore, learn the network, then start.
        let h2 = CoreHarness(start: false, store: h.store, restore: true, clock: h.clock, root: h.root)
        h2.sync { core in
            core.setNetworkState(metered: true, online: true)
            core.start()
        }
        XCTAssertEqual(h2.state(t), .waiting)
        XCTAssertEqual(reason(h2, t), "metered")
        XCTAssertEqual(h2.engine.startedIDs, [])
        setNetwork(h2, metered: false)
        XCTAssertEqual(h2.state(t), .running)
    }

    // MARK: - A network that wants a sign-in (captive portal)

    private func setPortal(_ h: CoreHarness, _ portal: Bool) {
        h.sync { $0.setNetworkState(metered: false, online: true, portal: portal) }
    }

    /// The network wants a sign-in; a download starts there, in a session that allows no
    /// retry unless `configure` says otherwise. Returns its session and the download.
    private func downloadBehindASignInPage(_ h: CoreHarness, _ configure: (inout SessionConfigurationUpdate) -> Void = { _ in })
        throws -> (SessionID, TransferID) {
        setPortal(h, true)
        let s = try h.openSession { $0.retries = 0; configure(&$0) }
        return (s, try h.download(s))
    }

    /// Fails `t`'s attempts with a refused connection (up to `tries`), each time waiting
    /// out the wait that follows a second at a time: the waits' lengths in seconds, until
    /// a failure is final (or a wait outlasts two minutes).
    private func waitsAfterRefusals(_ h: CoreHarness, _ t: TransferID, tries: Int) -> [Double] {
        var waits: [Double] = []
        for _ in 0..<tries {
            h.fail(t, .network("Connection refused by example.com:443"))
            guard h.state(t) == .waiting else { break }
            var waited = 0.0
            while h.state(t) == .waiting && waited < 120 {
                h.advanceAndWake(seconds: 1)
                waited += 1
            }
            waits.append(waited)
        }
        return waits
    }

    /// Behind a sign-in page, a download's TLS failure (the portal's certificate) neither
    /// fails it nor spends a retry of a session that allows none: it waits, says why, and
    /// goes again the moment the sign-in is done, then completes with no error left.
    func testATLSFailureBehindASignInPageWaitsForTheSignIn() throws {
        let h = CoreHarness()
        let (_, t) = try downloadBehindASignInPage(h)
        h.fail(t, .tls("A secure connection to example.com:443 could not be made: certificate not trusted"))
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(reason(h, t), "retry")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Tls")
        XCTAssertTrue(h.snapshot(t)?.errorMessage.contains("sign-in") ?? false, h.snapshot(t)?.errorMessage ?? "")

        setPortal(h, false)
        XCTAssertEqual(h.state(t), .running, "tried again at once after the sign-in")
        XCTAssertEqual(h.engine.startedIDs, [t, t])
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: 3, effectiveURL: url)))
        h.writePart(t, [1, 2, 3])
        h.send(.completed(t, .succeeded(bytesOnDisk: 3, sha256: nil)))
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "")
        XCTAssertEqual(h.snapshot(t)?.attempts, 2)
    }

    /// NetworkManager may be wrong (a server on the local network, a check the network
    /// blocks): behind what it calls a sign-in page, failures are still tried again by
    /// themselves, after 5, 10, 20 s …, never more than a minute apart, and the session's
    /// resource-timeout still ends them.
    func testBehindASignInPageFailuresAreTriedAgainByThemselvesUntilTheResourceTimeout() throws {
        let h = CoreHarness()
        let (_, t) = try downloadBehindASignInPage(h) { $0.resourceTimeout = 190 }
        XCTAssertEqual(waitsAfterRefusals(h, t, tries: 6), [5, 10, 20, 40, 60], "then the next wait would pass the resource-timeout")
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Network")
    }

    /// The sign-in rule is for failures a portal makes: a server's 404 behind one fails
    /// at once, and a POST upload that lost its connection is left to its session's
    /// retries (none here): it may have reached the server.
    func testBehindASignInPageAnHTTPErrorOrAPOSTFailsAsUsual() throws {
        let h = CoreHarness()
        let (s, t) = try downloadBehindASignInPage(h)
        h.send(.response(t, EngineResponse(status: 404, effectiveURL: url)))
        h.fail(t, .http(status: 404, "HTTP 404 Not Found"))
        XCTAssertEqual(h.state(t), .failed)
        let post = try h.upload(s, method: "POST")
        h.fail(post, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(post), .failed)
        XCTAssertEqual(h.snapshot(post)?.errorName, "org.ferry.Ferry1.Error.Network")
        // A failed handshake sent nothing: such a POST waits like the others.
        let handshake = try h.upload(s, "https://example.com/up/other", method: "POST")
        h.fail(handshake, .tls("A secure connection to example.com:443 could not be made: certificate not trusted"))
        XCTAssertEqual(h.state(handshake), .waiting)
    }

    /// A request the portal left unanswered ends after the sign-in: its attempt began
    /// behind the portal, so its failure is still waited out (tried again after 5 s), not
    /// final.
    func testAnAttemptBegunBehindASignInPageThatFailsAfterTheSignInIsWaitedOut() throws {
        let h = CoreHarness()
        let (_, t) = try downloadBehindASignInPage(h)
        setPortal(h, false)
        h.fail(t, .timeout("No data from example.com:443 for 60 seconds"))
        XCTAssertEqual(h.state(t), .waiting)
        h.advanceAndWake(seconds: 5)
        XCTAssertEqual(h.state(t), .running)
        h.fail(t, .timeout("No data from example.com:443 for 60 seconds"))
        XCTAssertEqual(h.state(t), .failed, "begun after the sign-in: final")
    }

    /// A failure that is not the portal's ends the sign-in wait: the server's 503 with
    /// `Retry-After: 600` is waited for in full, even when the sign-in is done meanwhile.
    func testAServerAnswerBehindASignInPageIsWaitedForAsUsual() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let (_, t) = try downloadBehindASignInPage(h) { $0.retries = 3 }
        h.fail(t, .tls("A secure connection to example.com:443 could not be made: certificate not trusted"))
        h.advanceAndWake(seconds: 5)
        XCTAssertEqual(h.state(t), .running)
        h.send(.response(t, EngineResponse(status: 503, effectiveURL: url, retryAfter: 600)))
        h.fail(t, .http(status: 503, "HTTP 503 Service Unavailable"))
        XCTAssertEqual(h.state(t), .waiting)
        setPortal(h, false)
        XCTAssertEqual(h.state(t), .waiting, "the server asked for 600 s")
        h.advanceAndWake(seconds: 600)
        XCTAssertEqual(h.state(t), .running)
    }

    /// NetworkManager can be wrong for long: after about ten minutes of sign-in waits (13
    /// of them), failures count as usual again, here final (no retries).
    func testSignInWaitsEndAfterAboutTenMinutes() throws {
        let h = CoreHarness()
        let (_, t) = try downloadBehindASignInPage(h)
        let waits = waitsAfterRefusals(h, t, tries: 20)
        XCTAssertEqual(waits.count, 13)
        XCTAssertEqual(waits.reduce(0, +), 615, "5, 10, 20, 40 s, then nine minutes")
        XCTAssertEqual(h.state(t), .failed)
    }

    // MARK: - A move to another network

    /// NetworkManager's object path of its active connection `n`.
    private func route(_ n: Int) -> String { "/org/freedesktop/NetworkManager/ActiveConnection/\(n)" }

    private func setRoute(_ h: CoreHarness, _ route: String?, online: Bool = true) {
        h.sync { $0.setNetworkState(metered: false, online: online, route: route) }
    }

    /// Wi-Fi to wired (NetworkManager's primary connection changes): a running download
    /// stops and starts over at once on a new connection, from its part file; no
    /// failure, no retry spent (it has none). The engine forgets its connections after
    /// the stop, before the new start.
    func testAMoveToAnotherNetworkStartsRunningTransfersOverOnNewConnections() throws {
        let h = CoreHarness()
        setRoute(h, route(1))
        let s = try h.openSession { $0.retries = 0 }
        let t = try running(h, s)
        let other = try h.download(s, "https://example.com/other.bin")
        XCTAssertEqual(h.state(other), .running)
        XCTAssertEqual(h.engine.connectionsForgotten, [], "the first route known is no move")

        setRoute(h, route(2))
        XCTAssertEqual(h.engine.stopped, [t, other])
        XCTAssertEqual(h.engine.calls.suffix(3), ["stop \(t)", "stop \(other)", "forget"], "forgotten after the stops")
        XCTAssertEqual(h.state(t), .queued, "not started again while its attempt may write")
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.engine.calls.last, "start \(t)")
        let request = h.engine.lastRequest(t)
        XCTAssertEqual(request?.offset, 6, "continues from the part file")
        XCTAssertEqual(request?.ifRange, "\"v1\"")
        h.succeed(t)
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "")
        XCTAssertFalse(h.observer.events.contains(.transferChanged(t, .waiting)), "no retry wait")
    }

    /// No move: the same connection named again, none named for a moment (between two
    /// networks) then the same again, metered changing alone.
    func testNoMoveStartsNothingOver() throws {
        let h = CoreHarness()
        setRoute(h, route(1))
        let t = try running(h, try h.openSession())
        setRoute(h, nil)
        setRoute(h, route(1))
        h.sync { $0.setNetworkState(metered: true, online: true, route: route(1)) }
        XCTAssertEqual(h.engine.stopped, [])
        XCTAssertEqual(h.engine.connectionsForgotten, [])
        XCTAssertEqual(h.state(t), .running)

        // Without NetworkManager's word on the route, nothing is a move either.
        let other = CoreHarness()
        let u = try running(other, try other.openSession())
        setRoute(other, nil)
        other.sync { $0.setNetworkState(metered: true, online: true) }
        XCTAssertEqual(other.engine.stopped, [])
        XCTAssertEqual(other.state(u), .running)
    }

    /// Between two networks for a moment (no primary connection), then another one: a move.
    func testAMoveThroughNoConnectionIsAMove() throws {
        let h = CoreHarness()
        setRoute(h, route(1))
        let t = try running(h, try h.openSession())
        setRoute(h, nil)
        XCTAssertEqual(h.state(t), .running)
        setRoute(h, route(7))
        XCTAssertEqual(h.engine.stopped, [t])
        XCTAssertEqual(h.engine.connectionsForgotten, [1])
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .running, "started again once stopped")
        XCTAssertEqual(h.engine.startedIDs, [t, t])
    }

    /// A POST whose body is out goes on (sent again, the server could act twice), and
    /// so does one sending its body (it would start over); one that has sent nothing
    /// yet starts over. Back online after offline, nothing runs on
    /// an old connection: the engine forgets them before the waiting transfers start.
    func testAPOSTAwaitingItsAnswerGoesOnAcrossAMoveAndComingBackOnlineForgetsConnections() throws {
        let h = CoreHarness()
        setRoute(h, route(1))
        let s = try h.openSession()
        let sent = try h.upload(s, method: "POST")
        let sending = try h.upload(s, "https://example.com/up/other.bin", method: "POST")
        let half = try h.upload(s, "https://example.com/up/half.bin", method: "POST")
        h.send(.progress(sent, bytesWritten: 1000, totalOnDisk: 1000, expected: 1000),
               .progress(half, bytesWritten: 400, totalOnDisk: 400, expected: 1000))
        setRoute(h, route(2))
        XCTAssertEqual(h.engine.stopped, [sending])
        XCTAssertEqual(h.state(sent), .running)
        XCTAssertEqual(h.state(half), .running, "half sent: stopped, it would send it all again")
        XCTAssertEqual(h.engine.connectionsForgotten, [1])
        h.send(.completed(sending, .stopped(bytesOnDisk: 0)))
        XCTAssertEqual(h.engine.startedIDs, [sent, sending, half, sending])
        h.send(.response(sent, EngineResponse(status: 201, expectedTotal: 2, effectiveURL: "https://example.com/up/form.bin")),
               .completed(sent, .succeeded(bytesOnDisk: 1000, sha256: nil)))
        XCTAssertEqual(h.snapshot(sent)?.attempts, 1, "sent once")

        setRoute(h, nil, online: false)
        XCTAssertEqual(reason(h, sending), "offline")
        h.send(.completed(sending, .stopped(bytesOnDisk: 0)))
        setRoute(h, route(2))
        XCTAssertEqual(h.engine.connectionsForgotten, [1, 3], "forgotten again (after the offline stops)")
        XCTAssertEqual(h.engine.calls.suffix(2), ["forget", "start \(sending)"], "before the start")
        XCTAssertEqual(h.state(sending), .running)
    }

    /// A transfer that would start over from its first byte, having moved some, runs on
    /// across a move (if its connection still works it finishes there): a download from
    /// a server that gives no validator, one that takes no ranges, an upload under way.
    /// Not over HTTP/2, where other requests would go on its connection as streams.
    func testAMoveLetsATransferThatWouldStartOverRunOnUnlessItsConnectionIsShared() throws {
        let h = CoreHarness()
        setRoute(h, route(1))
        let s = try h.openSession()
        func download(_ name: String, _ response: EngineResponse) throws -> TransferID {
            let t = try h.download(s, "https://example.com/\(name)")
            h.send(.response(t, response))
            h.writePart(t, Array(repeating: 1, count: 6))
            h.send(.progress(t, bytesWritten: 6, totalOnDisk: 6, expected: 100))
            return t
        }
        let noValidator = try download("a", EngineResponse(status: 200, expectedTotal: 100, acceptsRanges: true, effectiveURL: url))
        let noRanges = try download("b", EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, effectiveURL: url))
        var h2 = EngineResponse(status: 200, expectedTotal: 100, effectiveURL: url)
        h2.multiplexed = true
        let shared = try download("c", h2)
        let resumable = try download("d", EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url))
        let put = try h.upload(s, "https://uploads.example.net/put.bin", method: "PUT")
        h.send(.progress(put, bytesWritten: 400, totalOnDisk: 400, expected: 1000))
        let unstarted = try h.upload(s, "https://example.com/up/other.bin", method: "PUT")
        XCTAssertEqual([noValidator, noRanges, shared, resumable, put, unstarted].map { h.state($0) }, Array(repeating: .running, count: 6))

        setRoute(h, route(2))
        XCTAssertEqual(h.engine.stopped, [shared, resumable, unstarted])
        XCTAssertEqual(h.engine.calls.last, "forget")
        for t in [noValidator, noRanges, put] { XCTAssertEqual(h.state(t), .running) }
        h.succeed(noValidator)
        XCTAssertEqual(h.state(noValidator), .completed)
        XCTAssertEqual(h.snapshot(noValidator)?.attempts, 1)

        // Continued from its part file, the download gets the whole file again (the
        // server no longer takes ranges): from then on a stop would lose all it has.
        h.send(.completed(resumable, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.engine.lastRequest(resumable)?.offset, 6)
        h.send(.response(resumable, EngineResponse(status: 200, etag: "\"v2\"", expectedTotal: 100, effectiveURL: url)),
               .progress(resumable, bytesWritten: 3, totalOnDisk: 3, expected: 100))
        setRoute(h, route(3))
        XCTAssertEqual(h.engine.stopped, [shared, resumable, unstarted], "it runs on")
        XCTAssertEqual(h.state(resumable), .running)
    }

    /// A download whose data is all in (its file being flushed and checked) needs the
    /// network no more: a move lets it finish as it was.
    func testAMoveLetsADownloadWhoseDataIsAllInFinish() throws {
        let h = CoreHarness()
        setRoute(h, route(1))
        let t = try running(h, try h.openSession())
        h.send(.connectionsFreed(t))
        setRoute(h, route(2))
        XCTAssertEqual(h.engine.stopped, [])
        XCTAssertEqual(h.engine.connectionsForgotten, [0])
        h.succeed(t)
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(h.snapshot(t)?.attempts, 1)
    }

    // MARK: - Retry waits after a failure of the network

    /// Failures on the old network (a VPN gone: connections refused, left unanswered)
    /// wait out a backoff of a minute here. After a move they go again at once, on new
    /// connections (after the forget), spending no retry more than the one each waited
    /// for; a 503's wait (the server's state, not the network's) runs its course.
    func testAMoveTriesAgainAtOnceTransfersWaitingAfterAFailureOfTheNetwork() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        setRoute(h, route(1))
        let s = try h.openSession { $0.retries = 1 }
        let refused = try running(h, s)
        h.fail(refused, .network("Connection refused by example.com:443"), bytes: 6)
        let unanswered = try h.download(s, "https://example.com/other.bin")
        h.fail(unanswered, .timeout("No data from example.com:443 for 60 seconds"))
        let busy = try h.download(s, "https://example.com/busy.bin")
        h.send(.response(busy, EngineResponse(status: 503, effectiveURL: "https://example.com/busy.bin")))
        h.fail(busy, .http(status: 503, "HTTP 503 Service Unavailable"))
        // A 503 whose answer was cut: the server's wait all the same.
        let cutAnswer = try h.download(s, "https://example.com/cut.bin")
        h.send(.response(cutAnswer, EngineResponse(status: 503, effectiveURL: "https://example.com/cut.bin")))
        h.fail(cutAnswer, .network("The connection to example.com:443 closed after 10 of 100 bytes"))
        XCTAssertEqual(h.snapshot(cutAnswer)?.errorName, "org.ferry.Ferry1.Error.Network")
        for t in [refused, unanswered, busy, cutAnswer] {
            XCTAssertEqual(h.state(t), .waiting)
            XCTAssertEqual(reason(h, t), "retry")
        }
        let busyDue = h.snapshot(busy)?.nextAttempt

        setRoute(h, route(2))
        XCTAssertEqual(h.state(refused), .running, "tried again at once")
        XCTAssertEqual(h.state(unanswered), .running)
        XCTAssertEqual(h.engine.calls.suffix(3), ["forget", "start \(refused)", "start \(unanswered)"], "on new connections")
        XCTAssertEqual(h.engine.lastRequest(refused)?.offset, 6, "continues from the part file")
        XCTAssertEqual(h.state(busy), .waiting, "the server's wait runs its course")
        XCTAssertEqual(h.snapshot(busy)?.nextAttempt, busyDue)
        XCTAssertEqual(h.state(cutAnswer), .waiting)

        // The retry each waited for was its only one: failing again, it fails.
        h.fail(refused, .network("Connection refused by example.com:443"), bytes: 6)
        XCTAssertEqual(h.state(refused), .failed)
        h.succeed(unanswered)
        XCTAssertEqual(h.state(unanswered), .completed)
        XCTAssertEqual(h.snapshot(unanswered)?.attempts, 2)
        h.advanceAndWake(seconds: 61)
        XCTAssertEqual(h.state(busy), .running, "after its wait")
        XCTAssertEqual(h.state(cutAnswer), .running)
    }

    /// Back from `offline` (asleep, the cable out), a transfer that failed on the
    /// network before goes again at once; the network becoming metered tries nothing
    /// early. The requeued transfer is judged as any other: on a metered network, one
    /// of a session that does not allow it waits for that.
    func testComingBackOnlineTriesAgainAtOnceAndOnlyThen() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        setRoute(h, route(1))
        let s = try h.openSession { $0.retries = 2 }
        let t = try running(h, s)
        h.fail(t, .network("The connection to example.com:443 was reset"), bytes: 6)
        let frugal = try h.download(try frugalSession(h), "https://example.com/frugal.bin")
        h.fail(frugal, .network("Could not resolve host example.com"))
        XCTAssertEqual(reason(h, t), "retry")
        XCTAssertEqual(reason(h, frugal), "retry")

        h.sync { $0.setNetworkState(metered: true, online: true, route: route(1)) }
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.state(frugal), .waiting)
        XCTAssertEqual(h.engine.startedIDs, [t, frugal])

        h.sync { $0.setNetworkState(metered: true, online: false, route: nil) }
        XCTAssertEqual(reason(h, t), "retry", "a wait for a time is left alone offline")
        h.sync { $0.setNetworkState(metered: true, online: true, route: route(1)) }
        XCTAssertEqual(h.state(t), .running, "back online: tried again at once")
        XCTAssertEqual(h.state(frugal), .waiting)
        XCTAssertEqual(reason(h, frugal), "metered", "judged as any queued transfer")
        XCTAssertEqual(h.engine.startedIDs, [t, frugal, t])
    }

    /// A move onto a network that wants a sign-in (hotel Wi-Fi) tries nothing early:
    /// the page would answer in the server's place (its certificate, a final `Tls`).
    /// Once signed in, the transfer goes at once.
    func testAMoveOntoASignInPageWaitsForTheSignInBeforeTryingAgain() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        setRoute(h, route(1))
        let t = try running(h, try h.openSession { $0.retries = 2 })
        h.fail(t, .network("Connection refused by example.com:443"), bytes: 6)
        let due = h.snapshot(t)?.nextAttempt
        h.sync { $0.setNetworkState(metered: false, online: true, portal: true, route: route(2)) }
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.snapshot(t)?.nextAttempt, due)
        h.sync { $0.setNetworkState(metered: false, online: true, portal: false, route: route(2)) }
        XCTAssertEqual(h.state(t), .running, "signed in: tried again at once")
        XCTAssertEqual(h.engine.startedIDs, [t, t])
    }

    /// After a sleep (logind: the system woke up), running transfers start over on new
    /// connections as after a move, and one waiting after a failure of the network goes
    /// now. Offline, nothing is tried: the network's return does it.
    func testWakingUpStartsOverAsAfterAMove() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        let s = try h.openSession { $0.retries = 1 }
        let t = try running(h, s)
        let failed = try h.download(s, "https://example.com/other.bin")
        h.fail(failed, .network("Connection refused by example.com:443"))
        XCTAssertEqual(reason(h, failed), "retry")
        h.sync { $0.systemWoke() }
        XCTAssertEqual(h.engine.calls.suffix(3), ["stop \(t)", "forget", "start \(failed)"])
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.engine.lastRequest(t)?.offset, 6, "continues from the part file")
        XCTAssertEqual(h.snapshot(t)?.errorName, "")

        let other = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        let u = try other.download(try other.openSession { $0.retries = 1 })
        other.fail(u, .network("Network is unreachable"))
        setNetwork(other, online: false)
        other.sync { $0.systemWoke() }
        XCTAssertEqual(other.state(u), .waiting)
        XCTAssertEqual(reason(other, u), "retry")
        setNetwork(other, online: true)
        XCTAssertEqual(other.state(u), .running)
    }

    /// Right after a wake-up the network may not be back (Wi-Fi reconnecting; without
    /// NetworkManager ferryd cannot tell): for 30 s failures of the network spend no
    /// retry of a session that allows none; the transfer tries again every 3 s, saying
    /// why, and completes once the network is back. After that, failures count again,
    /// and a POST's count at once (it may have reached the server).
    func testJustAfterAWakeUpFailuresOfTheNetworkSpendNoRetry() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        let s = try h.openSession { $0.retries = 0 }
        let t = try running(h, s)
        h.sync { $0.systemWoke() }
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .running)
        for _ in 0..<3 {
            h.fail(t, .network("Network is unreachable"), bytes: 6)
            XCTAssertEqual(h.state(t), .waiting)
            XCTAssertEqual(reason(h, t), "retry")
            XCTAssertTrue(h.snapshot(t)?.errorMessage.contains("just woken up") ?? false, h.snapshot(t)?.errorMessage ?? "")
            h.advanceAndWake(seconds: 3)
            XCTAssertEqual(h.state(t), .running)
        }
        h.succeed(t)
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "")

        let post = try h.upload(s, method: "POST")
        h.fail(post, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(post), .failed, "a POST may have reached the server")
        h.advanceAndWake(seconds: 30)
        let late = try h.download(s, "https://example.com/late.bin")
        h.fail(late, .network("Network is unreachable"))
        XCTAssertEqual(h.state(late), .failed, "30 s after the wake-up, failures count again")
    }

    /// The grace after a wake-up covers a request left unanswered (`Timeout`) too, but
    /// not what the server answered with an error status (a 503 whose answer was cut:
    /// the server's word, counted), and not past the session's resource-timeout.
    func testTheGraceAfterAWakeUpIsForTheNetworkOnlyAndEndsAtTheResourceTimeout() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 60))
        let s = try h.openSession { $0.retries = 0 }
        let short = try h.openSession("com.example.Short") { $0.retries = 0; $0.resourceTimeout = 4 }
        h.sync { $0.systemWoke() }
        let unanswered = try h.download(s, "https://example.com/unanswered.bin")
        h.fail(unanswered, .timeout("No data from example.com:443 for 60 seconds"))
        XCTAssertEqual(h.state(unanswered), .waiting)
        XCTAssertEqual(reason(h, unanswered), "retry")
        let busy = try h.download(s, "https://example.com/busy.bin")
        h.send(.response(busy, EngineResponse(status: 503, effectiveURL: "https://example.com/busy.bin")))
        h.fail(busy, .network("The connection to example.com:443 closed after 10 of 100 bytes"))
        XCTAssertEqual(h.state(busy), .failed, "the server's answer counts")

        let t = try h.download(short, "https://example.com/short.bin")
        h.fail(t, .network("Network is unreachable"))
        XCTAssertEqual(h.state(t), .waiting, "3 s of its 4")
        h.advanceAndWake(seconds: 3)
        XCTAssertEqual(h.state(t), .running)
        h.fail(t, .network("Network is unreachable"))
        XCTAssertEqual(h.state(t), .failed, "the next try would come after the resource-timeout")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Network")
    }
}
