import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The Manager's `Schedule` (v1.2) through the real ferryd: what it takes and refuses,
/// that it is kept across kill -9, that a discretionary-only window's edge lets
/// discretionary work start within a second, and `ferry config schedule`.
final class ScheduleTests: FerryTestCase {
    private let signature = "(sssta{sv})"

    private func window(_ days: String, _ start: String, _ end: String, _ limit: UInt64 = 0,
                        discretionaryOnly: Bool = false) -> DBusValue {
        .structure([.string(days), .string(start), .string(end), .uint64(limit),
                    .vardict(discretionaryOnly ? ["discretionary-only": .boolean(true)] : [:])])
    }

    private func setSchedule(_ windows: [DBusValue]) async throws {
        try await client.setManagerProperty("Schedule", .array(element: signature, windows))
    }

    /// The schedule as (days, start, end, limit, discretionary-only).
    private func schedule() async throws -> [String] {
        (try await managerProperty("Schedule")?.arrayElements ?? []).map { w in
            let f = w.structFields ?? []
            return "\(f[0].string ?? "") \(f[1].string ?? "")-\(f[2].string ?? "") \(f[3].uint64 ?? 0)"
                + (f[4].vardict?["discretionary-only"]?.bool == true ? " d" : "")
        }
    }

    func testScheduleIsValidatedAnnouncedAndKeptAcrossKill() async throws {
        let empty = try await schedule()
        XCTAssertEqual(empty, [], "no schedule by default")
        let mark = signals.mark
        try await setSchedule([window("Mon-Fri", "09:00", "17:00", 524_288),
                               window("Sat,Sun", "22:00", "06:00", 0, discretionaryOnly: true)])
        let expected = ["Mon-Fri 09:00-17:00 524288", "Sat,Sun 22:00-06:00 0 d"]
        let read = try await schedule()
        XCTAssertEqual(read, expected)
        try await signals.wait("Schedule in PropertiesChanged", timeout: 10) { all in
            all.dropFirst(mark).contains { $0.path == BusClient.managerPath && $0.member == "PropertiesChanged"
                && $0.changed["Schedule"]?.arrayElements?.count == 2 }
        }

        // Refused, each with InvalidArgument, and nothing changes.
        let bad: [(String, [DBusValue])] = [
            ("a bad day", [window("Mon-Funday", "09:00", "17:00")]),
            ("a bad time", [window("*", "9am", "17:00")]),
            ("an hour past 24", [window("*", "09:00", "25:00")]),
            ("an empty window", [window("*", "09:00", "09:00")]),
            ("too many windows", Array(repeating: window("*", "09:00", "17:00"), count: 65)),
            ("an unknown extra", [.structure([.string("*"), .string("09:00"), .string("17:00"), .uint64(0),
                                              .vardict(["weekends-only": .boolean(true)])])]),
            ("a wrongly typed extra", [.structure([.string("*"), .string("09:00"), .string("17:00"), .uint64(0),
                                                   .vardict(["discretionary-only": .string("yes")])])]),
        ]
        for (what, windows) in bad {
            let e = await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", what) { try await setSchedule(windows) }
            XCTAssertFalse(e?.message.isEmpty ?? true, "\(what): a message says what is wrong")
        }
        let unchanged = try await schedule()
        XCTAssertEqual(unchanged, expected)
        // 64 windows are fine.
        try await setSchedule(Array(repeating: window("*", "09:00", "17:00"), count: 63) + [window("*", "01:00", "02:00")])
        try await setSchedule([window("Mon-Fri", "09:00", "17:00", 524_288),
                               window("Sat,Sun", "22:00", "06:00", 0, discretionaryOnly: true)])

        try await killAndRestart()
        let restored = try await schedule()
        XCTAssertEqual(restored, expected, "kept across kill -9")
    }

