import ArgumentParser
import DBus
import FerryBusClient
import Foundation
import FerryInterface

struct Sessions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, show or close sessions.",
        subcommands: [SessionsList.self, SessionsShow.self, SessionsClose.self],
        defaultSubcommand: SessionsList.self)
}

func sessionJSON(_ s: SessionInfo, _ objects: ManagedObjects, pending: Int? = nil) -> SessionJSON {
    SessionJSON(identifier: s.identifier, path: s.path, activeTransfers: s.activeTransfers,
                transfers: objects.transfers.filter { $0.session == s.path }.count, pendingEvents: pending,
                configuration: ConfigurationJSON(s.configuration))
}

struct SessionsList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List sessions.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON (an array of sessions).")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let objects = try await client.managedObjects()
            let list = objects.sessions.map { sessionJSON($0, objects) }
            if json { return JSONOutput.print(list) }
            if list.isEmpty { return global.quiet ? () : Output.line("No sessions.") }
            let width = max(10, list.map(\.identifier.count).max() ?? 0) + 2
            Output.line(Format.pad("IDENTIFIER", width) + Format.pad("ACTIVE", 8) + "TRANSFERS")
            for s in list { Output.line(Format.pad(s.identifier, width) + Format.pad(String(s.activeTransfers), 8) + String(s.transfers)) }
        }
    }
}

struct SessionsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show a session: its configuration and pending events.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("The session's identifier (default: the CLI's).", valueName: "IDENT"))
    var identifier: String?
    @Flag(help: "Print JSON.")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let objects = try await client.managedObjects()
            let name = identifier ?? global.session
            guard let s = objects.session(identifier: name) else { throw CLIError.refused("no session '\(name)'; see `ferry sessions` (NoSuchSession)") }
            let events = try await BusSession(client: client, path: s.path).pendingEvents()
            if json {
                JSONOutput.print(SessionShowJSON(session: sessionJSON(s, objects, pending: events.count), pendingEvents: events.map { e in
                    PendingEventJSON(serial: e.serial, id: BusClient.transferID(e.transferPath), kind: e.kind,
                                     location: e.details["location"]?.string, errorName: e.details["error-name"]?.string,
                                     errorMessage: e.details["error-message"]?.string, httpStatus: e.details["http-status"]?.uint32,
                                     bytes: e.details["bytes"]?.int64, sha256: e.details["sha256"]?.string)
                }))
                return
            }
            let j = sessionJSON(s, objects, pending: events.count)
            var lines = ["Session \(j.identifier) (\(j.path))", "  Active transfers: \(j.activeTransfers) of \(j.transfers)",
                         "  Pending events:   \(events.count)", "  Configuration:"]
            for (k, v) in s.configuration.sorted(by: { $0.key < $1.key }) { lines.append("    \(k): \(plainText(v))") }
            for e in events {
                lines.append("  event \(e.serial): transfer \(BusClient.transferID(e.transferPath)) \(e.kind)"
                             + (e.details["error-message"]?.string.map { ": \($0)" } ?? ""))
            }
            Output.line(lines.joined(separator: "\n"))
        }
    }
}

/// A configuration value as a person reads it: `6`, `true`, `-` for an empty string,
/// `Name: value, …` for headers (no D-Bus type names).
func plainText(_ v: DBusValue) -> String {
    if let s = v.string { return s.isEmpty ? "-" : Format.shown(s) }
    if let b = v.bool { return b ? "true" : "false" }
    if let n = v.uint32 { return String(n) }
    if let n = v.uint64 { return String(n) }
    if let n = v.int32 { return String(n) }
    if let n = v.int64 { return String(n) }
    if let d = v.double { return d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : String(d) }
    if let h = v.stringDict {
        return h.isEmpty ? "-" : h.sorted { $0.key < $1.key }.map { "\(Format.shown($0.key)): \(Format.shown($0.value))" }.joined(separator: ", ")
    }
    return Format.shown("\(v)")
}

struct SessionsClose: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "close", abstract: "Close sessions: their transfers finish first, or are cancelled with --cancel.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("Session identifiers.", valueName: "IDENT"))
    var identifiers: [String]
    @Flag(help: "Cancel the sessions' transfers now.")
    var cancel = false

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let objects = try await client.managedObjects()
            for name in identifiers {
                guard let s = objects.session(identifier: name) else { throw CLIError.refused("no session '\(name)'; see `ferry sessions` (NoSuchSession)") }
                try await BusSession(client: client, path: s.path).close(cancelTransfers: cancel)
            }
        }
    }
}

struct Config: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read or change the service's settings: max-concurrent, speed-limit, notifications, and the schedule.",
        subcommands: [ConfigGet.self, ConfigSet.self, ConfigSchedule.self], defaultSubcommand: ConfigGet.self)

    static let keys = ["max-concurrent": FerryInterface.ManagerProperty.maxConcurrentTransfers.name,
                       "speed-limit": FerryInterface.ManagerProperty.speedLimit.name,
                       "notifications": FerryInterface.ManagerProperty.notificationsEnabled.name]
}

