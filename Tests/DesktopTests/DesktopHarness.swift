import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

// The desktop tests' world: a private dbus-daemon, a loopback HTTP server, a
// temporary HOME with its XDG directories, the real ferryd, and python-dbusmock
// standing in for the notification server and the file manager.

struct DesktopTestError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// The built binaries: `FERRYD_PATH` / `FERRY_CLI_PATH`, else beside the test bundle,
/// else in the package's build directories.
enum Built {
    static func locate(_ name: String, variable: String) -> String? {
        BuiltProducts.locate(name, variable: variable, besideBundleOf: DesktopTestCase.self, buildDirectories: [".build-desk", ".build"])
    }

    static var ferryd: String? { locate("ferryd", variable: "FERRYD_PATH") }
    static var ferry: String? { locate("ferry", variable: "FERRY_CLI_PATH") }

    /// The Debian python3 that has python3-dbusmock (a pyenv shim on PATH may not).
    static var python: String? {
        for p in ["/usr/bin/python3", "python3"] {
            if let r = try? ChildProcess.run(p, ["-c", "import dbusmock"], timeout: 20), r.status == 0 { return p }
        }
        return nil
    }
}

/// Polls `condition` until it holds or `timeout` passes; false on timeout.
func eventually(_ timeout: TimeInterval = 10, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try await condition() { return true }
        if Date() > deadline { return false }
        try? await Task.sleep(nanoseconds: 20_000_000)
    }
}

/// A python-dbusmock process on the private bus (`org.freedesktop.DBus.Mock` API).
final class MockService: @unchecked Sendable {
    let process: ChildProcess
    let name: String
    let path: String
    let bus: BusConnection

    private init(process: ChildProcess, name: String, path: String, bus: BusConnection) {
        self.process = process; self.name = name; self.path = path; self.bus = bus
    }

    /// Starts `python3 -m dbusmock ARGS` and waits (bounded) until it owns `name`.
    static func start(_ arguments: [String], name: String, path: String, environment: [String: String],
                      bus: BusConnection) async throws -> MockService {
        guard let python = Built.python else { throw XCTSkip("python3-dbusmock is not installed") }
        let p = try withUnblockedSignals { try ChildProcess(executable: python, arguments: ["-m", "dbusmock"] + arguments, environment: environment) }
        let mock = MockService(process: p, name: name, path: path, bus: bus)
        try await waitForBusName(name, on: bus, process: p, timeout: 15, interval: 0.02)
        return mock
    }

    /// The notification server: `org.freedesktop.Notifications` with buttons.
    static func notificationServer(environment: [String: String], bus: BusConnection,
                                   capabilities: String = "body body-markup actions") async throws -> MockService {
        try await start(["--template", "notification_daemon", "-p", "{\"capabilities\": \"\(capabilities)\"}"],
                        name: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
                        environment: environment, bus: bus)
    }

    /// A file manager with `ShowItems(as uris, s startup_id)`.
    static func fileManager(environment: [String: String], bus: BusConnection) async throws -> MockService {
        let name = "org.freedesktop.FileManager1"
        let mock = try await start([name, "/org/freedesktop/FileManager1", name], name: name,
                                   path: "/org/freedesktop/FileManager1", environment: environment, bus: bus)
        try await mock.mock("AddMethod", [.string(name), .string("ShowItems"), .string("ass"), .string(""), .string("")])
        return mock
    }

    /// Another object of the same mock (one added with `AddObject`), for its calls
    /// and signals. Stopping it stops the mock.
    func object(at path: String) -> MockService {
        MockService(process: process, name: name, path: path, bus: bus)
    }

    @discardableResult
    func mock(_ method: String, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await bus.call(destination: name, path: path, interface: "org.freedesktop.DBus.Mock", method: method,
                           arguments: args, timeout: 10)
    }

    /// The arguments of every call of `method`, oldest first.
    func calls(_ method: String) async throws -> [[DBusValue]] {
        let r = try await mock("GetMethodCalls", [.string(method)])
        return (r.first?.arrayElements ?? []).compactMap { $0.structFields?[1].arrayElements?.map(\.unwrapped) }
    }

    /// Makes the mock send a signal from its main object.
    func emit(_ interface: String, _ member: String, signature: String, _ args: [DBusValue]) async throws {
        try await mock("EmitSignal", [.string(interface), .string(member), .string(signature),
                                      .array(element: "v", args.map { .variant($0) })])
    }

    func stop() {
        process.stop(grace: 5)
    }
}

/// One `Notify` call, decoded.
struct NotifyCall {
    var appName: String
    var replacesID: UInt32
    var icon: String
    var summary: String
    var body: String
    /// key, label pairs.
    var actions: [(key: String, label: String)]
    var hints: [String: DBusValue]

