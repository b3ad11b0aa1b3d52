import Foundation

/// One window of the Manager's `Schedule` (v1.2), as a client gives it: `(days, start,
/// end, speed_limit, extras)`.
public struct ScheduleWindow: Sendable, Equatable {
    /// `*`, or day names and ranges separated by commas: `Mon-Fri`, `Sat,Sun`, `Fri-Mon`.
    public var days: String
    /// `HH:MM`, local time.
    public var start: String
    /// `HH:MM`, local time; `24:00` is the end of the day. Earlier than `start`: the
    /// window runs overnight, into the next day.
    public var end: String
    /// Bytes/s over all transfers while the window is on, in place of the Manager's
    /// `SpeedLimit`; 0 = none.
    public var speedLimit: UInt64
    /// Only discretionary transfers start while the window is on (extras key
    /// `discretionary-only`).
    public var discretionaryOnly: Bool

    public init(days: String, start: String, end: String, speedLimit: UInt64 = 0, discretionaryOnly: Bool = false) {
        self.days = days; self.start = start; self.end = end
        self.speedLimit = speedLimit; self.discretionaryOnly = discretionaryOnly
    }
}

/// The Manager's schedule: its windows checked and parsed, and the one rule that says
/// which window is on at a moment and when that may change next. Pure: the time zone is
/// given, nothing is read from the system.
///
/// Rules:
/// - A window is on from `start` on each of its days until `end` (the same day, or the
///   next one when `end` is not after `start`, an overnight window).
/// - Where windows overlap, the first one in the list is on.
/// - Local time is that of the time zone given (ferryd's: `TZ`, else the system's). An
///   edge in the hour a clock change skips comes that much later (02:30 on a
///   spring-forward night is taken at 03:30); one in a repeated hour comes at its first
///   occurrence.
public struct ScheduleWindows: Sendable, Equatable {
    /// At most this many windows (`InvalidArgument` beyond).
    public static let maxWindows = 64
    /// The longest `days` string accepted.
    public static let maxDaysBytes = 64

    public private(set) var windows: [ScheduleWindow] = []
    private var parsed: [Parsed] = []

    private struct Parsed: Equatable {
        /// Bit 0 = Monday … bit 6 = Sunday.
        var days: UInt8
        /// Minutes after midnight; `end` in 1...1440.
        var start: Int
        var end: Int
        var overnight: Bool { end <= start }
    }

    public init() {}

    /// Checks and parses `windows`.
    /// - Throws: `.invalidArgument` naming the first bad window (by index) and what is
    ///   wrong with it; too many windows.
    public init(_ windows: [ScheduleWindow]) throws {
        guard windows.count <= Self.maxWindows else {
            throw CoreError.invalidArgument("the schedule has \(windows.count) windows; at most \(Self.maxWindows) are allowed")
        }
        for (i, w) in windows.enumerated() {
            do {
                let days = try Self.parseDays(w.days)
                guard let start = Self.parseTime(w.start, allowEndOfDay: false) else {
                    throw CoreError.invalidArgument("start '\(Self.shown(w.start))' is not a time HH:MM from 00:00 to 23:59")
                }
                guard let end = Self.parseTime(w.end, allowEndOfDay: true) else {
                    throw CoreError.invalidArgument("end '\(Self.shown(w.end))' is not a time HH:MM from 00:01 to 24:00")
                }
                guard end != start else {
                    throw CoreError.invalidArgument("start and end are both \(w.start); for a whole day use 00:00-24:00")
                }
                parsed.append(Parsed(days: days, start: start, end: end == 0 ? 1440 : end))
            } catch CoreError.invalidArgument(let why) {
                throw CoreError.invalidArgument("schedule window \(i): \(why)")
            }
        }
        self.windows = windows
    }

    public var isEmpty: Bool { windows.isEmpty }

    /// Some window is `discretionary-only`: outside those windows discretionary
    /// transfers wait (reason `schedule`).
    public var hasDiscretionaryOnlyWindow: Bool { windows.contains { $0.discretionaryOnly } }

    // MARK: - The rule

    /// The window on at `date` (the first in the list that covers it), nil outside every window.
    public func activeWindow(at date: Date, in zone: TimeZone) -> ScheduleWindow? {
        guard !parsed.isEmpty else { return nil }
        let calendar = Self.calendar(zone)
        let c = calendar.dateComponents([.weekday, .hour, .minute], from: date)
        let day = Self.dayIndex(weekday: c.weekday ?? 1)
        let minute = (c.hour ?? 0) * 60 + (c.minute ?? 0)
        let yesterday = (day + 6) % 7
        for (i, p) in parsed.enumerated() {
            let today = p.days & (1 << day) != 0
            if p.overnight {
                if (today && minute >= p.start) || (p.days & (1 << yesterday) != 0 && minute < p.end) { return windows[i] }
            } else if today && minute >= p.start && minute < p.end {
                return windows[i]
            }
        }
        return nil
    }

