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
