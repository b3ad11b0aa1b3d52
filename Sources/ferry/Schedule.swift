import ArgumentParser
import DBus
import FerryBusClient
import FerryInterface
import Foundation

private typealias ScheduleKey = FerryInterface.ScheduleExtra

/// `ferry config schedule`: reads or replaces the Manager's `Schedule`.
struct ConfigSchedule: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedule", abstract: "Print or replace the schedule (time windows with their own speed limit).",
        discussion: """
            Without WINDOW, prints the windows one a line, as they are given (nothing when there are none). \
            With WINDOWs, they replace the schedule, in order (the first one that covers a moment applies); \
            --clear removes it. A WINDOW is 'DAYS HH:MM-HH:MM [RATE] [discretionary-only]' in local time: \
            DAYS is '*', or day names and ranges separated by commas (Mon-Fri, Sat,Sun); an end not after \
            the start runs overnight, 24:00 is the end of the day; RATE (500k, 2M; none or 0 = no limit) \
            replaces speed-limit while the window is on; discretionary-only lets only discretionary transfers \
            start in the window, and makes them wait outside such windows. Example: \
            ferry config schedule 'Mon-Fri 09:00-17:00 512KiB' '* 23:00-06:00 none discretionary-only'
            """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("'DAYS HH:MM-HH:MM [RATE] [discretionary-only]'.", valueName: "WINDOW"))
    var windows: [String] = []
    @Flag(help: "Remove every window.")
    var clear = false
    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        if clear && !windows.isEmpty { throw ValidationError("--clear takes no WINDOW") }
        _ = try windows.map(Self.parse)
    }

    /// One WINDOW argument; the daemon checks the days and times (InvalidArgument).
    static func parse(_ text: String) throws -> ScheduleWindowJSON {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard words.count >= 2, words.count <= 4 else {
            throw ValidationError("'\(text)' is not a window: 'DAYS HH:MM-HH:MM [RATE] [discretionary-only]'")
        }
        let times = words[1].split(separator: "-", omittingEmptySubsequences: false)
        guard times.count == 2 else { throw ValidationError("'\(words[1])' is not HH:MM-HH:MM") }
        var w = ScheduleWindowJSON(days: words[0], start: String(times[0]), end: String(times[1]), speedLimit: 0, discretionaryOnly: false)
        for word in words.dropFirst(2) {
            if word == "discretionary-only" {
                w.discretionaryOnly = true
            } else if let rate = ByteRate.parse(word) {
                w.speedLimit = rate
            } else {
                throw ValidationError("'\(word)' in '\(text)' is neither a rate (500k, 2M, none) nor discretionary-only")
            }
        }
        return w
    }

    /// A window as `parse` reads it back.
    static func text(_ w: ScheduleWindowJSON) -> String {
        let rate = w.speedLimit == 0 ? "none" : ByteRate.text(w.speedLimit).replacingOccurrences(of: " ", with: "")
        return "\(w.days) \(w.start)-\(w.end) \(rate)" + (w.discretionaryOnly ? " discretionary-only" : "")
    }

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let name = FerryInterface.ManagerProperty.schedule.name
            if clear || !windows.isEmpty {
                let value = DBusValue.array(element: "(sssta{sv})", try windows.map(Self.parse).map { w in
                    .structure([.string(w.days), .string(w.start), .string(w.end), .uint64(w.speedLimit),
                                .vardict(w.discretionaryOnly ? [ScheduleKey.discretionaryOnly.name: .boolean(true)] : [:])])
                })
                return try await client.setManagerProperty(name, value)
            }
            let p = try await client.managerProperties()
            let read: [ScheduleWindowJSON] = (p[name]?.arrayElements ?? []).compactMap { item in
                guard let f = item.structFields, f.count == 5 else { return nil }
                return ScheduleWindowJSON(days: f[0].string ?? "", start: f[1].string ?? "", end: f[2].string ?? "",
                                          speedLimit: f[3].uint64 ?? 0,
                                          discretionaryOnly: f[4].vardict?[ScheduleKey.discretionaryOnly.name]?.bool ?? false)
            }
            if json { return JSONOutput.print(read) }
            for w in read { Output.line(Self.text(w)) }
        }
    }
}
