import DBus
import Dispatch
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

// The integration harness: per test a private dbus-daemon, a loopback HTTP server,
// a temporary HOME with its XDG directories, and the real `ferryd` on that bus.
// Tests talk to ferryd over the bus, as any client would.

/// Where the built `ferryd` and `ferry` are: `FERRYD_PATH` / `FERRY_CLI_PATH`, else
/// beside the test bundle (the build's bin directory), else in the package's
/// build directories.
enum Binaries {
    static func locate(_ name: String, variable: String) -> String? {
        BuiltProducts.locate(name, variable: variable, besideBundleOf: FerryTestCase.self, buildDirectories: [".build-it", ".build"])
    }

    static var ferryd: String? { locate("ferryd", variable: "FERRYD_PATH") }
    static var ferry: String? { locate("ferry", variable: "FERRY_CLI_PATH") }
}

extension SignalRecorder {
    /// The `Completed` signal of a transfer: (serial, error name, error message).
    @discardableResult
    func completed(_ path: String, timeout: TimeInterval = 20) async throws -> (serial: UInt64, errorName: String, errorMessage: String) {
        try await wait("Completed on \(path)", timeout: timeout) { s in
            s.contains { $0.path == path && $0.member == "Completed" }
        }
        let s = signals(path: path, member: "Completed").first!
        return (s.args[0].uint64 ?? 0, s.args[1].string ?? "", s.args[2].string ?? "")
    }

    /// Waits for the `Completed` signal of a transfer and then for its session's batch
    /// to end (a session `AllFinished` after it): before a test attaches a later run,
    /// so that no signal of that batch is still on its way to it.
    func completedWithItsBatch(_ path: String, timeout: TimeInterval = 20) async throws {
        try await wait("Completed on \(path) and then a session's AllFinished", timeout: timeout) { s in
            guard let done = s.firstIndex(where: { $0.path == path && $0.member == "Completed" }) else { return false }
            return s[(done + 1)...].contains { $0.interface == BusClient.sessionInterface && $0.member == "AllFinished" }
        }
    }

    /// Whether a PropertiesChanged on `path` ever set State to `state`.
    func sawState(_ path: String, _ state: String) -> Bool {
        signals(path: path, member: "PropertiesChanged").contains { $0.changed["State"]?.string == state }
    }
}

/// The base of every integration test: starts the world in `setUp` (a private bus
/// and ferryd on it besides what `FerrydTestCase` sets up), stops it in `tearDown`, and
/// prints ferryd's log when the test failed.
class FerryTestCase: FerrydTestCase {
    var bus: PrivateBus!
    /// The XDG download directory of the HOME (from `user-dirs.dirs`).
    var downloads: String!
    /// A scratch directory for explicit destinations.
    var work: String!
    /// Whether `client` asks ferryd for the private signals of every session
    /// (`Manager.Watch`), again after each start: tests that follow sandboxed apps'
    /// transfers through `signals` set it (`watchPrivateSignals`).
    var watchesPrivateSignals = false
    var cleanups: [() -> Void] = []
    var ferryPath: String!

    override func setUp() async throws {
        try await super.setUp()
        let missing = "the built ferryd/ferry were not found: set FERRYD_PATH and FERRY_CLI_PATH, or build them beside the test bundle (swift build). Looked beside \(Bundle.main.bundlePath)"
        guard let f = Binaries.ferry else {
            XCTFail(missing)
            throw TimedOut(description: "binaries missing")
        }
        ferryPath = f
        // user-dirs.dirs names $HOME/Dl; ferryd reads it (and creates the directory).
        try setUpFerrydWorld(ferryd: Binaries.ferryd, missing: missing) {
            try TemporaryHome(prefix: "ferry-it", downloadDirectory: "Dl", subdirectories: ["work"])
        }
        downloads = home + "/Dl"
        work = home + "/work"
        bus = try PrivateBus()
        try await startFerryd()
    }