    init?(_ args: [DBusValue]) {
        guard args.count >= 7 else { return nil }
        appName = args[0].string ?? ""
        replacesID = args[1].uint32 ?? 0
        icon = args[2].string ?? ""
        summary = args[3].string ?? ""
        body = args[4].string ?? ""
        let flat = (args[5].arrayElements ?? []).compactMap(\.string)
        actions = stride(from: 0, to: flat.count - 1, by: 2).map { (flat[$0], flat[$0 + 1]) }
        hints = args[6].vardict ?? [:]
    }

    var actionKeys: Set<String> { Set(actions.map(\.key)) }
}

/// The base of the desktop tests: an HTTP server, a temporary HOME (`FerrydTestCase`);
/// the private bus once a test starts it (`startBus`). ferryd is started by each test
/// (`startFerryd`) or by bus activation.
class DesktopTestCase: FerrydTestCase {
    var bus: PrivateBus!
    var downloads: String!
    var mocks: [MockService] = []

    override func setUp() async throws {
        try await super.setUp()
        try setUpFerrydWorld(ferryd: Built.ferryd, missing: "the built ferryd was not found: set FERRYD_PATH, or build it (swift build)") {
            try TemporaryHome(prefix: "ferry-desk", downloadDirectory: "Dl")
        }
        downloads = home + "/Dl"
    }

    /// Starts the private bus (optionally with a directory of activatable services)
    /// and connects the test's client.
    func startBus(serviceDirectory: String? = nil) async throws {
        bus = try withUnblockedSignals { try PrivateBus(serviceDirectory: serviceDirectory) }
        client = try BusClient(address: bus.address)
        signals = try await SignalRecorder.start(client.bus)
    }

    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        // No XDG_DOWNLOAD_DIR: ferryd finds $HOME/Dl through user-dirs.dirs.
        temporaryHome.environment(base: bus.environment(), unsetting: ["XDG_DOWNLOAD_DIR"], setting: extra)
    }

    /// Starts ferryd by hand and waits (bounded) until it owns its name.
    func startFerryd(_ arguments: [String] = ["--no-idle-exit"]) async throws {
        let p = try Ferryd.launch(ferrydPath, arguments: arguments, environment: environment())
        ferryd = p
        do {
            try await Ferryd.waitForName(p, on: client.bus, timeout: 15)
        } catch let e as TimedOut {
            XCTFail("ferryd did not take its name: \(e)")
            throw e
        }
    }

    func startNotificationServer() async throws -> MockService {
        let m = try await MockService.notificationServer(environment: environment(), bus: client.bus)
        mocks.append(m)
        extraLogs.append { m.process.log }
        return m
    }

    override func tearDown() async throws {
        if hasFailed { print(failureReport(signalCount: 60)) }
        client?.close()
        ferryd?.stop()
        for m in mocks { m.stop() }
        server?.stop()
        bus?.stop()
        if !hasFailed { temporaryHome?.remove() }
        try await super.tearDown()
    }

    // MARK: Helpers

    func serve(_ path: String, size: Int, seed: UInt64 = 1) {
        server.add(path: path, body: TestData.bytes(count: size, seed: seed))
    }

    /// Queues downloads paused and starts them together (`Session.ResumeAll`, which
    /// also retries the session's failed transfers), so they make one batch.
    @discardableResult
    func batch(_ session: BusSession, _ urls: [String]) async throws -> [FerryTransfer] {
        var transfers: [FerryTransfer] = []
        for u in urls { transfers.append(try await session.download(u, options: ["start": .boolean(false)])) }
        let before = signals.count("AllFinished", path: BusClient.managerPath)
        try await session.resumeAll()
        let ended = await eventually(20) { self.signals.count("AllFinished", path: BusClient.managerPath) > before }
        guard ended else { throw DesktopTestError("no AllFinished within 20 s") }
        return transfers
    }

    /// The mock's Notify calls, waiting (bounded) until there are at least `count`.
    func notifyCalls(_ mock: MockService, atLeast count: Int, timeout: TimeInterval = 10) async throws -> [NotifyCall] {
        var calls: [NotifyCall] = []
        _ = try await eventually(timeout) {
            calls = try await mock.calls("Notify").compactMap(NotifyCall.init)
            return calls.count >= count
        }
        return calls
    }
}

/// The desktop tests that need no bus activation: the private bus and the client are
/// up before each test starts (ferryd is not).
class DesktopBusTestCase: DesktopTestCase {
    override func setUp() async throws {
        try await super.setUp()
        try await startBus()
    }
}
