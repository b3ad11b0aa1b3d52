import DBus
import FerryCore
import FerryInterface

private typealias S = FerryInterface.SessionOption
private typealias D = FerryInterface.DownloadOption
private typealias U = FerryInterface.UploadOption

/// Turns the `a{sv}` arguments of the bus API into the core's typed structs.
/// Unknown keys and wrong types are refused with `InvalidArgument`, naming the key.
enum OptionParsing {
    /// The value of `key`, which must be of exactly D-Bus type `type`: no variant
    /// inside the variant, no object path or signature for a string.
    static func typed<T>(_ option: BusOption, _ value: DBusValue, _ get: (DBusValue) -> T?) throws -> T {
        guard value.signature == option.signature, let v = get(value) else {
            throw CoreError.invalidArgument("option '\(option.name)' must be of D-Bus type '\(option.signature)', not '\(value.signature)'")
        }
        return v
    }

    private static func unknown(_ key: String, _ known: [BusOption]) -> CoreError {
        .invalidArgument("unknown option '\(key)'; known options: \(known.map(\.name).joined(separator: ", "))")
    }

    static func configuration(_ dict: [String: DBusValue]) throws -> SessionConfigurationUpdate {
        var u = SessionConfigurationUpdate()
        for (key, value) in dict {
            switch key {
            case S.persistent.name: u.persistent = try typed(S.persistent, value) { $0.bool }
            case S.directory.name: u.directory = try typed(S.directory, value) { $0.string }
            case S.headers.name: u.headers = try typed(S.headers, value) { $0.stringDict }
            case S.maxConnectionsPerHost.name: u.maxConnectionsPerHost = try typed(S.maxConnectionsPerHost, value) { $0.uint32 }
            case S.requestTimeout.name: u.requestTimeout = try typed(S.requestTimeout, value) { $0.double }
            case S.resourceTimeout.name: u.resourceTimeout = try typed(S.resourceTimeout, value) { $0.double }
            case S.allowMetered.name: u.allowMetered = try typed(S.allowMetered, value) { $0.bool }
            case S.notify.name: u.notify = try typed(S.notify, value) { $0.bool }
            case S.speedLimit.name: u.speedLimit = try typed(S.speedLimit, value) { $0.uint64 }
            case S.retries.name: u.retries = try typed(S.retries, value) { $0.uint32 }
            case S.proxy.name: u.proxy = try typed(S.proxy, value) { $0.string }
            case S.applicationID.name: u.applicationID = try typed(S.applicationID, value) { $0.string }
            case S.cookies.name: u.cookies = try typed(S.cookies, value) { $0.bool }
            case S.privateSignals.name: u.privateSignals = try typed(S.privateSignals, value) { $0.bool }
            case S.discretionary.name: u.discretionary = try typed(S.discretionary, value) { $0.bool }
            case S.onClientExit.name:
                let name = try typed(S.onClientExit, value) { $0.string }
                guard let policy = ClientExitPolicy(rawValue: name) else {
                    let shown = name.count > 40 ? String(name.prefix(40)) + "…" : name
                    throw CoreError.invalidArgument("on-client-exit is \(shown.debugDescription); it must be continue, pause or cancel")
                }
                u.onClientExit = policy
            default: throw unknown(key, S.all)
            }
        }
        return u
    }

    /// The `Configuration` property. Every client of the bus can read it, so header
    /// values are hidden and the proxy is shown without its credentials.
    static func configurationValue(_ c: SessionConfiguration, defaultDirectory: String) -> DBusValue {
        .vardict([
            S.persistent.name: .boolean(c.persistent),
            S.directory.name: .string(c.directory ?? defaultDirectory),
            S.headers.name: .stringDict(Redaction.hidingValues(c.headers)),
            S.maxConnectionsPerHost.name: .uint32(c.maxConnectionsPerHost),
            S.requestTimeout.name: .double(c.requestTimeout),
            S.resourceTimeout.name: .double(c.resourceTimeout),
            S.allowMetered.name: .boolean(c.allowMetered),
            S.notify.name: .boolean(c.notify),
            S.speedLimit.name: .uint64(c.speedLimit),
            S.retries.name: .uint32(c.retries),
            S.proxy.name: .string(c.proxy.map(Redaction.urlWithoutCredentials) ?? ""),
            S.applicationID.name: .string(c.applicationID),
            S.cookies.name: .boolean(c.cookies),
            S.privateSignals.name: .boolean(c.privateSignals),
            S.discretionary.name: .boolean(c.discretionary),
            S.onClientExit.name: .string(c.onClientExit.rawValue),
        ])
    }

