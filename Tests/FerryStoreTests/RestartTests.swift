import FerryCore
import FerryTestSupport
import Foundation
import GRDB
import XCTest
@testable import FerryStore

/// The core over the real SQLite store: stop, open the database again (a new
/// connection, as a new ferryd would), restore, carry on.
final class RestartTests: XCTestCase {
    private var dir: TemporaryDirectory!
    private var downloads: String!

    override func setUp() {
        dir = TemporaryDirectory()
        downloads = dir.path + "/Downloads"
        try! FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
    }

    /// XCTest keeps every test case until the run ends: let the directory go now.
    override func tearDown() {
        dir = nil
    }

    private var state: String { dir.path + "/state" + (crashes == 0 ? "" : "-crash\(crashes)") }
    private var crashes = 0

    private func daemon() throws -> Daemon {
        try Daemon(store: StateDatabase.open(directory: state, logger: LogCapture().logger), downloads: downloads)
    }

    /// As after kill -9: the next daemon finds the state files as they are on disk (a
    /// copy: the abandoned daemon's connection still holds the original), the WAL not
    /// checkpointed, so opening it replays the WAL.
    private func crash() throws {
        let from = state
        crashes += 1
        try FileManager.default.copyItem(atPath: from, toPath: state)
        let wal = try FileManager.default.attributesOfItem(atPath: state + "/ferry.sqlite-wal")[.size] as? Int ?? 0
        XCTAssertGreaterThan(wal, 0, "the changes are in the WAL, still to be replayed")
    }

    func testRestartRestoresSameIdsStatesAndPendingEvents() throws {
        let d = try daemon()
        let s = try d.sync { try $0.openSession(identifier: "com.example.App", configuration: SessionConfigurationUpdate()).id }
        var options = DownloadOptions()
        let done = try d.sync { try $0.download(session: s, url: "https://example.com/done.bin", options: options) }
        let running = try d.sync { try $0.download(session: s, url: "https://example.com/running.bin", options: options) }
        options.start = false
        let paused = try d.sync { try $0.download(session: s, url: "https://example.com/paused.bin", options: options) }
        d.succeed(done, body: Array("hello".utf8))
        // Large enough for its validator to be written at the response (a small file's
        // waits for its next write, and a crash before that fetches it whole again).
        d.send(.response(running, EngineResponse(status: 200, etag: "\"r\"", expectedTotal: 10 << 20, acceptsRanges: true,
                                                 effectiveURL: "https://example.com/running.bin")))
        let runningPart = downloads + "/running.bin.part"
        FileManager.default.createFile(atPath: runningPart, contents: Data(repeating: 1, count: 123))
        let events = try d.sync { try $0.pendingEvents(session: s) }
        XCTAssertEqual(events.map(\.kind), [.finished])
        // No clean stop: the old core is simply abandoned, as after kill -9.
        try crash()

        let d2 = try daemon()
        XCTAssertEqual(d2.sync { $0.sessionIDs }, [s])
        XCTAssertEqual(try d2.sync { try $0.transferIDs() }, [done, running, paused])
        XCTAssertEqual(d2.sync { $0.transfer(done)?.state }, .completed)
        XCTAssertEqual(d2.sync { $0.transfer(done)?.destination }, downloads + "/done.bin")
        XCTAssertEqual(d2.sync { $0.transfer(paused)?.state }, .paused)
        XCTAssertEqual(d2.sync { $0.transfer(running)?.state }, .running)
        let request = try XCTUnwrap(d2.engine.started.last { $0.id == running })
        XCTAssertEqual(request.offset, 123)
        XCTAssertEqual(request.ifRange, "\"r\"")
        XCTAssertEqual(try d2.sync { try $0.pendingEvents(session: s) }, events)
        XCTAssertEqual(d2.engine.started.map(\.id), [running], "nothing finished is started again")

        try d2.sync { try $0.acknowledgeEvents(session: s, upTo: events[0].serial) }
        let next = try d2.sync { try $0.download(session: s, url: "https://example.com/next.bin", options: DownloadOptions()) }
        XCTAssertEqual(next, paused + 1)
        d2.stop()
        let d3 = try daemon()
        XCTAssertEqual(try d3.sync { try $0.pendingEvents(session: s) }, [], "acknowledged stays acknowledged")
        XCTAssertEqual(try d3.sync { try $0.transferIDs() }, [done, running, paused, next])
    }

