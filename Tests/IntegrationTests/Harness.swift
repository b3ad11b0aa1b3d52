import DBus
import Dispatch
import FerryClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

// The integration harness: per test a private dbus-daemon, a loopback HTTP server,
// a temporary HOME with its XDG directories, and the real `ferryd` on that bus.
// Tests talk to ferryd over the bus, as any client would.

/// A bounded wait that ran out.
struct TimedOut: Error, CustomStringConvertible {
    var description: String
}

/// Where the built `ferryd` and `ferry` are: `FERRYD_PATH` / `FERRY_CLI_PATH`, else
/// beside the test bundle (the build's bin directory), else in the package's
/// build directories.
enum Binaries {
    static func locate(_ name: String, variable: String) -> String? {
        let fm = FileManager.default
        if let p = ProcessInfo.processInfo.environment[variable], !p.isEmpty {
            return fm.isExecutableFile(atPath: p) ? p : nil
        }
        var dirs: [URL] = []
        for bundle in [Bundle(for: FerryTestCase.self), Bundle.main] {
            dirs.append(bundle.bundleURL)
            dirs.append(bundle.bundleURL.deletingLastPathComponent())
            if let exe = bundle.executableURL { dirs.append(exe.deletingLastPathComponent()) }
        }
        // Tests/IntegrationTests/Harness.swift -> the package root.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        for build in [".build-it", ".build"] {
            dirs.append(root.appendingPathComponent(build).appendingPathComponent("debug"))
        }
        for d in dirs {
            let candidate = d.appendingPathComponent(name).path
            if fm.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    static var ferryd: String? { locate("ferryd", variable: "FERRYD_PATH") }
    static var ferry: String? { locate("ferry", variable: "FERRY_CLI_PATH") }
}

/// Makes a fresh directory with a short path (Unix socket paths must stay short).
func makeTempDirectory(_ prefix: String) throws -> String {
    var template = Array("/tmp/\(prefix).XXXXXX".utf8CString)
    guard let p = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw TimedOut(description: "mkdtemp failed: \(String(cString: strerror(errno)))")
    }
    return String(cString: p)
}

/// One signal ferryd sent, with the time it arrived.
struct Signal: CustomStringConvertible, Sendable {
    var time: Date
    var path: String
    var interface: String
    var member: String
    var args: [DBusValue]

    var description: String {
        String(format: "%.3f ", time.timeIntervalSince1970.truncatingRemainder(dividingBy: 1000))
            + "\(path) \(interface).\(member)(\(args.map(\.description).joined(separator: ", ")))"
    }

    /// For PropertiesChanged: the changed properties.
    var changed: [String: DBusValue] { args.count >= 2 ? (args[1].vardict ?? [:]) : [:] }
}

/// Records every signal ferryd sends below /org/ferry/Ferry1 and lets a test wait,
/// with a bound, until what it recorded satisfies a condition.
final class SignalRecorder: @unchecked Sendable {
    // `@unchecked Sendable`: `items`, `waiters` and `nextID` are only touched under `lock`.
    private let lock = NSLock()
    private var items: [Signal] = []
    private var waiters: [Int: (condition: ([Signal]) -> Bool, continuation: CheckedContinuation<Void, Error>)] = [:]
    private var nextID = 0
    private var subscription: BusConnection.Subscription?
    private let bus: BusConnection

    private init(bus: BusConnection) { self.bus = bus }

    /// Subscribes before returning: nothing sent afterwards is missed.
    static func start(_ bus: BusConnection) async throws -> SignalRecorder {
        let r = SignalRecorder(bus: bus)
        r.subscription = try await bus.subscribe(MatchRule(sender: FerryClient.busName, pathNamespace: FerryClient.managerPath)) { [r] m in
            guard let path = m.path, let interface = m.interface, let member = m.member,
                  path == FerryClient.managerPath || path.hasPrefix(FerryClient.managerPath + "/") else { return }
            r.add(Signal(time: Date(), path: path, interface: interface, member: member, args: (try? m.arguments()) ?? []))
        }
        return r
    }

    func stop() {
        if let s = subscription { bus.unsubscribe(s) }
    }

    private func add(_ s: Signal) {
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

    var all: [Signal] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }

    func signals(path: String? = nil, member: String? = nil) -> [Signal] {
        all.filter { (path == nil || $0.path == path) && (member == nil || $0.member == member) }
    }