    func testDiscretionaryWorkStartsAtTheEdgeOfADiscretionaryOnlyWindow() async throws {
        // Local time for ferryd: UTC shifted so that its next whole minute is a few
        // seconds ahead (windows are whole minutes).
        let now = Date().timeIntervalSince1970
        let secondOfMinute = Int(now) % 60
        let offset = ((55 - secondOfMinute) % 60 + 60) % 60 // local :55 now
        try await killFerryd()
        try await startFerryd(extraEnvironment: ["FERRY_UTC_OFFSET_SECONDS": String(offset)])

        // The next local minute that is at least 1.5 s away.
        var edge = ((Date().timeIntervalSince1970 + Double(offset)) / 60).rounded(.up) * 60
        if edge - (Date().timeIntervalSince1970 + Double(offset)) < 1.5 { edge += 60 }
        let minuteOfDay = Int(edge / 60) % 1440
        func hhmm(_ m: Int) -> String { String(format: "%02d:%02d", (m % 1440) / 60, m % 60) }
        try await setSchedule([window("*", hhmm(minuteOfDay), hhmm(minuteOfDay + 2), 0, discretionaryOnly: true)])

        let s = try await client.openSession("com.example.Backup")
        let body = serve("/backup.bin", size: 64 * 1024)
        let other = serve("/other.bin", size: 32 * 1024, seed: 2)
        let t = try await s.download(server.url("/backup.bin"), options: ["destination": .string(work + "/backup.bin"),
                                                                         "discretionary": .boolean(true)])
        let plain = try await s.download(server.url("/other.bin"), options: ["destination": .string(work + "/other.bin")])
        let before = try await t.info()
        XCTAssertEqual(before.state, "waiting")
        XCTAssertEqual(before.waitingReason, "schedule", "outside the discretionary-only window")
        // Not discretionary, outside the window: unaffected.
        let plainInfo = try await finish(plain)
        XCTAssertEqual(plainInfo.state, "completed", plainInfo.errorMessage)
        assertFile(work + "/other.bin", equals: other)
        XCTAssertEqual(server.requests(for: "/backup.bin").count, 0)

        // At the edge: it starts, within a second.
        try await waitForState(t, "running", timeout: 70)
        let late = Date().timeIntervalSince1970 + Double(offset) - edge
        XCTAssertGreaterThanOrEqual(late, -0.1, "not before the window")
        XCTAssertLessThan(late, 1.0, "within a second of the edge")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/backup.bin", equals: body)
    }

    func testAWindowsSpeedLimitAppliesToEveryTransferWhileItIsOn() async throws {
        // On all day, every day: 64 KiB/s over all transfers, though SpeedLimit has none.
        try await setSchedule([window("*", "00:00", "24:00", 64 * 1024)])
        let s = try await client.openSession("com.example.Limited")
        let body = serve("/limited.bin", size: 192 * 1024)
        let (_, _, took) = try await timedDownload("/limited.bin", in: s, equals: body)
        // 192 KiB at 64 KiB/s: about 3 s (unlimited, it takes milliseconds).
        XCTAssertGreaterThan(took, 1.8, "the window's speed limit held it back")
        let manual = try await managerProperty("SpeedLimit")?.uint64
        XCTAssertEqual(manual, 0, "SpeedLimit keeps its own value")
    }

    func testCLIReadsAndSetsTheSchedule() throws {
        let set = try ferry(["config", "schedule", "Mon-Fri 09:00-17:00 512KiB", "* 23:00-06:00 none discretionary-only"])
        XCTAssertEqual(set.status, 0, set.stderr)
        let get = try ferry(["config", "schedule"])
        XCTAssertEqual(get.status, 0, get.stderr)
        XCTAssertEqual(get.stdout, "Mon-Fri 09:00-17:00 512KiB/s\n* 23:00-06:00 none discretionary-only\n")
        let json = try ferry(["config", "schedule", "--json"])
        XCTAssertEqual(json.status, 0, json.stderr)
        let decoded = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]]
        XCTAssertEqual(decoded?.count, 2)
        XCTAssertEqual(decoded?.first?["speed_limit"] as? Int, 524_288)
        XCTAssertEqual(decoded?.last?["discretionary_only"] as? Bool, true)
        // What it prints reads back.
        let again = try ferry(["config", "schedule"] + get.stdout.split(separator: "\n").map(String.init))
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(try ferry(["config", "schedule"]).stdout, get.stdout)

        let bad = try ferry(["config", "schedule", "Someday 09:00-17:00"])
        XCTAssertNotEqual(bad.status, 0)
        XCTAssertTrue(bad.stderr.contains("InvalidArgument") || bad.stderr.contains("days"), bad.stderr)
        XCTAssertEqual(bad.stdout, "")
        let clear = try ferry(["config", "schedule", "--clear"])
        XCTAssertEqual(clear.status, 0, clear.stderr)
        XCTAssertEqual(try ferry(["config", "schedule"]).stdout, "")
    }
}
