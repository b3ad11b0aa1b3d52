import DBus
import Dispatch
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

// The system-bus harness: per test a private session bus (ferryd's) and a private
// "system" bus, python-dbusmock's NetworkManager and/or logind templates on the
// latter, a loopback HTTP server, a temporary HOME, and the real ferryd started with
// DBUS_SYSTEM_BUS_ADDRESS pointing at the private system bus.

/// Where the built `ferryd` is: `FERRYD_PATH`, else beside the test bundle (the
/// build's bin directory), else in the package's build directories.
enum FerrydBinary {
    static var path: String? {
        BuiltProducts.locate("ferryd", variable: "FERRYD_PATH", besideBundleOf: SystemTestCase.self,
                             buildDirectories: [".build-sys", ".build"])
    }
}

/// The python3 that has the dbusmock module (Debian's; a pyenv shim on PATH may not).
enum DBusMock {
    static var python: String? {
        for candidate in ["/usr/bin/python3", findExecutable("python3")].compactMap({ $0 }) {
            if let r = try? ChildProcess.run(candidate, ["-c", "import dbusmock"], timeout: 30), r.status == 0 { return candidate }
        }
        return nil
    }
}

/// The base of the system tests: besides what `FerrydTestCase` sets up, a private
/// session bus (ferryd's) and a private system bus for the mocks.
class SystemTestCase: FerrydTestCase {
    static let nmInterface = "org.freedesktop.NetworkManager"
    static let nmPath = "/org/freedesktop/NetworkManager"
    static let mockInterface = "org.freedesktop.DBus.Mock"

    var sessionBus: PrivateBus!
    var systemBus: PrivateBus!
    /// A connection to the system bus, to drive the mocks.
    var system: BusConnection!
    var networkManager: ChildProcess?
    var logind: ChildProcess?
    var upower: ChildProcess?
    var powerProfiles: ChildProcess?
    var work: String!
    var python: String!

    override func setUp() async throws {
        try await super.setUp()
        guard let p = DBusMock.python else {
            throw XCTSkip("python3 with the dbusmock module (Debian: python3-dbusmock) is not installed")
        }
        python = p
        try setUpFerrydWorld(ferryd: FerrydBinary.path,
                             missing: "the built ferryd was not found: set FERRYD_PATH, or build it beside the test bundle (swift build)") {
            try TemporaryHome(prefix: "ferry-sys", subdirectories: ["work"])
        }
        work = home + "/work"
        sessionBus = try withUnblockedSignals { try PrivateBus() }
        systemBus = try withUnblockedSignals { try PrivateBus() }
        system = try BusConnection(address: systemBus.address, queue: DispatchQueue(label: "test.system"))
    }

    override func tearDown() async throws {
        let failed = hasFailed
        if failed { print(failureReport(signalCount: 60)) }
        client?.close()
        for p in [ferryd, networkManager, logind, upower, powerProfiles].compactMap({ $0 }) { p.stop() }
        system?.close()
        server?.stop()
        sessionBus?.stop()
        systemBus?.stop()
        if !failed { temporaryHome?.remove() }
        try await super.tearDown()
    }

    // MARK: The mocks

    /// Starts a dbusmock template on the private system bus and waits until it owns `name`.
    func startMock(_ template: String, owning name: String, parameters: String? = nil) async throws -> ChildProcess {
        try await startDBusMock(["--system", "--template", template] + (parameters.map { ["--parameters", $0] } ?? []),
                                owning: name, onSessionBus: false, waitingOn: system, label: "\(template) mock (\(name))")
    }

    /// Starts python-dbusmock with `arguments` on the private system bus, or on the
    /// private session bus (ferryd's), and waits (on `bus`, a connection to that bus)
    /// until it owns `name`; its log goes with a failure's report under `label`.
    func startDBusMock(_ arguments: [String], owning name: String, onSessionBus: Bool, waitingOn bus: BusConnection,
                       label: String) async throws -> ChildProcess {
        var env = ProcessInfo.processInfo.environment
        if onSessionBus {
            env["DBUS_SESSION_BUS_ADDRESS"] = sessionBus.address
            env.removeValue(forKey: "DBUS_SYSTEM_BUS_ADDRESS")
        } else {
            env["DBUS_SYSTEM_BUS_ADDRESS"] = systemBus.address
            env.removeValue(forKey: "DBUS_SESSION_BUS_ADDRESS")
        }
        let python = self.python!
        let p = try withUnblockedSignals {
            try ChildProcess(executable: python, arguments: ["-m", "dbusmock"] + arguments, environment: env)
        }
        extraLogs.append { "===== \(label) =====\n" + p.log }
        try await waitForBusName(name, on: bus, process: p, timeout: 20)
        return p
    }

