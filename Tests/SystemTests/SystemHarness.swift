import DBus
import Dispatch
import FerryClient
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

struct TimedOut: Error, CustomStringConvertible {
    var description: String
}

/// Where the built `ferryd` is: `FERRYD_PATH`, else beside the test bundle (the
/// build's bin directory), else in the package's build directories.
enum FerrydBinary {
    static var path: String? {
        let fm = FileManager.default
        if let p = ProcessInfo.processInfo.environment["FERRYD_PATH"], !p.isEmpty {
            return fm.isExecutableFile(atPath: p) ? p : nil
        }
        var dirs: [URL] = []
        for bundle in [Bundle(for: SystemTestCase.self), Bundle.main] {
            dirs.append(bundle.bundleURL)
            dirs.append(bundle.bundleURL.deletingLastPathComponent())
            if let exe = bundle.executableURL { dirs.append(exe.deletingLastPathComponent()) }
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        for build in [".build-sys", ".build"] {
            dirs.append(root.appendingPathComponent(build).appendingPathComponent("debug"))
        }
        return dirs.map { $0.appendingPathComponent("ferryd").path }.first { fm.isExecutableFile(atPath: $0) }
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

/// Runs `body` on a new thread whose signal mask is empty, and waits for it: the
/// test runner's threads block SIGTERM, and children inherit the mask, so a child
/// spawned from them would ignore `terminate()`.
func withUnblockedSignals<T>(_ body: @escaping () throws -> T) throws -> T {
    let box = SpawnResult<T>()
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        var none = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, nil)
        box.result = Result { try body() }
        done.signal()
    }
    thread.start()
    done.wait()
    return try box.result!.get()
}

/// `@unchecked Sendable`: written by one thread before it signals the semaphore the
/// reader waits on.
private final class SpawnResult<T>: @unchecked Sendable {
    var result: Result<T, Error>?
}

/// One signal ferryd sent.
struct RecordedSignal: Sendable, CustomStringConvertible {
    var path: String
    var interface: String
    var member: String
    var args: [DBusValue]

    /// For PropertiesChanged: the changed properties.
    var changed: [String: DBusValue] { args.count >= 2 ? (args[1].vardict ?? [:]) : [:] }

    var description: String { "\(path) \(interface).\(member)(\(args.map(\.description).joined(separator: ", ")))" }
}

/// Records ferryd's signals and lets a test wait, bounded, for a condition on them.
final class SignalLog: @unchecked Sendable {
    // `@unchecked Sendable`: `items` and `waiters` are only touched under `lock`.
    private let lock = NSLock()
    private var items: [RecordedSignal] = []
    private var waiters: [Int: (condition: ([RecordedSignal]) -> Bool, continuation: CheckedContinuation<Void, Error>)] = [:]
    private var nextID = 0

    static func start(_ bus: BusConnection) async throws -> SignalLog {
        let log = SignalLog()
        _ = try await bus.subscribe(MatchRule(sender: FerryClient.busName, pathNamespace: FerryClient.managerPath)) { m in
            guard let path = m.path, let interface = m.interface, let member = m.member else { return }
            log.add(RecordedSignal(path: path, interface: interface, member: member, args: (try? m.arguments()) ?? []))
        }
        return log
    }

    private func add(_ s: RecordedSignal) {
        lock.lock()
        items.append(s)
        var ready: [CheckedContinuation<Void, Error>] = []
        for (id, w) in waiters where w.condition(items) {
            ready.append(w.continuation)
            waiters[id] = nil
        }
        lock.unlock()
        for c in ready { c.resume() }
    }

    var all: [RecordedSignal] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }

    /// A position in the log, for conditions on what came after it.
    var mark: Int { all.count }

    func wait(_ what: String, timeout: TimeInterval = 20, until condition: @escaping ([RecordedSignal]) -> Bool) async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
            lock.lock()
            if condition(items) {
                lock.unlock()
                c.resume()
                return
            }
            let id = nextID
            nextID += 1
            waiters[id] = (condition, c)
            lock.unlock()
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                lock.lock()
                let w = waiters.removeValue(forKey: id)
                let seen = items.suffix(30).map(\.description).joined(separator: "\n  ")
                lock.unlock()
                w?.continuation.resume(throwing: TimedOut(description: "no \(what) within \(timeout) s; last signals:\n  \(seen)"))
            }
        }
    }
}

/// The base of the system tests.
class SystemTestCase: XCTestCase {
    static let nmInterface = "org.freedesktop.NetworkManager"
    static let nmPath = "/org/freedesktop/NetworkManager"
    static let mockInterface = "org.freedesktop.DBus.Mock"

    var sessionBus: PrivateBus!
    var systemBus: PrivateBus!
    /// A connection to the system bus, to drive the mocks.
    var system: BusConnection!
    var networkManager: ChildProcess?
    var logind: ChildProcess?
    var server: TestHTTPServer!
    var home: String!
    var work: String!
    var ferryd: ChildProcess?
    var client: FerryClient!
    var signals: SignalLog!
    var python: String!
    var ferrydPath: String!