    func testIdsAreNotReusedAfterRowsAreDeleted() throws {
        let d = try daemon()
        let s = try d.sync { try $0.openSession(identifier: "com.example.App", configuration: SessionConfigurationUpdate()).id }
        let t = try d.sync { try $0.download(session: s, url: "https://example.com/a", options: DownloadOptions()) }
        try d.sync { try $0.cancel(t) }
        try d.sync { try $0.remove(t) }
        try d.sync { try $0.closeSession(s, cancelTransfers: true) }
        d.stop()
        let rows = try DatabaseQueue(path: dir.path + "/state/ferry.sqlite").read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM sessions")!, try Int.fetchOne(db, sql: "SELECT count(*) FROM transfers")!,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM events")!)
        }
        XCTAssertTrue(rows == (0, 0, 0), "every row is gone: \(rows)")
        let d2 = try daemon()
        let s2 = try d2.sync { try $0.openSession(identifier: "com.example.App", configuration: SessionConfigurationUpdate()).id }
        let t2 = try d2.sync { try $0.download(session: s2, url: "https://example.com/a", options: DownloadOptions()) }
        try d2.sync { try $0.cancel(t2) }
        XCTAssertEqual(s2, s + 1)
        XCTAssertEqual(t2, t + 1)
        XCTAssertEqual(try d2.sync { try $0.pendingEvents(session: s2) }.map(\.serial), [2])
    }

    func testEphemeralSessionLeavesNoTraceInTheDatabase() throws {
        let d = try daemon()
        let persistent = try d.sync { try $0.openSession(identifier: "com.example.Kept", configuration: SessionConfigurationUpdate()).id }
        _ = try d.sync { try $0.download(session: persistent, url: "https://example.com/kept", options: DownloadOptions()) }
        let path = dir.path + "/state/ferry.sqlite"
        func snapshot() -> [Data?] {
            [path, path + "-wal"].map { FileManager.default.contents(atPath: $0) }
        }

        var update = SessionConfigurationUpdate()
        update.persistent = false
        let s = try d.sync { try $0.openSession(identifier: "com.example.Private", configuration: update).id }
        let t = try d.sync { try $0.download(session: s, url: "https://example.com/private.bin", options: DownloadOptions()) }
        d.succeed(t, body: Array("secret".utf8))
        let serial = try XCTUnwrap(try d.sync { try $0.pendingEvents(session: s) }.last?.serial)
        try d.sync { try $0.acknowledgeEvents(session: s, upTo: serial) }
        try d.sync { try $0.remove(t) }
        try d.sync { try $0.closeSession(s, cancelTransfers: true) }
        // Only the id counters may have moved (so that its ids are never handed out
        // again): no trace of the session, its URL, file or events.
        d.releaseDatabase()
        let rows = try DatabaseQueue(path: path).read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM sessions")!, try Int.fetchOne(db, sql: "SELECT count(*) FROM transfers")!,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM events")!)
        }
        XCTAssertTrue(rows == (1, 1, 0), "only the persistent session and its transfer: \(rows)")
        for data in snapshot().compactMap({ $0 }) {
            for trace in ["com.example.Private", "private.bin", "secret"] {
                XCTAssertNil(data.range(of: Data(trace.utf8)), "'\(trace)' is in the database files")
            }
        }

        let d2 = try daemon()
        XCTAssertEqual(d2.sync { $0.sessionIDs }, [persistent], "it vanished with the daemon")
    }
}