    /// NetworkManager's mock, with `Metered` and `PrimaryConnection` properties (the
    /// template has neither).
    func startNetworkManager(metered: UInt32 = 2) async throws {
        networkManager = try await startMock("networkmanager", owning: "org.freedesktop.NetworkManager")
        try await system.call(destination: "org.freedesktop.NetworkManager", path: Self.nmPath, interface: Self.mockInterface,
                              method: "AddProperty", arguments: [.string(Self.nmInterface), .string("Metered"), .variant(.uint32(metered))])
        try await system.call(destination: "org.freedesktop.NetworkManager", path: Self.nmPath, interface: Self.mockInterface,
                              method: "AddProperty", arguments: [.string(Self.nmInterface), .string("PrimaryConnection"),
                                                                 .variant(.objectPath(Self.activeConnection(1)))])
    }

    /// The object path of one of NetworkManager's active connections.
    static func activeConnection(_ n: Int) -> String { "/org/freedesktop/NetworkManager/ActiveConnection/\(n)" }

    /// UPower's mock (`OnBattery` as given).
    func startUPower(onBattery: Bool) async throws {
        upower = try await startMock("upower", owning: "org.freedesktop.UPower",
                                     parameters: "{\"OnBattery\": \(onBattery ? "true" : "false")}")
    }

    /// Sets UPower's `OnBattery`; the mock sends PropertiesChanged, as UPower does.
    func setOnBattery(_ value: Bool) async throws {
        try await system.call(destination: "org.freedesktop.UPower", path: "/org/freedesktop/UPower", interface: StandardNames.properties,
                              method: "Set", arguments: [.string("org.freedesktop.UPower"), .string("OnBattery"), .variant(.boolean(value))])
    }

    /// power-profiles-daemon's mock (`net.hadess.PowerProfiles`), with this active profile.
    func startPowerProfiles(_ profile: String) async throws {
        powerProfiles = try await startMock("power_profiles_daemon", owning: "net.hadess.PowerProfiles",
                                            parameters: "{\"ActiveProfile\": \"\(profile)\"}")
    }

    func setActiveProfile(_ profile: String) async throws {
        try await system.call(destination: "net.hadess.PowerProfiles", path: "/net/hadess/PowerProfiles", interface: StandardNames.properties,
                              method: "Set", arguments: [.string("net.hadess.PowerProfiles"), .string("ActiveProfile"), .variant(.string(profile))])
    }

    func startLogind() async throws {
        logind = try await startMock("logind", owning: "org.freedesktop.login1")
    }

    /// Sets a property of NetworkManager's manager object; the mock sends
    /// PropertiesChanged, as NetworkManager does.
    func setNetworkManagerProperty(_ name: String, _ value: DBusValue) async throws {
        try await system.call(destination: "org.freedesktop.NetworkManager", path: Self.nmPath, interface: StandardNames.properties,
                              method: "Set", arguments: [.string(Self.nmInterface), .string(name), .variant(value)])
    }

    func setMetered(_ value: UInt32) async throws { try await setNetworkManagerProperty("Metered", .uint32(value)) }

    /// The template's own way to change the connectivity.
    func setConnectivity(_ value: UInt32) async throws {
        try await system.call(destination: "org.freedesktop.NetworkManager", path: "/org/freedesktop", interface: Self.mockInterface,
                              method: "SetConnectivity", arguments: [.uint32(value)])
    }

    /// logind's inhibitors: (what, who, why, mode).
    func inhibitors() async throws -> [(what: String, who: String, why: String, mode: String)] {
        let r = try await system.call(destination: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                                      interface: "org.freedesktop.login1.Manager", method: "ListInhibitors")
        return (r.first?.arrayElements ?? []).compactMap { item in
            guard let f = item.structFields, f.count >= 4 else { return nil }
            return (f[0].string ?? "", f[1].string ?? "", f[2].string ?? "", f[3].string ?? "")
        }
    }

    /// Ferry's sleep inhibitors as logind lists them.
    func ferryInhibitors() async throws -> [(what: String, who: String, why: String, mode: String)] {
        try await inhibitors().filter { $0.who == "Ferry" }
    }