struct ConfigGet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "get", abstract: "Print the settings (or one of them).")
    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("max-concurrent, speed-limit or notifications.", valueName: "KEY"),
              completion: .list(["max-concurrent", "speed-limit", "notifications"]))
    var key: String?
    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        if let key, Config.keys[key] == nil { throw ValidationError("unknown setting '\(key)'; settings are max-concurrent, speed-limit, notifications") }
    }

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let p = try await client.managerProperties()
            typealias M = FerryInterface.ManagerProperty
            let m = ManagerJSON(version: p[M.version.name]?.string ?? "", interfaceVersion: p[M.interfaceVersion.name]?.string ?? "",
                                maxConcurrent: p[M.maxConcurrentTransfers.name]?.uint32 ?? 0,
                                speedLimit: p[M.speedLimit.name]?.uint64 ?? 0, notifications: p[M.notificationsEnabled.name]?.bool ?? false,
                                activeTransfers: p[M.activeTransfers.name]?.uint32 ?? 0, queuedTransfers: p[M.queuedTransfers.name]?.uint32 ?? 0,
                                downloadRate: p[M.downloadRate.name]?.uint64 ?? 0, uploadRate: p[M.uploadRate.name]?.uint64 ?? 0)
            // As people read (and `config set` takes) them, the same with or without a key:
            // "speed-limit 500 KiB/s", "none" for 0; --json keeps the numbers.
            let values = ["max-concurrent": String(m.maxConcurrent), "speed-limit": ByteRate.text(m.speedLimit),
                          "notifications": m.notifications ? "on" : "off"]
            if json, let key {
                // The one value, as JSON (a number or a boolean).
                return Output.raw(key == "notifications" ? (m.notifications ? "true" : "false")
                                  : key == "speed-limit" ? String(m.speedLimit) : values[key]!)
            }
            if json { return JSONOutput.print(m) }
            if let key { return Output.line(values[key]!) }
            for k in ["max-concurrent", "speed-limit", "notifications"] { Output.line("\(k) \(values[k]!)") }
        }
    }
}

struct ConfigSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Change a setting.",
        discussion: "max-concurrent N (transfers at once); speed-limit RATE (bytes/s over all transfers, e.g. 500k, 2M; 0 = none); notifications on|off.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("max-concurrent, speed-limit or notifications.", valueName: "KEY"),
              completion: .list(["max-concurrent", "speed-limit", "notifications"]))
    var key: String
    @Argument(help: ArgumentHelp("The new value.", valueName: "VALUE"))
    var value: String

    func parsed() throws -> DBusValue {
        switch key {
        case "max-concurrent":
            guard let n = UInt32(value), n > 0 else { throw ValidationError("max-concurrent takes a whole number of at least 1") }
            return .uint32(n)
        case "speed-limit":
            guard let n = ByteRate.parse(value) else { throw ValidationError("'\(value)' is not a rate: bytes per second from 1 up, with k, M or G (500k, 2M; 0 = none)") }
            return .uint64(n)
        case "notifications":
            switch value.lowercased() {
            case "on", "true", "yes", "1": return .boolean(true)
            case "off", "false", "no", "0": return .boolean(false)
            default: throw ValidationError("notifications takes on or off")
            }
        default:
            throw ValidationError("unknown setting '\(key)'; settings are max-concurrent, speed-limit, notifications")
        }
    }

    func validate() throws { _ = try parsed() }

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            try await client.setManagerProperty(Config.keys[key]!, try parsed())
        }
    }
}

/// Byte rates and sizes as people type them: 500, 500k, 1.5M, 2MiB, 1G (powers of 1024).
enum ByteRate {
    /// A rate as `config get` prints it, in IEC units as the rest of the CLI: "none" for
    /// 0, "500 KiB/s", "1.5 MiB/s", "100 B/s"; `parse` reads it back (to the byte where
    /// the rate is a whole number of its unit, else to a tenth of it).
    static func text(_ rate: UInt64) -> String {
        if rate == 0 { return "none" }
        let units: [(UInt64, String)] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
        for (size, unit) in units where rate >= size {
            return rate % size == 0 ? "\(rate / size) \(unit)/s" : String(format: "%.1f %@/s", Double(rate) / Double(size), unit)
        }
        return "\(rate) B/s"
    }

    static func parse(_ text: String) -> UInt64? {
        var s = text.trimmingCharacters(in: .whitespaces).lowercased()
        // What `config get` prints reads back: "none", "500 KiB/s".
        if s == "none" { return 0 }
        for suffix in ["/s", "ib", "b"] where s.hasSuffix(suffix) { s.removeLast(suffix.count) }
        var multiplier: Double = 1
        if let last = s.last, let m = ["k": 1024.0, "m": 1024.0 * 1024, "g": 1024.0 * 1024 * 1024][last] {
            multiplier = m
            s.removeLast()
        }
        s = s.trimmingCharacters(in: .whitespaces)
        guard let v = Double(s), v >= 0, v.isFinite, v * multiplier < Double(UInt64.max) else { return nil }
        // A rate between 0 and 1 byte/s is no rate: 0.4 must not mean "no limit".
        guard v == 0 || v * multiplier >= 1 else { return nil }
        return UInt64((v * multiplier).rounded())
    }
}
