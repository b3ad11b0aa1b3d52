import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Discretionary transfers against UPower and power-profiles-daemon as python-dbusmock's
/// `upower` and `power_profiles_daemon` templates present them on a private system bus,
/// seen through the real ferryd.
final class PowerPolicyTests: SystemTestCase {
    private let discretionary: [String: DBusValue] = ["discretionary": .boolean(true)]

    func testOnBatteryHoldsBackADiscretionaryDownloadUntilMainsPower() async throws {
        try await startUPower(onBattery: true)
        try await startFerryd()
        let s = try await client.openSession("com.example.Podcasts")
        let later = serve("/later.bin", size: 150_000, seed: 1)
        let now = serve("/now.bin", size: 100_000, seed: 2)

        let a = try await download(s, "/later.bin", options: discretionary)
        let b = try await download(s, "/now.bin")
        try await waitFor(a, "waiting", reason: "battery")
        // Not discretionary: unaffected.
        let bInfo = try await finish(b)
        XCTAssertEqual(bInfo.state, "completed", bInfo.errorMessage)
        assertFile(work + "/now.bin", equals: now)
        let stillWaiting = try await a.info().state
        XCTAssertEqual(stillWaiting, "waiting")
        XCTAssertEqual(server.requests(for: "/later.bin").count, 0, "nothing was fetched on battery")

        // Mains power: it goes on by itself.
        try await setOnBattery(false)
        let aInfo = try await finish(a)
        XCTAssertEqual(aInfo.state, "completed", aInfo.errorMessage)
        XCTAssertEqual(aInfo.attempts, 1, "the wait was no attempt")
        assertFile(work + "/later.bin", equals: later)
    }

    func testPowerSaverStopsARunningDiscretionaryDownloadAndItContinues() async throws {
        try await startPowerProfiles("balanced")
        try await startFerryd()
        let s = try await client.openSession("com.example.Podcasts")
        let body = serve("/slow.bin", size: 120_000, bytesPerSecond: 40_000)
        let t = try await download(s, "/slow.bin", options: discretionary)
        try await waitForBytes(t, atLeast: 8_000)

        let mark = signals.mark
        try await setActiveProfile("power-saver")
        try await waitFor(t, "waiting", reason: "power-saver", since: mark)
        XCTAssertTrue(FileManager.default.fileExists(atPath: work + "/slow.bin.part"), "the partial file stays")

        server.clearBehaviours(on: "/slow.bin")
        try await setActiveProfile("performance")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/slow.bin", equals: body)
        XCTAssertNotNil(server.requests(for: "/slow.bin").last?.header("Range"), "continued from the partial file")
    }

    func testTheSessionKeyMakesItsTransfersDiscretionaryAndTheWaitSurvivesARestart() async throws {
        try await startUPower(onBattery: true)
        try await startFerryd()
        let s = try await client.openSession("com.example.Backup", configuration: ["discretionary": .boolean(true)])
        let body = serve("/backup.bin", size: 80_000)
        let t = try await download(s, "/backup.bin")
        try await waitFor(t, "waiting", reason: "battery")
        let config = try await s.properties()["Configuration"]?.vardict
        XCTAssertEqual(config?["discretionary"]?.bool, true)

        // Killed and started again, still on battery: it still waits.
        ferryd?.kill(SIGKILL)
        _ = ferryd?.waitForExit(timeout: 10)
        client.close()
        try await startFerryd()
        let again = try await client.openSession("com.example.Backup")
        let restored = try await again.listTransfers().first { $0.path == t.path }
        let r = try XCTUnwrap(restored)
        let info = try await r.info()
        XCTAssertEqual(info.state, "waiting")
        XCTAssertEqual(info.waitingReason, "battery")

        try await setOnBattery(false)
        let done = try await finish(r)
        XCTAssertEqual(done.state, "completed", done.errorMessage)
        assertFile(work + "/backup.bin", equals: body)
    }

    func testWithoutUPowerNothingWaits() async throws {
        try await startFerryd()
        let s = try await client.openSession("com.example.Podcasts")
        let body = serve("/a.bin", size: 50_000)
        let t = try await download(s, "/a.bin", options: discretionary)
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/a.bin", equals: body)
    }
}