    /// The environment ferryd, the CLI and other clients get: the private bus, the
    /// temporary HOME and its XDG directories, and no proxy.
    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        let settings = [
            "XDG_DOWNLOAD_DIR": downloads!,
            // ferryd's testing knob: retries after 50 ms, 100 ms, … instead of 2 s, 4 s, …
            "FERRY_RETRY_BASE_MS": "50",
        ]
        return temporaryHome.environment(base: bus.environment(), unsetting: ["FERRY_SESSION"],
                                         setting: settings.merging(extra) { $1 })
    }

    /// Starts ferryd (with `--no-idle-exit`: no test may depend on finishing within
    /// its idle timeout; `arguments` after it: caps and the like) and waits (bounded)
    /// until it owns org.ferry.Ferry1; then connects the client and the signal recorder.
    func startFerryd(_ arguments: [String] = [], wrapper: [String] = [], extraEnvironment: [String: String] = [:]) async throws {
        let p = try Ferryd.launch(ferrydPath, arguments: ["--no-idle-exit"] + arguments, environment: environment(extraEnvironment),
                                  wrapper: wrapper)
        ferryd = p
        if client == nil { client = try BusClient(address: bus.address) }
        do {
            try await Ferryd.waitForName(p, on: client.bus, timeout: 15)
        } catch let e as TimedOut {
            XCTFail("ferryd did not take its name: \(e)")
            throw e
        }
        if signals == nil { signals = try await SignalRecorder.start(client.bus) }
        if watchesPrivateSignals { try await client.watch() }
    }

    /// From now on `signals` records the private signals too (sandboxed apps' sessions).
    func watchPrivateSignals() async throws {
        guard !watchesPrivateSignals else { return }
        watchesPrivateSignals = true
        try await client.watch()
    }

    /// Kills ferryd with SIGKILL, waits for its bus name to go, and starts it again.
    func killAndRestart() async throws {
        try await killFerryd()
        try await startFerryd()
    }

    /// Kills ferryd with SIGKILL and waits until it has exited and its bus name is gone
    /// (so the next `startFerryd` cannot mistake the dead one's name for the new one's).
    func killFerryd() async throws {
        guard let p = ferryd else { return XCTFail("ferryd is not running") }
        p.kill(SIGKILL)
        XCTAssertNotNil(p.waitForExit(timeout: 10), "ferryd died of SIGKILL")
        try await waitForNameToGo()
    }

    /// Waits (10 s at most) until nobody owns org.ferry.Ferry1. `strict`: throw if someone
    /// still does then (with another ferryd waiting to take the name, it may never be
    /// free for long: a stop does not insist).
    private func waitForNameToGo(strict: Bool = true) async throws {
        let deadline = Date().addingTimeInterval(10)
        while try await client.bus.nameHasOwner(BusClient.busName) {
            if Date() > deadline {
                if strict { throw TimedOut(description: "the stopped ferryd's bus name was still owned after 10 s") }
                return
            }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
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
        try await waitForNameToGo(strict: false)
    }

    override func tearDown() async throws {
        let failed = hasFailed
        if failed {
            var text = failureReport(signalCount: 80)
            text += ProcessInfo.processInfo.environment["FERRY_IT_KEEP"] != nil
                ? "\n===== files kept in \(home ?? "?") =====\n" : "\n===== end (FERRY_IT_KEEP=1 keeps the files) =====\n"
            print(text)
        }
        signals?.stop()
        for c in cleanups.reversed() { c() }
        client?.close()
        if let p = ferryd, !p.stop() { print("ferryd did not exit within 10 s of SIGTERM; killed it") }
        server?.stop()
        bus?.stop()
        // FERRY_IT_KEEP=1 keeps a failed test's files (HOME, downloads, state) for a look.
        let keep = failed && ProcessInfo.processInfo.environment["FERRY_IT_KEEP"] != nil
        if !keep { temporaryHome?.remove() }
        try await super.tearDown()
    }

    // MARK: Helpers

    func session(_ identifier: String = "com.example.Test", _ configuration: [String: DBusValue] = [:]) async throws -> BusSession {
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

    /// Waits for the transfer's Completed signal and asserts that it completed with the
    /// file at `path` holding exactly `body`; returns its final properties.
    @discardableResult
    func finishCompleted(_ t: FerryTransfer, at path: String, equals body: [UInt8], timeout: TimeInterval = 20,
                         file: StaticString = #filePath, line: UInt = #line) async throws -> TransferInfo {
        let info = try await finish(t, timeout: timeout)
        XCTAssertEqual(info.state, "completed", info.errorMessage, file: file, line: line)
        assertFile(path, equals: body, file: file, line: line)
        return info
    }

    /// Downloads `path` in `s` to `work + path` (with `options` besides), waits for its
    /// Completed and asserts that it completed with `body`.
    /// - Returns: the transfer, its final properties and the seconds from the call to its end.
    func timedDownload(_ path: String, in s: BusSession, equals body: [UInt8], options: [String: DBusValue] = [:],
                       timeout: TimeInterval = 30, file: StaticString = #filePath, line: UInt = #line) async throws
        -> (FerryTransfer, TransferInfo, seconds: TimeInterval) {
        let start = Date()
        let t = try await s.download(server.url(path), options: options.merging(["destination": .string(work + path)]) { $1 })
        let info = try await finishCompleted(t, at: work + path, equals: body, timeout: timeout, file: file, line: line)
        return (t, info, Date().timeIntervalSince(start))
    }

    /// The bytes a restarted ferryd says it kept of a download on several connections
    /// (its log line "continuing N ranges (BYTES of …"); 0 when it logged none. Its
    /// ResumedAtOffset may go out before it owns the bus name, so the log is the witness.
    func bytesKeptByTheRestart() -> Int64 {
        let log = ferryd?.log ?? ""
        return log.range(of: #"continuing \d+ ranges \((\d+) of"#, options: .regularExpression).flatMap { match in
            Int64(log[match].split(separator: "(")[1].split(separator: " ")[0])
        } ?? 0
    }

    /// Waits (20 s at most, then goes on) until the transfer's BytesTransferred reaches `bytes`.
    func waitForBytesTransferred(_ t: FerryTransfer, atLeast bytes: Int64) async throws {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, try await t.info().bytesTransferred < bytes {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }

    /// Resumes a transfer that ended (failed), waits for the Completed of its new run and
    /// returns its final properties.
    @discardableResult
    func resumeAndFinish(_ t: FerryTransfer, timeout: TimeInterval = 20) async throws -> TransferInfo {
        let completedBefore = signals.signals(path: t.path, member: "Completed").count
        try await t.resume()
        try await signals.wait("another Completed on \(t.path)", timeout: timeout) { s in
            s.filter { $0.path == t.path && $0.member == "Completed" }.count > completedBefore
        }
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

    /// Waits until a paused download's attempt has stopped: the Progress that follows
    /// its State `paused` carries the bytes kept, stored before it is sent.
    /// - Returns: that count.
    @discardableResult
    func waitUntilPauseSettled(_ t: FerryTransfer, timeout: TimeInterval = 10) async throws -> Int64 {
        func settled(_ s: [RecordedSignal]) -> RecordedSignal? {
            guard let paused = s.lastIndex(where: { $0.path == t.path && $0.member == "PropertiesChanged"
                                                    && $0.changed["State"]?.string == "paused" }) else { return nil }
            return s[(paused + 1)...].first { $0.path == t.path && $0.member == "Progress" }
        }
        try await signals.wait("a Progress after \(t.path) paused", timeout: timeout) { settled($0) != nil }
        return settled(signals.all)?.args[1].int64 ?? -1
    }

    /// Waits until `condition` holds (checked every 10 ms), for what the daemon or the
    /// test server does but tells nobody on the bus.
    func waitUntilAsync(_ what: String, timeout: TimeInterval = 10, _ condition: () -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition() {
            if Date() > deadline { throw TimedOut(description: "waited \(timeout) s for \(what)") }
            try await Task.sleep(nanoseconds: 10_000_000)
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
        try await client.bus.call(destination: BusClient.busName, path: path, interface: interface, method: method,
                                  arguments: args, timeout: timeout)
    }

    func getProperty(_ path: String, _ interface: String, _ name: String) async throws -> DBusValue? {
        try await call(path, StandardNames.properties, "Get", [.string(interface), .string(name)]).first?.unwrapped
    }

    func managerProperty(_ name: String) async throws -> DBusValue? {
        try await getProperty(BusClient.managerPath, BusClient.managerInterface, name)
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
            _ = try await call(BusClient.managerPath, StandardNames.peer, "Ping")
        } catch {
            XCTFail("ferryd does not answer Ping: \(error)", file: file, line: line)
        }
    }

    /// Adds transfers that each hold a file descriptor (`add(i)` for i = 0, 1, …, 70 at
    /// the most) until ferryd refuses one, and asserts the budget ferryd started under
    /// `prlimit --nofile=100:320` keeps: 320 less 256 for everything else are taken, and
    /// the next is refused with `LimitExceeded`, its message naming `reason`.
    /// - Returns: the transfers taken.
    func fillTheDescriptorBudget(refusalNaming reason: String, file: StaticString = #filePath, line: UInt = #line,
                                 _ add: (Int) async throws -> FerryTransfer) async throws -> [FerryTransfer] {
        var taken: [FerryTransfer] = []
        var refusal: BusError?
        for i in 0..<70 {
            do {
                taken.append(try await add(i))
            } catch let e as BusError {
                refusal = e
                break
            }
        }
        XCTAssertEqual(taken.count, 320 - 256, "the budget: the limit less 256 for everything else", file: file, line: line)
        XCTAssertEqual(refusal?.name, "org.ferry.Ferry1.Error.LimitExceeded", refusal?.message ?? "no refusal", file: file, line: line)
        XCTAssertTrue(refusal?.message.contains(reason) ?? false, refusal?.message ?? "", file: file, line: line)
        return taken
    }

    /// Runs a program to completion (bounded).
    func runTool(_ path: String, _ args: [String], environment env: [String: String], timeout: TimeInterval = 30) throws
        -> (status: Int32, stdout: String, stderr: String) {
        try ChildProcess.run(path, args, environment: env, timeout: timeout)
    }

    /// The file `startStalledDownload` serves, and where the server stalls it.
    let stalledSize = 1 << 20
    let stalledCut = 256 * 1024

    /// Starts a download of `path` (`stalledSize` bytes) that the server stalls after
    /// `stalledCut` bytes, and waits until all of them are on disk.
    func startStalledDownload(_ path: String, dest: String, ranges: Bool = true, etag: String? = "\"v1\"",
                              session name: String = "com.example.Test") async throws -> (FerryTransfer, [UInt8]) {
        let body = serve(path, size: stalledSize, etag: etag, ranges: ranges)
        return (try await downloadStalled(path, dest: dest, session: name), body)
    }

    /// Starts a download of `path` (served already, `stalledSize` bytes or more) that the
    /// server stalls after `stalledCut` bytes, and waits until all of them are on disk.
    func downloadStalled(_ path: String, dest: String, session name: String = "com.example.Test") async throws -> FerryTransfer {
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: path)
        let s = try await session(name)
        let t = try await s.download(server.url(path), options: ["destination": .string(dest)])
        try await waitForState(t, "running")
        try await waitForFileSize(dest + ".part", atLeast: stalledCut)
        return t
    }

    /// The file's `user.xdg.origin.url`, read as any other program would (Python's
    /// os.getxattr); nil (and a test failure) when it has none.
    func originURL(of path: String) throws -> String? {
        let r = try runTool("/usr/bin/python3", ["-c", "import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], 'user.xdg.origin.url').decode())", path],
                            environment: environment())
        XCTAssertEqual(r.status, 0, "no user.xdg.origin.url on \(path): \(r.stderr)")
        return r.status == 0 ? r.stdout : nil
    }

    /// Waits until a `Progress` signal of `t` says at least `bytes` were written.
    func waitForProgress(_ t: FerryTransfer, atLeast bytes: Int64, timeout: TimeInterval = 30) async throws {
        try await signals.wait("\(t.path) past \(bytes) bytes", timeout: timeout) { recorded in
            recorded.contains { $0.path == t.path && $0.member == "Progress" && ($0.args.count > 1 ? $0.args[1].int64 ?? 0 : 0) >= bytes }
        }
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
