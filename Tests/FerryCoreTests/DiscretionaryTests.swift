import XCTest
@testable import FerryCore

/// Discretionary transfers (power, metered networks, the schedule's discretionary-only
/// windows) and the schedule's speed limits, with a fake engine and a fake clock (UTC).
/// The clock starts on Tuesday 2023-11-14 at 22:13:20 UTC.
final class DiscretionaryTests: XCTestCase {
    private func reason(_ h: CoreHarness, _ t: TransferID) -> String { h.snapshot(t)?.waitingReason ?? "?" }
    private func power(_ h: CoreHarness, battery: Bool = false, saver: Bool = false) {
        h.sync { $0.setPowerState(onBattery: battery, powerSaver: saver) }
    }
    private func discretionary(_ h: CoreHarness, _ s: SessionID) throws -> TransferID {
        try h.download(s) { $0.discretionary = true }
    }
    /// Moves the fake clock on and lets the core do what came due (as its timer would).
    private func advance(_ h: CoreHarness, seconds: Double) {
        h.clock.advance(seconds: seconds)
        h.sync { $0.wakeDueTransfers() }
    }

    func testOnBatteryHoldsBackDiscretionaryTransfersOnly() throws {
        let h = CoreHarness()
        power(h, battery: true)
        let s = try h.openSession()
        let waiting = try discretionary(h, s)
        let going = try h.download(s)
        XCTAssertEqual(h.state(waiting), .waiting)
        XCTAssertEqual(reason(h, waiting), "battery")
        XCTAssertEqual(h.state(going), .running, "not discretionary: unaffected")
        XCTAssertEqual(h.engine.startedIDs, [going])

        power(h, battery: false)
        XCTAssertEqual(h.state(waiting), .running)
        XCTAssertEqual(reason(h, waiting), "")
        XCTAssertEqual(h.snapshot(waiting)?.attempts, 1, "the wait was no attempt")
    }