    /// Waits until `condition` holds for the signals recorded so far (checked now and
    /// on every new signal); throws `TimedOut` listing what arrived.
    func wait(_ what: String, timeout: TimeInterval = 20, until condition: @escaping ([Signal]) -> Bool) async throws {
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
                let seen = items.suffix(40).map(\.description).joined(separator: "\n  ")
                lock.unlock()
                w?.continuation.resume(throwing: TimedOut(description: "no \(what) within \(timeout) s; last signals:\n  \(seen)"))
            }
        }
    }

    /// The `Completed` signal of a transfer: (serial, error name, error message).
    @discardableResult
    func completed(_ path: String, timeout: TimeInterval = 20) async throws -> (serial: UInt64, errorName: String, errorMessage: String) {
        try await wait("Completed on \(path)", timeout: timeout) { s in
            s.contains { $0.path == path && $0.member == "Completed" }
        }
        let s = signals(path: path, member: "Completed").first!
        return (s.args[0].uint64 ?? 0, s.args[1].string ?? "", s.args[2].string ?? "")
    }

    /// How many signals have arrived: a mark for `waitForState(_:_:since:)`.
    var mark: Int { all.count }

    /// Whether a PropertiesChanged on `path` ever set State to `state`.
    func sawState(_ path: String, _ state: String) -> Bool {
        signals(path: path, member: "PropertiesChanged").contains { $0.changed["State"]?.string == state }
    }
}

/// The base of every integration test: starts the world in `setUp`, stops it in
/// `tearDown`, and prints ferryd's log when the test failed.
class FerryTestCase: XCTestCase {
    var bus: PrivateBus!
    var server: TestHTTPServer!
    /// The temporary HOME; everything the test makes lives below it.
    var home: String!
    /// The XDG download directory of that HOME (from `user-dirs.dirs`).
    var downloads: String!
    /// A scratch directory for explicit destinations.
    var work: String!
    var ferryd: ChildProcess?
    var client: FerryClient!
    var signals: SignalRecorder!
    /// Extra logs to print on failure (other processes a test started).
    var extraLogs: [() -> String] = []
    var cleanups: [() -> Void] = []

    var ferrydPath: String!
    var ferryPath: String!

