import Foundation
import XCTest
@testable import FerryCore

/// The schedule's one rule, as a pure function: which window is on at a moment, and
/// when that may change next; and what a schedule may hold.
final class ScheduleWindowsTests: XCTestCase {
    private let utc = TimeZone(identifier: "UTC")!

    /// A moment in `zone`: 2026-06-`day` (the 1st is a Monday) at `hh:mm`.
    private func june(_ day: Int, _ hh: Int, _ mm: Int, in zone: TimeZone? = nil) -> Date {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = zone ?? utc
        return c.date(from: DateComponents(year: 2026, month: 6, day: day, hour: hh, minute: mm))!
    }

    private func refused(_ windows: [ScheduleWindow], _ fragment: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try ScheduleWindows(windows), file: file, line: line) { error in
            guard case CoreError.invalidArgument(let message) = error else {
                return XCTFail("\(error) is not InvalidArgument", file: file, line: line)
            }
            XCTAssertTrue(message.contains(fragment), "'\(message)' should mention '\(fragment)'", file: file, line: line)
        }
    }

    func testBadWindowsAreRefusedNamingWhatIsWrong() {
        refused([ScheduleWindow(days: "Mon-Xyz", start: "09:00", end: "17:00")], "window 0: days 'Mon-Xyz'")
        refused([ScheduleWindow(days: "*", start: "09:00", end: "17:00"), ScheduleWindow(days: "", start: "09:00", end: "17:00")], "window 1")
        refused([ScheduleWindow(days: "Mon,,Tue", start: "09:00", end: "17:00")], "days")
        refused([ScheduleWindow(days: "Mon-Tue-Wed", start: "09:00", end: "17:00")], "days")
        refused([ScheduleWindow(days: String(repeating: "Mon,", count: 30) + "Mon", start: "09:00", end: "17:00")], "longer than 64")
        refused([ScheduleWindow(days: "*", start: "9:00", end: "17:00")], "start '9:00'")
        refused([ScheduleWindow(days: "*", start: "24:00", end: "17:00")], "start '24:00'")
        refused([ScheduleWindow(days: "*", start: "09:00", end: "17:60")], "end '17:60'")
        refused([ScheduleWindow(days: "*", start: "09:00", end: "25:00")], "end '25:00'")
        refused([ScheduleWindow(days: "*", start: "09:00", end: "+9:00")], "end '+9:00'")
        refused([ScheduleWindow(days: "*", start: "09:00", end: "09:00")], "both 09:00")
        refused(Array(repeating: ScheduleWindow(days: "*", start: "09:00", end: "17:00"), count: 65), "at most 64")
        XCTAssertNoThrow(try ScheduleWindows(Array(repeating: ScheduleWindow(days: "*", start: "09:00", end: "17:00"), count: 64)))
        XCTAssertNoThrow(try ScheduleWindows([ScheduleWindow(days: "sat, SUN", start: "00:00", end: "24:00"),
                                              ScheduleWindow(days: "Fri-Mon", start: "22:00", end: "06:00")]))
    }

    func testDaysAndHoursOfASameDayWindow() throws {
        let s = try ScheduleWindows([ScheduleWindow(days: "Mon-Fri", start: "09:00", end: "17:00", speedLimit: 100)])
        XCTAssertNil(s.activeWindow(at: june(2, 8, 59), in: utc)) // Tuesday
        XCTAssertEqual(s.activeWindow(at: june(2, 9, 0), in: utc)?.speedLimit, 100)
        XCTAssertEqual(s.activeWindow(at: june(2, 16, 59), in: utc)?.speedLimit, 100)
        XCTAssertNil(s.activeWindow(at: june(2, 17, 0), in: utc), "the end is not in the window")
        XCTAssertNil(s.activeWindow(at: june(6, 10, 0), in: utc), "Saturday")
        XCTAssertEqual(s.activeWindow(at: june(5, 10, 0), in: utc)?.speedLimit, 100, "Friday")
    }

    func testOvernightWindowRunsIntoTheNextDay() throws {
        let s = try ScheduleWindows([ScheduleWindow(days: "Fri", start: "22:00", end: "06:00", discretionaryOnly: true)])
        XCTAssertNil(s.activeWindow(at: june(5, 21, 59), in: utc))
        XCTAssertNotNil(s.activeWindow(at: june(5, 22, 0), in: utc))
        XCTAssertNotNil(s.activeWindow(at: june(6, 5, 59), in: utc), "Saturday morning belongs to Friday's night")
        XCTAssertNil(s.activeWindow(at: june(6, 6, 0), in: utc))
        XCTAssertNil(s.activeWindow(at: june(6, 23, 0), in: utc), "Saturday night is not a Friday")
        XCTAssertNil(s.activeWindow(at: june(5, 3, 0), in: utc), "Friday morning belongs to Thursday's night")
    }

    func testTheFirstWindowOfTheListWinsWhereTheyOverlap() throws {
        let s = try ScheduleWindows([ScheduleWindow(days: "*", start: "12:00", end: "13:00", speedLimit: 1),
                                     ScheduleWindow(days: "*", start: "00:00", end: "24:00", speedLimit: 2)])
        XCTAssertEqual(s.activeWindow(at: june(3, 12, 30), in: utc)?.speedLimit, 1)
        XCTAssertEqual(s.activeWindow(at: june(3, 13, 0), in: utc)?.speedLimit, 2)
        XCTAssertEqual(s.activeWindow(at: june(3, 23, 59), in: utc)?.speedLimit, 2)
    }

    func testNextEdgeIsTheNearestStartOrEnd() throws {
        let s = try ScheduleWindows([ScheduleWindow(days: "Mon-Fri", start: "09:00", end: "17:00")])
        XCTAssertEqual(s.nextEdge(after: june(2, 8, 0), in: utc), june(2, 9, 0))
        XCTAssertEqual(s.nextEdge(after: june(2, 9, 0), in: utc), june(2, 17, 0), "strictly after")
        XCTAssertEqual(s.nextEdge(after: june(5, 18, 0), in: utc), june(8, 9, 0), "over the weekend to Monday")
        let night = try ScheduleWindows([ScheduleWindow(days: "Sun", start: "23:00", end: "02:00")])
        XCTAssertEqual(night.nextEdge(after: june(7, 23, 30), in: utc), june(8, 2, 0), "the end falls on Monday")
        XCTAssertEqual(night.nextEdge(after: june(8, 2, 0), in: utc), june(14, 23, 0), "a week later")
        XCTAssertNil(try ScheduleWindows([]).nextEdge(after: june(1, 0, 0), in: utc))
        let whole = try ScheduleWindows([ScheduleWindow(days: "Wed", start: "00:00", end: "24:00")])
        XCTAssertEqual(whole.nextEdge(after: june(3, 12, 0), in: utc), june(4, 0, 0), "24:00 is the next midnight")
    }

    func testEdgesOnClockChangeNights() throws {
        let berlin = TimeZone(identifier: "Europe/Berlin")!
        var c = Calendar(identifier: .gregorian)
        c.timeZone = utc
        func utcDate(_ month: Int, _ day: Int, _ hh: Int, _ mm: Int) -> Date {
            c.date(from: DateComponents(year: 2026, month: month, day: day, hour: hh, minute: mm))!
        }
        let s = try ScheduleWindows([ScheduleWindow(days: "Sun", start: "02:30", end: "04:00")])
        // 29 March: 02:00 CET becomes 03:00 CEST; 02:30 does not exist and is taken at 03:30 (01:30 UTC).
        XCTAssertEqual(s.nextEdge(after: utcDate(3, 28, 23, 0), in: berlin), utcDate(3, 29, 1, 30))
        XCTAssertEqual(s.nextEdge(after: utcDate(3, 29, 1, 30), in: berlin), utcDate(3, 29, 2, 0), "04:00 CEST")
        // 25 October: 03:00 CEST becomes 02:00 CET; 02:30 comes twice, the first time counts (00:30 UTC).
        XCTAssertEqual(s.nextEdge(after: utcDate(10, 24, 22, 0), in: berlin), utcDate(10, 25, 0, 30))
        XCTAssertEqual(s.nextEdge(after: utcDate(10, 25, 0, 30), in: berlin), utcDate(10, 25, 3, 0), "04:00 CET")
    }

    func testLocalTimeIsTheTimeZones() throws {
        let berlin = TimeZone(identifier: "Europe/Berlin")!
        let s = try ScheduleWindows([ScheduleWindow(days: "*", start: "09:00", end: "10:00")])
        // 09:30 in Berlin (summer, UTC+2) is 07:30 UTC.
        XCTAssertNotNil(s.activeWindow(at: june(2, 7, 30), in: berlin))
        XCTAssertNil(s.activeWindow(at: june(2, 7, 30), in: utc))
        XCTAssertEqual(s.nextEdge(after: june(2, 6, 0), in: berlin), june(2, 7, 0))
        XCTAssertEqual(s.nextEdge(after: june(2, 6, 0), in: berlin), june(2, 9, 0, in: berlin))
    }
}