    static func download(_ dict: [String: DBusValue]) throws -> DownloadOptions {
        var o = DownloadOptions()
        for (key, value) in dict {
            switch key {
            case D.destination.name: o.destination = try typed(D.destination, value) { $0.string }
            case D.headers.name: o.headers = try typed(D.headers, value) { $0.stringDict }
            case D.description.name: o.description = try typed(D.description, value) { $0.string }
            case D.sha256.name: o.sha256 = try typed(D.sha256, value) { $0.string }
            case D.startAfter.name: o.startAfter = try typed(D.startAfter, value) { $0.uint64 }
            case D.priority.name: o.priority = try typed(D.priority, value) { $0.int32 }
            case D.speedLimit.name: o.speedLimit = try typed(D.speedLimit, value) { $0.uint64 }
            case D.connections.name: o.connections = try typed(D.connections, value) { $0.uint32 }
            case D.overwrite.name: o.overwrite = try typed(D.overwrite, value) { $0.bool }
            case D.start.name: o.start = try typed(D.start, value) { $0.bool }
            case D.discretionary.name: o.discretionary = try typed(D.discretionary, value) { $0.bool }
            case D.metalink.name: o.metalink = try typed(D.metalink, value) { $0.string }
            case D.mirrors.name:
                let items = try typed(D.mirrors, value) { $0.arrayElements }
                guard items.count <= Limits.mirrors else {
                    throw CoreError.invalidArgument("mirrors lists \(items.count) URLs; at most \(Limits.mirrors) are allowed")
                }
                o.mirrors = items.compactMap(\.string)
            case D.pieces.name:
                let fields = try typed(D.pieces, value) { $0.structFields }
                guard fields.count == 2, let length = fields[0].uint64, let items = fields[1].arrayElements else {
                    throw CoreError.invalidArgument("option 'pieces' must be (piece length, [SHA-256 hex]) of D-Bus type '(tas)'")
                }
                guard items.count <= PieceList.maximumCount else {
                    throw CoreError.invalidArgument("pieces lists \(items.count) SHA-256s; at most \(PieceList.maximumCount) are allowed (use a longer piece length)")
                }
                o.pieces = try PieceList(length: length, hex: items.compactMap(\.string))
            case D.dedupe.name: o.dedupe = try typed(D.dedupe, value) { $0.bool }
            default: throw unknown(key, D.all)
            }
        }
        return o
    }

    /// Upload options (`source-fd` is taken out by the caller first).
    static func upload(_ dict: [String: DBusValue]) throws -> UploadOptions {
        var o = UploadOptions()
        for (key, value) in dict {
            switch key {
            case U.method.name: o.method = try typed(U.method, value) { $0.string }
            case U.headers.name: o.headers = try typed(U.headers, value) { $0.stringDict }
            case U.description.name: o.description = try typed(U.description, value) { $0.string }
            case U.contentType.name: o.contentType = try typed(U.contentType, value) { $0.string }
            case U.formField.name: o.formField = try typed(U.formField, value) { $0.string }
            case U.formValues.name: o.formValues = try typed(U.formValues, value) { $0.stringDict }
            case U.start.name: o.start = try typed(U.start, value) { $0.bool }
            case U.responseDestination.name: o.responseDestination = try typed(U.responseDestination, value) { $0.string }
            case U.discretionary.name: o.discretionary = try typed(U.discretionary, value) { $0.bool }
            default: throw unknown(key, U.all)
            }
        }
        return o
    }

    /// The Manager's `Schedule` (`a(sssta{sv})`) as windows; the core checks their
    /// meaning. Extras other than `discretionary-only` b are refused.
    static func schedule(_ value: DBusValue) throws -> [ScheduleWindow] {
        guard let items = value.arrayElements else { throw CoreError.invalidArgument("Schedule must be of D-Bus type 'a(sssta{sv})'") }
        guard items.count <= ScheduleWindows.maxWindows else {
            throw CoreError.invalidArgument("the schedule has \(items.count) windows; at most \(ScheduleWindows.maxWindows) are allowed")
        }
        return try items.enumerated().map { i, item in
            guard let f = item.structFields, f.count == 5, let days = f[0].string, let start = f[1].string,
                  let end = f[2].string, let limit = f[3].uint64 else {
                throw CoreError.invalidArgument("schedule window \(i) must be (days, start, end, speed_limit, extras) of D-Bus type '(sssta{sv})'")
            }
            var window = ScheduleWindow(days: days, start: start, end: end, speedLimit: limit)
            for (key, v) in try vardict(f[4]) {
                switch key {
                case FerryInterface.ScheduleExtra.discretionaryOnly.name:
                    window.discretionaryOnly = try typed(FerryInterface.ScheduleExtra.discretionaryOnly, v) { $0.bool }
                default: throw CoreError.invalidArgument("schedule window \(i): unknown extra '\(key.utf8.count <= 64 ? key : "…")'; known extras: \(FerryInterface.ScheduleExtra.all.map(\.name).joined(separator: ", "))")
                }
            }
            return window
        }
    }

    /// The `Schedule` property's value.
    static func scheduleValue(_ windows: [ScheduleWindow]) -> DBusValue {
        .array(element: "(sssta{sv})", windows.map { w in
            .structure([.string(w.days), .string(w.start), .string(w.end), .uint64(w.speedLimit),
                        .vardict(w.discretionaryOnly ? [FerryInterface.ScheduleExtra.discretionaryOnly.name: .boolean(true)] : [:])])
        })
    }

    /// The bus form of the caller's `a{sv}` argument, each value taken out of its one
    /// variant (and no further: a variant in the variant stays, to be refused by type).
    /// The method signature has been checked already, so this cannot fail for
    /// well-formed calls.
    static func vardict(_ value: DBusValue) throws -> [String: DBusValue] {
        guard case .dictionary("s", "v", let entries) = value else {
            throw CoreError.invalidArgument("expected a dictionary of type a{sv}")
        }
        var d: [String: DBusValue] = [:]
        for e in entries {
            guard case .string(let key) = e.key else { throw CoreError.invalidArgument("expected a dictionary of type a{sv}") }
            if case .variant(let inner) = e.value { d[key] = inner } else { d[key] = e.value }
        }
        return d
    }
}