    /// Waits (bounded; ListInhibitors has no change signal, so this asks again every
    /// 20 ms) until logind lists `count` inhibitors of Ferry's.
    func waitForFerryInhibitors(_ count: Int, timeout: TimeInterval = 10) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let now = try await ferryInhibitors()
            if now.count == count { return }
            if Date() > deadline { throw TimedOut(description: "logind lists \(now) after \(timeout) s, wanted \(count) of Ferry's") }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }

    // MARK: ferryd

    /// Starts ferryd on the private session bus, with the private system bus as its
    /// system bus (`systemBusAddress` overrides it), and waits until it owns its name.
    /// `wrapper`: a command ferryd runs under (its arguments, then ferryd's).
    func startFerryd(systemBusAddress: String? = nil, extraEnvironment: [String: String] = [:], wrapper: [String] = []) async throws {
        let env = temporaryHome.environment(base: sessionBus.environment(), setting: [
            "XDG_DOWNLOAD_DIR": work,
            "FERRY_RETRY_BASE_MS": "50",
            "DBUS_SYSTEM_BUS_ADDRESS": systemBusAddress ?? systemBus.address,
        ].merging(extraEnvironment) { _, extra in extra })
        let p = try Ferryd.launch(ferrydPath, environment: env, wrapper: wrapper)
        ferryd = p
        client = try BusClient(address: sessionBus.address)
        try await Ferryd.waitForName(p, on: client.bus, timeout: 15)
        signals = try await SignalRecorder.start(client.bus)
        // ferryd waits at most 1 s for NetworkManager's first answer before it takes its
        // name; on a loaded machine the mock can answer later, and what a test does first
        // would meet a network ferryd only assumed. Go on once it knows.
        if networkManager != nil && systemBusAddress == nil {
            try await waitForLog("following NetworkManager on the system bus", timeout: 15)
        }
        // The same for UPower and power-profiles-daemon.
        if (upower != nil || powerProfiles != nil) && systemBusAddress == nil {
            try await waitForLog("power state known", timeout: 15)
        }
    }

    /// How often ferryd's log has a line containing `text`.
    func logCount(_ text: String) -> Int {
        (ferryd?.stderr ?? "").components(separatedBy: "\n").filter { $0.contains(text) }.count
    }

    /// Waits (bounded, reading the log file every 20 ms) until ferryd's log has at least
    /// `count` lines containing `text`; returns how many it has then.
    @discardableResult
    func waitForLog(_ text: String, count: Int = 1, timeout: TimeInterval = 10) async throws -> Int {
        let deadline = Date().addingTimeInterval(timeout)
        while logCount(text) < count {
            if Date() > deadline { throw TimedOut(description: "fewer than \(count) '\(text)' in ferryd's log after \(timeout) s") }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return logCount(text)
    }

    // MARK: Transfers

    /// Serves a deterministic body at `path` and returns it.
    @discardableResult
    func serve(_ path: String, size: Int, seed: UInt64 = 1, bytesPerSecond: Int? = nil) -> [UInt8] {
        let body = TestData.bytes(count: size, seed: seed)
        server.add(path: path, body: body)
        if let bytesPerSecond { server.set(.slow(bytesPerSecond: bytesPerSecond), on: path) }
        return body
    }

    func download(_ session: BusSession, _ path: String, options: [String: DBusValue] = [:]) async throws -> FerryTransfer {
        try await session.download(server.url(path), options: options.merging(["destination": .string(work + path)]) { a, _ in a })
    }

    /// Waits until the transfer is in `state` (and, for `waiting`, has `reason`):
    /// now, or by a PropertiesChanged after `mark`.
    func waitFor(_ t: FerryTransfer, _ state: String, reason: String? = nil, since mark: Int = 0,
                 timeout: TimeInterval = 20) async throws {
        let info = try await t.info()
        if info.state == state && (reason == nil || info.waitingReason == reason) { return }
        try await signals.wait("\(t.path) \(state)\(reason.map { " (\($0))" } ?? "")", timeout: timeout) { all in
            // Folds the changes after `mark` into the state and reason they leave.
            var s = "", r = ""
            for sig in all.dropFirst(mark) where sig.path == t.path && sig.member == "PropertiesChanged" {
                if let v = sig.changed["State"]?.string { s = v }
                if let v = sig.changed["WaitingReason"]?.string { r = v }
                if s == state && (reason == nil || r == reason) { return true }
            }
            return false
        }
    }

    /// Waits for the transfer's Completed signal; returns its final properties.
    @discardableResult
    func finish(_ t: FerryTransfer, timeout: TimeInterval = 30) async throws -> TransferInfo {
        try await signals.wait("Completed on \(t.path)", timeout: timeout) { all in
            all.contains { $0.path == t.path && $0.member == "Completed" }
        }
        return try await t.info()
    }

    /// Whether a PropertiesChanged ever gave the transfer this WaitingReason.
    func sawReason(_ t: FerryTransfer, _ reason: String) -> Bool {
        signals.all.contains { $0.path == t.path && $0.member == "PropertiesChanged" && $0.changed["WaitingReason"]?.string == reason }
    }

    /// Waits (bounded, asking every 10 ms: BytesTransferred has no change signal)
    /// until the transfer has at least `bytes`.
    func waitForBytes(_ t: FerryTransfer, atLeast bytes: Int64, timeout: TimeInterval = 20) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let info = try await t.info()
            if info.bytesTransferred >= bytes { return }
            if info.isFinal { throw TimedOut(description: "\(t.path) ended (\(info.state)) with \(info.bytesTransferred) bytes") }
            if Date() > deadline { throw TimedOut(description: "\(t.path) has \(info.bytesTransferred) bytes after \(timeout) s") }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    func assertFile(_ path: String, equals body: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        guard let data = FileManager.default.contents(atPath: path) else { return XCTFail("no file at \(path)", file: file, line: line) }
        XCTAssertEqual(data.count, body.count, "size of \(path)", file: file, line: line)
        XCTAssertEqual(TestData.sha256Hex(data), TestData.sha256Hex(body), "SHA-256 of \(path)", file: file, line: line)
    }
}
