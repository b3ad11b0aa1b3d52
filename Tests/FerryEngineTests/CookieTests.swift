import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// Cookie jars: what a server sets comes back on later requests with the same jar,
/// never with another jar or without one.
final class CookieTests: EngineTestCase {
    private func cookieRequest(_ id: TransferID, _ path: String, jar: EngineCookieJar?) -> EngineRequest {
        var r = request(id, path)
        r.cookieJar = jar
        return r
    }

    private func cookieHeader(_ path: String) -> String? {
        server.requests(for: path).last?.header("Cookie")
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        server.add(path: "/login", body: [1])
        server.set(.setCookie("session=s3cr3t-value; Path=/"), on: "/login")
        server.add(path: "/data", body: [2])
    }

    func testCookieSetByOneAnswerIsSentOnTheNext() throws {
        let jar = EngineCookieJar.memory(1)
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: jar)), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertNil(server.requests(for: "/login").last?.header("Cookie"))

        XCTAssertEqual(run(cookieRequest(2, "/data", jar: jar)), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertEqual(cookieHeader("/data"), "session=s3cr3t-value")
    }

    func testExistingJarFileIsNarrowedToItsOwner() throws {
        let path = directory.appendingPathComponent("old.cookies").path
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(), attributes: [.posixPermissions: 0o644]))
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertTrue((try String(contentsOfFile: path, encoding: .utf8)).contains("s3cr3t-value"), "the jar was written")
    }

    func testJarsAreSeparate() throws {
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: .memory(1))), .succeeded(bytesOnDisk: 1, sha256: nil))

        XCTAssertEqual(run(cookieRequest(2, "/data", jar: .memory(2))), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertNil(cookieHeader("/data"), "another session's jar")
        XCTAssertEqual(run(cookieRequest(3, "/data", jar: nil)), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertNil(cookieHeader("/data"), "cookies off")
        let otherFile = directory.appendingPathComponent("other.cookies").path
        XCTAssertEqual(run(cookieRequest(4, "/data", jar: .file(otherFile))), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertNil(cookieHeader("/data"), "another session's file")
    }

    func testDiscardedMemoryJarForgetsItsCookies() throws {
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: .memory(7))), .succeeded(bytesOnDisk: 1, sha256: nil))
        engine.discardCookies(.memory(7))
        XCTAssertEqual(run(cookieRequest(2, "/data", jar: .memory(7))), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertNil(cookieHeader("/data"))
    }

    func testFileJarIsPrivateAndOutlivesTheEngine() throws {
        let path = directory.appendingPathComponent("session.cookies").path
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600, "readable by its owner only")

        // As after a restart of the daemon: a new engine reads the jar.
        engine.shutdown()
        engine = CurlEngine()
        engine.setEventHandler { [log] event in log!.append(event) }
        XCTAssertEqual(run(cookieRequest(2, "/data", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertEqual(cookieHeader("/data"), "session=s3cr3t-value")
    }

    /// The jar file is written when a response changed the cookies, before the attempt
    /// is reported (so a crash right after keeps them), and left alone when nothing
    /// changed: a batch of downloads does not rewrite it once per file.
    func testFileJarIsWrittenWhenCookiesChangeAndOnlyThen() throws {
        let path = directory.appendingPathComponent("batch.cookies").path
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertTrue((try String(contentsOfFile: path, encoding: .utf8)).contains("s3cr3t-value"),
                      "written before the attempt was reported, with the engine still running")
        var before = stat()
        XCTAssertEqual(stat(path, &before), 0)

        for id in 2...6 {
            XCTAssertEqual(run(cookieRequest(TransferID(id), "/data", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        }
        var after = stat()
        XCTAssertEqual(stat(path, &after), 0)
        XCTAssertEqual(after.st_ino, before.st_ino, "no cookie changed: the jar was not rewritten (curl replaces the file when it writes)")
        XCTAssertEqual(cookieHeader("/data"), "session=s3cr3t-value")

        server.add(path: "/again", body: [3])
        server.set(.setCookie("theme=dark; Path=/"), on: "/again")
        XCTAssertEqual(run(cookieRequest(7, "/again", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        let text = try String(contentsOfFile: path, encoding: .utf8)
        XCTAssertTrue(text.contains("theme") && text.contains("s3cr3t-value"), "a new cookie is saved with the old ones")
    }

    /// A power cut leaves the old jar or the new one, never a part of it: the new one is
    /// written beside it, synced, renamed over it, and then its folder is synced.
    func testFileJarIsSyncedThenRenamedThenItsFolderSynced() throws {
        let path = directory.appendingPathComponent("durable.cookies").path
        let steps = StepLog()
        DurableFiles.observe { step in steps.append(step) }
        defer { DurableFiles.observe(nil) }
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: .file(path))), .succeeded(bytesOnDisk: 1, sha256: nil))
        XCTAssertEqual(steps.all.filter { $0.mentions(path) || $0 == .syncFolder(directory.path) },
                       [.syncFile(path + ".new"), .rename(from: path + ".new", to: path), .syncFolder(directory.path)])
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".new"))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600, "readable by its owner only")
        XCTAssertTrue((try String(contentsOfFile: path, encoding: .utf8)).contains("s3cr3t-value"))
    }

    func testUploadsAndRangeConnectionsUseTheJar() throws {
        let jar = EngineCookieJar.memory(3)
        XCTAssertEqual(run(cookieRequest(1, "/login", jar: jar)), .succeeded(bytesOnDisk: 1, sha256: nil))

        let body = TestData.bytes(count: 4 << 20, seed: 95)
        server.add(path: "/big", body: body)
        server.set(.slow(bytesPerSecond: 8_000_000), on: "/big")
        var segmented = cookieRequest(2, "/big", jar: jar)
        segmented.connections = 4
        XCTAssertEqual(run(segmented, timeout: 60), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        let bigRequests = server.requests(for: "/big")
        XCTAssertGreaterThan(bigRequests.count, 1)
        XCTAssertTrue(bigRequests.allSatisfy { $0.header("Cookie") == "session=s3cr3t-value" })

        server.set(.acceptUploads(), on: "/up")
        let file = directory.appendingPathComponent("up.bin").path
        try write([1, 2, 3], to: file)
        let source = try EngineUpload.open(path: file)
        defer { source.closeSource() }
        var upload = cookieRequest(3, "/up", jar: jar)
        upload.upload = source
        XCTAssertEqual(run(upload), .succeeded(bytesOnDisk: 3, sha256: nil))
        XCTAssertEqual(cookieHeader("/up"), "session=s3cr3t-value")
    }
}

import Logging

/// Every log line of an engine, at the most verbose level.
private final class CapturedLog: LogHandler, @unchecked Sendable {
    // @unchecked Sendable: `lines` is guarded by `lock`; the rest is set before use.
    private let lock = NSLock()
    private var lines: [String] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
             file: String, function: String, line: UInt) {
        lock.lock()
        lines.append("\(message) \(metadata ?? [:]) \(self.metadata)")
        lock.unlock()
    }

    var all: [String] {
        lock.lock(); defer { lock.unlock() }
        return lines
    }
}

final class CookieLogTests: EngineTestCase {
    func testCookieValuesNeverReachTheLog() throws {
        let captured = CapturedLog()
        engine.shutdown()
        engine = CurlEngine(logger: Logger(label: "test") { _ in captured })
        engine.setEventHandler { [log] event in log!.append(event) }
        server.add(path: "/login", body: [1])
        server.set(.setCookie("session=s3cr3t-value; Path=/"), on: "/login")
        server.add(path: "/data", body: TestData.bytes(count: 3 << 20, seed: 96))
        server.set(.status(500), on: "/fail")

        for (id, path) in [(1, "/login"), (2, "/data"), (3, "/fail")] as [(TransferID, String)] {
            var r = request(id, path)
            r.cookieJar = .memory(1)
            r.connections = id == 2 ? 4 : 1
            _ = run(r)
        }

        XCTAssertEqual(server.requests(for: "/fail").last?.header("Cookie"), "session=s3cr3t-value")
        XCTAssertFalse(captured.all.isEmpty, "the engine logged something")
        XCTAssertFalse(captured.all.contains { $0.contains("s3cr3t") }, "\(captured.all)")
    }
}

/// The steps `DurableFiles` reports, from whichever thread makes them.
final class StepLog: @unchecked Sendable {
    // @unchecked Sendable: `steps` is guarded by `lock`.
    private let lock = NSLock()
    private var steps: [DurableFiles.Step] = []
    func append(_ step: DurableFiles.Step) { lock.withLock { steps.append(step) } }
    var all: [DurableFiles.Step] { lock.withLock { steps } }
}

extension DurableFiles.Step {
    func mentions(_ path: String) -> Bool {
        switch self {
        case .syncFile(let p), .syncFolder(let p): return p.hasPrefix(path)
        case .rename(let from, let to): return from.hasPrefix(path) || to.hasPrefix(path)
        }
    }
}