    /// The first moment after `date` at which some window starts or ends (where the
    /// window on may change); nil for an empty schedule.
    public func nextEdge(after date: Date, in zone: TimeZone) -> Date? {
        guard !parsed.isEmpty else { return nil }
        let calendar = Self.calendar(zone)
        let today = calendar.startOfDay(for: date)
        var best: Date?
        // Every window has an edge within a week and a day.
        for offset in 0...8 {
            guard let day = calendar.date(byAdding: .day, value: offset, to: today) else { continue }
            let index = Self.dayIndex(weekday: calendar.component(.weekday, from: day))
            let yesterday = (index + 6) % 7
            for p in parsed {
                var minutes: [Int] = []
                if p.days & (1 << index) != 0 {
                    minutes.append(p.start)
                    if !p.overnight { minutes.append(p.end) }
                }
                if p.overnight && p.days & (1 << yesterday) != 0 { minutes.append(p.end) }
                for m in minutes {
                    guard let moment = Self.moment(day, minute: m, calendar), moment > date else { continue }
                    if best == nil || moment < best! { best = moment }
                }
            }
            if best != nil && offset >= 1 { break } // nothing later today can come before it
        }
        return best
    }

    // MARK: - Parsing

    static let dayNames = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

    /// `*`, or comma-separated day names (`Mon`) and ranges (`Mon-Fri`, `Fri-Mon`
    /// wraps over the weekend); names in any case.
    static func parseDays(_ text: String) throws -> UInt8 {
        guard text.utf8.count <= maxDaysBytes else {
            throw CoreError.invalidArgument("days is longer than \(maxDaysBytes) bytes")
        }
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed == "*" { return 0x7F }
        var mask: UInt8 = 0
        func day(_ name: Substring) throws -> Int {
            guard let i = dayNames.firstIndex(of: name.trimmingCharacters(in: .whitespaces).lowercased()) else {
                throw CoreError.invalidArgument("days '\(shown(text))' is not '*' or day names Mon…Sun and ranges such as Mon-Fri, separated by commas")
            }
            return i
        }
        for item in trimmed.split(separator: ",", omittingEmptySubsequences: false) {
            let ends = item.split(separator: "-", omittingEmptySubsequences: false)
            switch ends.count {
            case 1:
                let d = try day(ends[0])
                mask |= 1 << d
            case 2:
                let from = try day(ends[0]), to = try day(ends[1])
                var d = from
                while true {
                    mask |= 1 << d
                    if d == to { break }
                    d = (d + 1) % 7
                }
            default:
                _ = try day("")
            }
        }
        return mask
    }

    /// `HH:MM` with two digits each; minutes after midnight. `24:00` only as an end.
    static func parseTime(_ text: String, allowEndOfDay: Bool) -> Int? {
        let u = Array(text.utf8)
        guard u.count == 5, u[2] == UInt8(ascii: ":"),
              u.enumerated().allSatisfy({ $0.offset == 2 || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0.element) }) else {
            return nil
        }
        let digit = { (i: Int) in Int(u[i] - UInt8(ascii: "0")) }
        let hours = digit(0) * 10 + digit(1), minutes = digit(3) * 10 + digit(4)
        if hours == 24 && minutes == 0 && allowEndOfDay { return 1440 }
        guard hours < 24, minutes < 60 else { return nil }
        return hours * 60 + minutes
    }

    /// A client's string in a message: at most 64 bytes of it.
    private static func shown(_ text: String) -> String {
        text.utf8.count <= 64 ? text : String(decoding: Array(text.utf8.prefix(64)), as: UTF8.self) + "…"
    }

    // MARK: - Calendar

    private static func calendar(_ zone: TimeZone) -> Calendar {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = zone
        return c
    }

    /// Calendar weekday (1 = Sunday) to bit index (0 = Monday).
    private static func dayIndex(weekday: Int) -> Int { (weekday + 5) % 7 }

    /// `minute` minutes into the local day that starts at `day` (1440: the next day's
    /// start); a local time a clock change skips comes out as the first moment after it.
    private static func moment(_ day: Date, minute: Int, _ calendar: Calendar) -> Date? {
        if minute >= 1440 { return calendar.date(byAdding: .day, value: 1, to: day) }
        var c = calendar.dateComponents([.year, .month, .day], from: day)
        c.hour = minute / 60
        c.minute = minute % 60
        c.second = 0
        return calendar.date(from: c)
    }
}