    override func setUp() async throws {
        try await super.setUp()
        guard let d = Binaries.ferryd, let f = Binaries.ferry else {
            XCTFail("the built ferryd/ferry were not found: set FERRYD_PATH and FERRY_CLI_PATH, or build them beside the test bundle (swift build). Looked beside \(Bundle.main.bundlePath)")
            throw TimedOut(description: "binaries missing")
        }
        ferrydPath = d
        ferryPath = f
        home = try makeTempDirectory("ferry-it")
        downloads = home + "/Dl"
        work = home + "/work"
        let fm = FileManager.default
        for dir in [home + "/.config", home + "/.local/state", work!] {
            try fm.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        // What xdg-user-dirs writes; ferryd reads it (and creates the directory).
        try "XDG_DOWNLOAD_DIR=\"$HOME/Dl\"\n".write(toFile: home + "/.config/user-dirs.dirs", atomically: true, encoding: .utf8)

        bus = try PrivateBus()
        server = TestHTTPServer()
        try server.start()
        try await startFerryd()
    }

    /// The environment ferryd, the CLI and other clients get: the private bus, the
    /// temporary HOME and its XDG directories, and no proxy.
    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        var env = bus.environment(extra: [
            "HOME": home,
            "XDG_CONFIG_HOME": home + "/.config",
            "XDG_STATE_HOME": home + "/.local/state",
            "XDG_DATA_HOME": home + "/.local/share",
            "XDG_CACHE_HOME": home + "/.cache",
            "XDG_DOWNLOAD_DIR": downloads,
            "NO_PROXY": "*", "no_proxy": "*",
            // ferryd's testing knob: retries after 50 ms, 100 ms, … instead of 2 s, 4 s, …
            "FERRY_RETRY_BASE_MS": "50",
        ])
        for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "FERRY_SESSION"] {
            env.removeValue(forKey: k)
        }
        for (k, v) in extra { env[k] = v }
        return env
    }

    /// Starts ferryd and waits (bounded) until it owns org.ferry.Ferry1; then connects
    /// the client and the signal recorder.
    func startFerryd() async throws {
        let p = try ChildProcess(executable: ferrydPath, arguments: ["--verbose"], environment: environment())
        ferryd = p
        if client == nil { client = try FerryClient(address: bus.address) }
        let deadline = Date().addingTimeInterval(15)
        while true {
            if try await client.bus.nameHasOwner(FerryClient.busName) { break }
            if !p.isRunning {
                XCTFail("ferryd exited with status \(p.exitStatus ?? -1) before taking its name\n\(p.log)")
                throw TimedOut(description: "ferryd exited")
            }
            if Date() > deadline {
                XCTFail("ferryd did not take \(FerryClient.busName) within 15 s\n\(p.log)")
                throw TimedOut(description: "ferryd did not start")
            }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        if signals == nil { signals = try await SignalRecorder.start(client.bus) }
    }

    /// Stops ferryd (SIGTERM, bounded) and waits until its name is gone.
    func stopFerryd() async throws {
        guard let p = ferryd else { return }
        p.terminate()
        if p.waitForExit(timeout: 10) == nil {
            XCTFail("ferryd did not exit within 10 s of SIGTERM\n\(p.log)")
            p.kill(SIGKILL)
            _ = p.waitForExit(timeout: 5)
        }
        let deadline = Date().addingTimeInterval(5)
        while try await client.bus.nameHasOwner(FerryClient.busName), Date() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    override func tearDown() async throws {
        let failed = (testRun?.totalFailureCount ?? 0) > 0
        if failed {
            var text = "\n===== ferryd log for \(name) =====\n"
            text += ferryd?.log ?? "(ferryd not started)"
            for l in extraLogs { text += "\n" + l() }
            text += "\n===== recorded signals =====\n"
            text += (signals?.all.suffix(80).map(\.description).joined(separator: "\n") ?? "")
            text += ProcessInfo.processInfo.environment["FERRY_IT_KEEP"] != nil
                ? "\n===== files kept in \(home ?? "?") =====\n" : "\n===== end (FERRY_IT_KEEP=1 keeps the files) =====\n"
            print(text)
        }
        signals?.stop()
        for c in cleanups.reversed() { c() }
        client?.close()
        if let p = ferryd, p.isRunning {
            p.terminate()
            if p.waitForExit(timeout: 10) == nil {
                print("ferryd did not exit within 10 s of SIGTERM; killing it")
                p.kill(SIGKILL)
                _ = p.waitForExit(timeout: 5)
            }
        }
        server?.stop()
        bus?.stop()
        // FERRY_IT_KEEP=1 keeps a failed test's files (HOME, downloads, state) for a look.
        let keep = failed && ProcessInfo.processInfo.environment["FERRY_IT_KEEP"] != nil
        if !keep, let home { try? FileManager.default.removeItem(atPath: home) }
        try await super.tearDown()
    }

    // MARK: Helpers

    func session(_ identifier: String = "com.example.Test", _ configuration: [String: DBusValue] = [:]) async throws -> FerrySession {
        try await client.openSession(identifier, configuration: configuration)
    }

    /// Serves a deterministic body at `path` and returns it.
    @discardableResult
    func serve(_ path: String, size: Int, seed: UInt64 = 1, etag: String? = "\"v1\"", contentDisposition: String? = nil,
               ranges: Bool = true) -> [UInt8] {
        let body = TestData.bytes(count: size, seed: seed)
        server.add(path: path, body: body, etag: etag, contentDisposition: contentDisposition, supportsRanges: ranges)
        return body
    }

    /// Waits for the transfer's Completed signal and returns its final properties.
    @discardableResult
    func finish(_ t: FerryTransfer, timeout: TimeInterval = 20) async throws -> TransferInfo {
        try await signals.completed(t.path, timeout: timeout)
        return try await t.info()
    }

    /// Waits until the transfer is in `state` (now, or by a PropertiesChanged).
    func waitForState(_ t: FerryTransfer, _ state: String, timeout: TimeInterval = 10) async throws {
        if signals.sawState(t.path, state) { return }
        if try await t.info().state == state { return }
        try await signals.wait("State \(state) on \(t.path)", timeout: timeout) { s in
            s.contains { $0.path == t.path && $0.member == "PropertiesChanged" && $0.changed["State"]?.string == state }
        }
    }

    /// Waits until a PropertiesChanged after `mark` sets the transfer's State to one of `states`.
    func waitForState(_ t: FerryTransfer, _ states: Set<String>, since mark: Int, timeout: TimeInterval = 10) async throws {
        try await signals.wait("State in \(states.sorted()) on \(t.path)", timeout: timeout) { s in
            s.dropFirst(mark).contains { $0.path == t.path && $0.member == "PropertiesChanged" && states.contains($0.changed["State"]?.string ?? "") }
        }
    }

    func sha256(ofFile path: String) -> String? {
        guard let d = FileManager.default.contents(atPath: path) else { return nil }
        return TestData.sha256Hex(d)
    }

    func fileSize(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int
    }

    func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    /// Asserts that the file at `path` holds exactly `body`.
    func assertFile(_ path: String, equals body: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        guard let digest = sha256(ofFile: path) else {
            return XCTFail("no file at \(path)", file: file, line: line)
        }
        XCTAssertEqual(fileSize(path), body.count, "size of \(path)", file: file, line: line)
        XCTAssertEqual(digest, TestData.sha256Hex(body), "SHA-256 of \(path)", file: file, line: line)
    }

    /// Paths below `dir` ending in `.part`.
    func partFiles(in dir: String) -> [String] {
        let items = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return items.filter { $0.hasSuffix(".part") }.map { dir + "/" + $0 }
    }

    /// A raw method call on ferryd.
    @discardableResult
    func call(_ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = [],
              timeout: Double = 10) async throws -> [DBusValue] {
        try await client.bus.call(destination: FerryClient.busName, path: path, interface: interface, method: method,
                                  arguments: args, timeout: timeout)
    }

    func getProperty(_ path: String, _ interface: String, _ name: String) async throws -> DBusValue? {
        try await call(path, StandardNames.properties, "Get", [.string(interface), .string(name)]).first?.unwrapped
    }

    func managerProperty(_ name: String) async throws -> DBusValue? {
        try await getProperty(FerryClient.managerPath, FerryClient.managerInterface, name)
    }

    /// Asserts that `body` fails with the D-Bus error `name`; returns the error.
    @discardableResult
    func assertBusError<T>(_ name: String, _ what: String = "", file: StaticString = #filePath, line: UInt = #line,
                           _ body: () async throws -> T) async -> BusError? {
        do {
            let v = try await body()
            XCTFail("\(what): expected \(name), but the call succeeded with \(v)", file: file, line: line)
        } catch let e as BusError {
            XCTAssertEqual(e.name, name, "\(what): \(e.message)", file: file, line: line)
            return e
        } catch {
            XCTFail("\(what): expected \(name), got \(error)", file: file, line: line)
        }
        return nil
    }

    /// Asserts ferryd is still running and answering.
    func assertDaemonAlive(file: StaticString = #filePath, line: UInt = #line) async {
        XCTAssertTrue(ferryd?.isRunning ?? false, "ferryd exited with \(ferryd?.exitStatus ?? -1)", file: file, line: line)
        do {
            _ = try await call(FerryClient.managerPath, StandardNames.peer, "Ping")
        } catch {
            XCTFail("ferryd does not answer Ping: \(error)", file: file, line: line)
        }
    }

    /// Runs a program to completion (bounded).
    func runTool(_ path: String, _ args: [String], environment env: [String: String], timeout: TimeInterval = 30) throws
        -> (status: Int32, stdout: String, stderr: String) {
        try ChildProcess.run(path, args, environment: env, timeout: timeout)
    }

    /// Waits (bounded, polling the disk) until the file at `path` holds at least `bytes`.
    func waitForFileSize(_ path: String, atLeast bytes: Int, timeout: TimeInterval = 10) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while (fileSize(path) ?? -1) < bytes {
            if Date() > deadline {
                throw TimedOut(description: "\(path) holds \(fileSize(path) ?? -1) bytes after \(timeout) s, wanted \(bytes)")
            }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    /// Runs the `ferry` CLI against the private bus.
    func ferry(_ args: [String], timeout: TimeInterval = 30, extraEnv: [String: String] = [:]) throws
        -> (status: Int32, stdout: String, stderr: String) {
        try ChildProcess.run(ferryPath, args, environment: environment(extraEnv), timeout: timeout)
    }
}
