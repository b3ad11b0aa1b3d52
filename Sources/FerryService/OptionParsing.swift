import DBus
import FerryCore

/// Turns the `a{sv}` arguments of the bus API into the core's typed structs.
/// Unknown keys and wrong types are refused with `InvalidArgument`, naming the key.
enum OptionParsing {
    /// The value of `key`, which must be of exactly D-Bus type `type`: no variant
    /// inside the variant, no object path or signature for a string.
    private static func typed<T>(_ key: String, _ value: DBusValue, _ type: String, _ get: (DBusValue) -> T?) throws -> T {
        guard value.signature == type, let v = get(value) else {
            throw FerryError.invalidArgument("option '\(key)' must be of D-Bus type '\(type)', not '\(value.signature)'")
        }
        return v
    }

    private static func unknown(_ key: String, _ known: [String]) -> FerryError {
        .invalidArgument("unknown option '\(key)'; known options: \(known.joined(separator: ", "))")
    }

    static let configurationKeys = ["persistent", "directory", "headers", "max-connections-per-host", "request-timeout",
                                    "resource-timeout", "allow-metered", "notify", "speed-limit", "retries", "proxy",
                                    "application-id", "cookies", "private-signals", "discretionary",
                                    "on-client-exit"]

    static func configuration(_ dict: [String: DBusValue]) throws -> SessionConfigurationUpdate {
        var u = SessionConfigurationUpdate()
        for (key, value) in dict {
            switch key {
            case "persistent": u.persistent = try typed(key, value, "b") { $0.bool }
            case "directory": u.directory = try typed(key, value, "s") { $0.string }
            case "headers": u.headers = try typed(key, value, "a{ss}") { $0.stringDict }
            case "max-connections-per-host": u.maxConnectionsPerHost = try typed(key, value, "u") { $0.uint32 }
            case "request-timeout": u.requestTimeout = try typed(key, value, "d") { $0.double }
            case "resource-timeout": u.resourceTimeout = try typed(key, value, "d") { $0.double }
            case "allow-metered": u.allowMetered = try typed(key, value, "b") { $0.bool }
            case "notify": u.notify = try typed(key, value, "b") { $0.bool }
            case "speed-limit": u.speedLimit = try typed(key, value, "t") { $0.uint64 }
            case "retries": u.retries = try typed(key, value, "u") { $0.uint32 }
            case "proxy": u.proxy = try typed(key, value, "s") { $0.string }
            case "application-id": u.applicationID = try typed(key, value, "s") { $0.string }
            case "cookies": u.cookies = try typed(key, value, "b") { $0.bool }
            case "private-signals": u.privateSignals = try typed(key, value, "b") { $0.bool }
            case "discretionary": u.discretionary = try typed(key, value, "b") { $0.bool }
            case "on-client-exit":
                let name = try typed(key, value, "s") { $0.string }
                guard let policy = ClientExitPolicy(rawValue: name) else {
                    let shown = name.count > 40 ? String(name.prefix(40)) + "…" : name
                    throw FerryError.invalidArgument("on-client-exit is \(shown.debugDescription); it must be continue, pause or cancel")
                }
                u.onClientExit = policy
            default: throw unknown(key, configurationKeys)
            }
        }
        return u
    }

    /// The `Configuration` property. Every client of the bus can read it, so header
    /// values are hidden and the proxy is shown without its credentials.
    static func configurationValue(_ c: SessionConfiguration, defaultDirectory: String) -> DBusValue {
        .vardict([
            "persistent": .boolean(c.persistent),
            "directory": .string(c.directory ?? defaultDirectory),
            "headers": .stringDict(Redaction.hidingValues(c.headers)),
            "max-connections-per-host": .uint32(c.maxConnectionsPerHost),
            "request-timeout": .double(c.requestTimeout),
            "resource-timeout": .double(c.resourceTimeout),
            "allow-metered": .boolean(c.allowMetered),
            "notify": .boolean(c.notify),
            "speed-limit": .uint64(c.speedLimit),
            "retries": .uint32(c.retries),
            "proxy": .string(c.proxy.map(Redaction.urlWithoutCredentials) ?? ""),
            "application-id": .string(c.applicationID),
            "cookies": .boolean(c.cookies),
            "private-signals": .boolean(c.privateSignals),
            "discretionary": .boolean(c.discretionary),
            "on-client-exit": .string(c.onClientExit.rawValue),
        ])
    }

    static let downloadKeys = ["destination", "headers", "description", "sha256", "start-after", "priority",
                               "speed-limit", "connections", "overwrite", "start", "discretionary", "mirrors",
                               "pieces", "metalink", "dedupe"]