    override func setUp() async throws {
        try await super.setUp()
        guard let d = FerrydBinary.path else {
            XCTFail("the built ferryd was not found: set FERRYD_PATH, or build it beside the test bundle (swift build)")
            throw TimedOut(description: "ferryd missing")
        }
        ferrydPath = d
        guard let p = DBusMock.python else {
            throw XCTSkip("python3 with the dbusmock module (Debian: python3-dbusmock) is not installed")
        }
        python = p
        var template = Array("/tmp/ferry-sys.XXXXXX".utf8CString)
        guard let dir = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw TimedOut(description: "mkdtemp failed")
        }
        home = String(cString: dir)
        work = home + "/work"
        for sub in [home + "/.config", home + "/.local/state", work!] {
            try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        }
        sessionBus = try withUnblockedSignals { try PrivateBus() }
        systemBus = try withUnblockedSignals { try PrivateBus() }
        system = try BusConnection(address: systemBus.address, queue: DispatchQueue(label: "test.system"))
        server = TestHTTPServer()
        try server.start()
    }

    override func tearDown() async throws {
        let failed = (testRun?.totalFailureCount ?? 0) > 0
        if failed {
            print("\n===== ferryd log for \(name) =====\n" + (ferryd?.log ?? "(not started)"))
            if let nm = networkManager { print("===== NetworkManager mock =====\n" + nm.log) }
            if let l = logind { print("===== logind mock =====\n" + l.log) }
            print("===== ferryd's signals =====\n" + (signals?.all.suffix(60).map(\.description).joined(separator: "\n") ?? ""))
        }
        client?.close()
        for p in [ferryd, networkManager, logind].compactMap({ $0 }) where p.isRunning {
            p.terminate()
            if p.waitForExit(timeout: 10) == nil {
                p.kill(SIGKILL)
                _ = p.waitForExit(timeout: 5)
            }
        }
        system?.close()
        server?.stop()
        sessionBus?.stop()
        systemBus?.stop()
        if !failed, let home { try? FileManager.default.removeItem(atPath: home) }
        try await super.tearDown()
    }

    // MARK: The mocks

    /// Starts a dbusmock template on the private system bus and waits until it owns `name`.
    func startMock(_ template: String, owning name: String) async throws -> ChildProcess {
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = systemBus.address
        env.removeValue(forKey: "DBUS_SESSION_BUS_ADDRESS")
        let python = self.python!
        let p = try withUnblockedSignals {
            try ChildProcess(executable: python, arguments: ["-m", "dbusmock", "--system", "--template", template], environment: env)
        }
        try await waitForName(name, owned: true, process: p)
        return p
    }

    func waitForName(_ name: String, owned: Bool, process: ChildProcess? = nil, timeout: TimeInterval = 20) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try await system.nameHasOwner(name) != owned {
            if let process, !process.isRunning {
                throw TimedOut(description: "\(name)'s mock exited\n\(process.log)")
            }
            if Date() > deadline {
                throw TimedOut(description: "\(name) \(owned ? "has no owner" : "still has an owner") after \(timeout) s\n\(process?.log ?? "")")
            }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    /// NetworkManager's mock, with a `Metered` property (the template has none).
    func startNetworkManager(metered: UInt32 = 2) async throws {
        networkManager = try await startMock("networkmanager", owning: "org.freedesktop.NetworkManager")
        try await system.call(destination: "org.freedesktop.NetworkManager", path: Self.nmPath, interface: Self.mockInterface,
                              method: "AddProperty", arguments: [.string(Self.nmInterface), .string("Metered"), .variant(.uint32(metered))])
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
    func startFerryd(systemBusAddress: String? = nil) async throws {
        var env = sessionBus.environment(extra: [
            "HOME": home,
            "XDG_CONFIG_HOME": home + "/.config",
            "XDG_STATE_HOME": home + "/.local/state",
            "XDG_DATA_HOME": home + "/.local/share",
            "XDG_CACHE_HOME": home + "/.cache",
            "XDG_DOWNLOAD_DIR": work,
            "NO_PROXY": "*", "no_proxy": "*",
            "FERRY_RETRY_BASE_MS": "50",
            "DBUS_SYSTEM_BUS_ADDRESS": systemBusAddress ?? systemBus.address,
        ])
        for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"] { env.removeValue(forKey: k) }
        let path = ferrydPath!
        let p = try withUnblockedSignals { try ChildProcess(executable: path, arguments: ["--verbose"], environment: env) }
        ferryd = p
        client = try FerryClient(address: sessionBus.address)
        let deadline = Date().addingTimeInterval(15)
        while try await !client.bus.nameHasOwner(FerryClient.busName) {
            if !p.isRunning { throw TimedOut(description: "ferryd exited with \(p.exitStatus ?? -1)\n\(p.log)") }
            if Date() > deadline { throw TimedOut(description: "ferryd did not take its name within 15 s\n\(p.log)") }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        signals = try await SignalLog.start(client.bus)
    }

    /// How often ferryd's log has a line containing `text`.
    func logCount(_ text: String) -> Int {
        (ferryd?.stderr ?? "").components(separatedBy: "\n").filter { $0.contains(text) }.count
    }

    /// Waits (bounded, reading the log file every 20 ms) until ferryd's log has a line
    /// containing `text`; returns how many it has then.
    @discardableResult
    func waitForLog(_ text: String, timeout: TimeInterval = 10) async throws -> Int {
        let deadline = Date().addingTimeInterval(timeout)
        while logCount(text) == 0 {
            if Date() > deadline { throw TimedOut(description: "no '\(text)' in ferryd's log after \(timeout) s") }
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

    func download(_ session: FerrySession, _ path: String) async throws -> FerryTransfer {
        try await session.download(server.url(path), options: ["destination": .string(work + path)])
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