    func testPowerSaverHoldsBackAndStopsARunningDiscretionaryTransfer() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try discretionary(h, s)
        XCTAssertEqual(h.state(t), .running)
        power(h, saver: true)
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(reason(h, t), "power-saver")
        XCTAssertEqual(h.engine.stopped, [t], "stopped at a resumable point")
        // On battery as well: battery comes first.
        power(h, battery: true, saver: true)
        XCTAssertEqual(reason(h, t), "battery")
        power(h)
        h.send(.completed(t, .stopped(bytesOnDisk: 0)))
        XCTAssertEqual(h.state(t), .running)
    }

    func testTheSessionKeyAppliesUnlessTheTransferSaysOtherwise() throws {
        let h = CoreHarness()
        power(h, battery: true)
        let s = try h.openSession { $0.discretionary = true }
        let byKey = try h.download(s)
        let optedOut = try h.download(s) { $0.discretionary = false }
        XCTAssertEqual(reason(h, byKey), "battery")
        XCTAssertEqual(h.state(optedOut), .running)
        // The key changed on re-opening: its transfers are judged again.
        _ = try h.openSession { $0.discretionary = false }
        XCTAssertEqual(h.state(byKey), .running)
    }

    func testMeteredHoldsBackDiscretionaryTransfersWhateverAllowMeteredSays() throws {
        let h = CoreHarness()
        h.sync { $0.setNetworkState(metered: true, online: true) }
        let s = try h.openSession { $0.allowMetered = true }
        let t = try discretionary(h, s)
        let other = try h.download(s)
        XCTAssertEqual(reason(h, t), "metered")
        XCTAssertEqual(h.state(other), .running)
        h.sync { $0.setNetworkState(metered: false, online: true) }
        XCTAssertEqual(h.state(t), .running)
    }

    func testPowerWaitSurvivesARestart() throws {
        let h = CoreHarness()
        power(h, battery: true)
        let t = try discretionary(h, try h.openSession())
        h.queue.sync { h.core.shutdown() }
        let h2 = CoreHarness(start: false, store: h.store, restore: true, clock: h.clock, root: h.root)
        h2.sync { core in
            core.setPowerState(onBattery: true, powerSaver: false)
            core.start()
        }
        XCTAssertEqual(reason(h2, t), "battery", "the option was kept")
        power(h2)
        XCTAssertEqual(h2.state(t), .running)
    }

    // MARK: - Schedule

    func testAWindowsSpeedLimitReplacesTheGlobalOneUntilItsEnd() throws {
        let h = CoreHarness()
        h.sync { $0.setSpeedLimit(1_000) }
        let t = try h.download(try h.openSession())
        XCTAssertEqual(h.engine.started.last?.speedLimit, 1_000)
        // 22:14-22:15 every day: 40 s ahead.
        try h.sync { try $0.setSchedule([ScheduleWindow(days: "*", start: "22:14", end: "22:15", speedLimit: 300)]) }
        XCTAssertNil(h.sync { $0.activeScheduleWindow })
        advance(h, seconds: 39)
        XCTAssertNil(h.sync { $0.activeScheduleWindow })
        advance(h, seconds: 1)
        XCTAssertEqual(h.sync { $0.activeScheduleWindow }?.speedLimit, 300)
        XCTAssertEqual(h.engine.limits.last?.id, t)
        XCTAssertEqual(h.engine.limits.last?.bps, 300)
        advance(h, seconds: 60)
        XCTAssertNil(h.sync { $0.activeScheduleWindow })
        XCTAssertEqual(h.engine.limits.last?.bps, 1_000, "outside the window SpeedLimit applies again")
        XCTAssertEqual(h.sync { $0.manager.speedLimit }, 1_000, "SpeedLimit itself never changed")
    }

    func testDiscretionaryOnlyWindowsLetDiscretionaryWorkRunOnlyInsideThem() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        try h.sync { try $0.setSchedule([ScheduleWindow(days: "*", start: "22:14", end: "22:15", discretionaryOnly: true)]) }
        let d = try discretionary(h, s)
        let running = try h.download(s)
        XCTAssertEqual(reason(h, d), "schedule", "outside the discretionary-only window")
        XCTAssertEqual(h.state(running), .running)

        advance(h, seconds: 40) // 22:14: the window is on
        XCTAssertEqual(h.state(d), .running)
        XCTAssertEqual(h.state(running), .running, "a running transfer goes on")
        let queuedInside = try h.download(s)
        XCTAssertEqual(h.state(queuedInside), .waiting, "only discretionary transfers start in the window")
        XCTAssertEqual(reason(h, queuedInside), "schedule")

        advance(h, seconds: 60) // 22:15: over
        XCTAssertEqual(h.state(queuedInside), .running)
        XCTAssertEqual(reason(h, d), "schedule")
        XCTAssertTrue(h.engine.stopped.contains(d))
    }

    func testGainingOrLosingDiscretionaryOnlyWindowsJudgesAgainOutsideThem() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let d = try discretionary(h, s)
        XCTAssertEqual(h.state(d), .running)
        // A discretionary-only window that is not on now (22:13): it stops and waits.
        try h.sync { try $0.setSchedule([ScheduleWindow(days: "*", start: "02:00", end: "03:00", discretionaryOnly: true)]) }
        XCTAssertEqual(reason(h, d), "schedule")
        XCTAssertEqual(h.engine.stopped, [d])
        h.send(.completed(d, .stopped(bytesOnDisk: 0)))
        // No schedule any more (the window on is still none): it goes on.
        try h.sync { try $0.setSchedule([]) }
        XCTAssertEqual(h.state(d), .running)
    }

    func testABadScheduleChangesNothing() throws {
        let h = CoreHarness()
        let good = [ScheduleWindow(days: "Mon-Fri", start: "09:00", end: "17:00", speedLimit: 5)]
        try h.sync { try $0.setSchedule(good) }
        XCTAssertThrowsError(try h.sync { try $0.setSchedule([ScheduleWindow(days: "Someday", start: "09:00", end: "17:00")]) }) {
            guard case CoreError.invalidArgument = $0 else { return XCTFail("\($0)") }
        }
        XCTAssertEqual(h.sync { $0.scheduleWindows }, good)
    }

    func testTheScheduleSurvivesARestartAndACrash() throws {
        let h = CoreHarness()
        let windows = [ScheduleWindow(days: "*", start: "22:00", end: "23:00", speedLimit: 7),
                       ScheduleWindow(days: "Sat,Sun", start: "01:00", end: "02:00", discretionaryOnly: true)]
        try h.sync { try $0.setSchedule(windows) }
        let h2 = h.restarted()
        XCTAssertEqual(h2.sync { $0.scheduleWindows }, windows)
        XCTAssertEqual(h2.sync { $0.activeScheduleWindow }?.speedLimit, 7, "22:13 is in the first window")
        let h3 = h2.restarted(crashed: true)
        XCTAssertEqual(h3.sync { $0.scheduleWindows }, windows)
    }
}

/// The schedule reads the local time zone only when there is a schedule: the zone and
/// its calendar load ICU's tables (1.7 MiB of an idle ferryd), which most daemons never need.
final class DiscretionaryPolicyZoneTests: XCTestCase {
    func testTheTimeZoneIsReadOnlyWithASchedule() throws {
        var policy = DiscretionaryPolicy()
        var reads = 0
        let zone = { reads += 1; return TimeZone(identifier: "UTC")! }
        let now: UInt64 = 1_700_000_000_000_000 // Tuesday 2023-11-14 22:13:20 UTC
        let empty = policy.evaluate(now: now, zone: zone)
        XCTAssertFalse(empty.changed)
        XCTAssertNil(empty.newEdge)
        XCTAssertEqual(reads, 0, "no schedule: no time zone")

        policy.setSchedule(try ScheduleWindows([ScheduleWindow(days: "Tue", start: "22:00", end: "23:00", speedLimit: 1000)]))
        let windowOn = policy.evaluate(now: now, zone: zone)
        XCTAssertTrue(windowOn.changed)
        XCTAssertEqual(windowOn.newEdge, 1_700_002_800_000_000, "the window ends at 23:00")
        XCTAssertEqual(reads, 1)
    }
}