    static func download(_ dict: [String: DBusValue]) throws -> DownloadOptions {
        var o = DownloadOptions()
        for (key, value) in dict {
            switch key {
            case "destination": o.destination = try typed(key, value, "s") { $0.string }
            case "headers": o.headers = try typed(key, value, "a{ss}") { $0.stringDict }
            case "description": o.description = try typed(key, value, "s") { $0.string }
            case "sha256": o.sha256 = try typed(key, value, "s") { $0.string }
            case "start-after": o.startAfter = try typed(key, value, "t") { $0.uint64 }
            case "priority": o.priority = try typed(key, value, "i") { $0.int32 }
            case "speed-limit": o.speedLimit = try typed(key, value, "t") { $0.uint64 }
            case "connections": o.connections = try typed(key, value, "u") { $0.uint32 }
            case "overwrite": o.overwrite = try typed(key, value, "b") { $0.bool }
            case "start": o.start = try typed(key, value, "b") { $0.bool }
            case "discretionary": o.discretionary = try typed(key, value, "b") { $0.bool }
            case "metalink": o.metalink = try typed(key, value, "s") { $0.string }
            case "mirrors":
                let items = try typed(key, value, "as") { $0.arrayElements }
                guard items.count <= Limits.mirrors else {
                    throw FerryError.invalidArgument("mirrors lists \(items.count) URLs; at most \(Limits.mirrors) are allowed")
                }
                o.mirrors = items.compactMap(\.string)
            case "pieces":
                let fields = try typed(key, value, "(tas)") { $0.structFields }
                guard fields.count == 2, let length = fields[0].uint64, let items = fields[1].arrayElements else {
                    throw FerryError.invalidArgument("option 'pieces' must be (piece length, [SHA-256 hex]) of D-Bus type '(tas)'")
                }
                guard items.count <= PieceList.maximumCount else {
                    throw FerryError.invalidArgument("pieces lists \(items.count) SHA-256s; at most \(PieceList.maximumCount) are allowed (use a longer piece length)")
                }
                o.pieces = try PieceList(length: length, hex: items.compactMap(\.string))
            case "dedupe": o.dedupe = try typed(key, value, "b") { $0.bool }
            default: throw unknown(key, downloadKeys)
            }
        }
        return o
    }

    static let uploadKeys = ["method", "headers", "description", "content-type", "form-field", "form-values", "start",
                             "response-destination", "source-fd", "discretionary"]

    /// Upload options (`source-fd` is taken out by the caller first).
    static func upload(_ dict: [String: DBusValue]) throws -> UploadOptions {
        var o = UploadOptions()
        for (key, value) in dict {
            switch key {
            case "method": o.method = try typed(key, value, "s") { $0.string }
            case "headers": o.headers = try typed(key, value, "a{ss}") { $0.stringDict }
            case "description": o.description = try typed(key, value, "s") { $0.string }
            case "content-type": o.contentType = try typed(key, value, "s") { $0.string }
            case "form-field": o.formField = try typed(key, value, "s") { $0.string }
            case "form-values": o.formValues = try typed(key, value, "a{ss}") { $0.stringDict }
            case "start": o.start = try typed(key, value, "b") { $0.bool }
            case "response-destination": o.responseDestination = try typed(key, value, "s") { $0.string }
            case "discretionary": o.discretionary = try typed(key, value, "b") { $0.bool }
            default: throw unknown(key, uploadKeys)
            }
        }
        return o
    }

    static let scheduleExtrasKeys = ["discretionary-only"]

    /// The Manager's `Schedule` (`a(sssta{sv})`) as windows; the core checks their
    /// meaning. Extras other than `discretionary-only` b are refused.
    static func schedule(_ value: DBusValue) throws -> [ScheduleWindow] {
        guard let items = value.arrayElements else { throw FerryError.invalidArgument("Schedule must be of D-Bus type 'a(sssta{sv})'") }
        guard items.count <= ScheduleWindows.maxWindows else {
            throw FerryError.invalidArgument("the schedule has \(items.count) windows; at most \(ScheduleWindows.maxWindows) are allowed")
        }
        return try items.enumerated().map { i, item in
            guard let f = item.structFields, f.count == 5, let days = f[0].string, let start = f[1].string,
                  let end = f[2].string, let limit = f[3].uint64 else {
                throw FerryError.invalidArgument("schedule window \(i) must be (days, start, end, speed_limit, extras) of D-Bus type '(sssta{sv})'")
            }
            var window = ScheduleWindow(days: days, start: start, end: end, speedLimit: limit)
            for (key, v) in try vardict(f[4]) {
                switch key {
                case "discretionary-only": window.discretionaryOnly = try typed(key, v, "b") { $0.bool }
                default: throw FerryError.invalidArgument("schedule window \(i): unknown extra '\(key.utf8.count <= 64 ? key : "…")'; known extras: \(scheduleExtrasKeys.joined(separator: ", "))")
                }
            }
            return window
        }
    }

    /// The `Schedule` property's value.
    static func scheduleValue(_ windows: [ScheduleWindow]) -> DBusValue {
        .array(element: "(sssta{sv})", windows.map { w in
            .structure([.string(w.days), .string(w.start), .string(w.end), .uint64(w.speedLimit),
                        .vardict(w.discretionaryOnly ? ["discretionary-only": .boolean(true)] : [:])])
        })
    }

    /// The bus form of the caller's `a{sv}` argument, each value taken out of its one
    /// variant (and no further: a variant in the variant stays, to be refused by type).
    /// The method signature has been checked already, so this cannot fail for
    /// well-formed calls.
    static func vardict(_ value: DBusValue) throws -> [String: DBusValue] {
        guard case .dictionary("s", "v", let entries) = value else {
            throw FerryError.invalidArgument("expected a dictionary of type a{sv}")
        }
        var d: [String: DBusValue] = [:]
        for e in entries {
            guard case .string(let key) = e.key else { throw FerryError.invalidArgument("expected a dictionary of type a{sv}") }
            if case .variant(let inner) = e.value { d[key] = inner } else { d[key] = e.value }
        }
        return d
    }
}
