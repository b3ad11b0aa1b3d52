import FerryCore
import XCTest
@testable import FerryStore

/// Every stored field comes back as it went in, through a fresh connection.
final class RoundTripTests: XCTestCase {
    private func fullSession() -> StoredSession {
        var c = SessionConfiguration()
        c.persistent = true
        c.directory = "/home/u/Dl/ünïcode dir"
        c.headers = ["Authorization": "Bearer s3cret", "X-Empty": ""]
        c.maxConnectionsPerHost = 3
        c.requestTimeout = 12.5
        c.resourceTimeout = 3600.25
        c.allowMetered = false
        c.discretionary = true
        c.notify = false
        c.speedLimit = UInt64.max
        c.retries = 9
        c.proxy = "socks5h://127.0.0.1:9050"
        c.applicationID = "com.example.Podcasts"
        c.cookies = false
        return StoredSession(id: 42, identifier: "com.example.Podcasts", configuration: c, isClosing: true)
    }

    private func fullTransfer() -> StoredTransfer {
        var o = DownloadOptions()
        o.destination = "/home/u/Dl/"
        o.headers = ["Cookie": "a=b", "Range-Ignored": "x"]
        o.description = "Episode 1 — “quotes”"
        o.sha256 = String(repeating: "ab", count: 32)
        o.startAfter = 1_700_000_123_456_789
        o.priority = -1
        o.speedLimit = 1 << 40
        o.connections = 4
        o.overwrite = true
        o.start = false
        o.discretionary = true
        o.mirrors = ["https://mirror.example.org/a%20b.mp3", "http://user:pw@other.example.net/x"]
        o.pieces = try! PieceList(length: 1 << 20, hex: [String(repeating: "01", count: 32), String(repeating: "fe", count: 32)])
        let s = TransferSnapshot(
            id: 7, session: 42, kind: .download, url: "https://example.com/a%20b.mp3?x=1", description: o.description,
            destination: "/home/u/Dl/a b.mp3", state: .waiting, waitingReason: "retry", bytesTransferred: 1_234_567,
            bytesExpected: 9_876_543_210, errorName: "org.ferry.Ferry1.Error.Http", errorMessage: "503 Service Unavailable",
            httpStatus: 503, attempts: 4, resumable: true, sha256: String(repeating: "cd", count: 32),
            created: 1_700_000_000_000_001, started: 1_700_000_000_000_002, completed: 1_700_000_000_000_003,
            priority: 1, speedLimit: UInt64.max - 1)
        return StoredTransfer(snapshot: s, options: o, directory: "/home/u/Dl", serverMayName: true,
                              partPath: "/home/u/Dl/old name.mp3.part", etag: "W/\"x\"",
                              lastModified: "Tue, 01 Oct 2024 10:00:00 GMT", notBefore: UInt64(Int64.max) + 5,
                              retriesUsed: 3, resourceStarted: 1_700_000_000_000_004,
                              finishingPath: "/home/u/Dl/a b (1).mp3", partIsPrefix: true, prefixLimit: 4096)
    }

    func testEveryFieldRoundTrips() throws {
        let dir = TemporaryDirectory()
        let session = fullSession()
        var minimal = StoredSession(id: 43, identifier: "b", configuration: SessionConfiguration())
        minimal.configuration.directory = nil
        minimal.configuration.proxy = nil
        let transfer = fullTransfer()
        var bare = fullTransfer()
        bare.snapshot.id = 8
        bare.snapshot.state = .completed
        bare.snapshot.waitingReason = ""
        bare.snapshot.bytesExpected = -1
        bare.etag = nil
        bare.lastModified = nil
        bare.options = DownloadOptions()
        bare.finishingPath = nil
        let finished = PendingEvent(serial: 11, transfer: 7, kind: .finished, location: "/home/u/Dl/a b.mp3",
                                    bytes: 9_876_543_210, sha256: String(repeating: "ef", count: 32))
        let failed = PendingEvent(serial: 12, transfer: 8, kind: .failed, errorName: "org.ferry.Ferry1.Error.Http",
                                  errorMessage: "404 Not Found", httpStatus: 404, bytes: 0)
        let cancelled = PendingEvent(serial: 13, transfer: 99, kind: .cancelled)
        let counters = StoreCounters(nextSessionID: 44, nextTransferID: 100, nextSerial: 14)
        let settings = StoredSettings(maxConcurrentTransfers: 3, speedLimit: UInt64.max, notificationsEnabled: false,
                                      schedule: [ScheduleWindow(days: "Mon-Fri", start: "09:00", end: "17:30", speedLimit: 524_288),
                                                 ScheduleWindow(days: "*", start: "23:00", end: "06:00", discretionaryOnly: true)])

        try SQLiteTransferStore(path: dir.database).write([
            .saveSession(session), .saveSession(minimal), .saveTransfer(transfer), .saveTransfer(bare),
            .appendEvent(42, finished), .appendEvent(42, failed), .appendEvent(43, cancelled),
            .setCounters(counters), .setSettings(settings),
        ])
        let contents = try SQLiteTransferStore(path: dir.database).load()
        XCTAssertEqual(contents.sessions, [session, minimal])
        XCTAssertEqual(contents.transfers.first, transfer)
        XCTAssertEqual(contents.transfers, [transfer, bare])
        XCTAssertEqual(contents.events, [42: [finished, failed], 43: [cancelled]])
        XCTAssertEqual(contents.counters, counters)
        XCTAssertEqual(contents.settings, settings)
    }

    /// An upload's settings and answer, and a segmented download's range map.
    func testUploadSettingsResponseAndRangeMapRoundTrip() throws {
        let dir = TemporaryDirectory()
        var upload = fullTransfer()
        upload.snapshot.kind = .upload
        upload.snapshot.response = Array(0...255) + Array("done".utf8)
        upload.upload = UploadSpec(method: "POST", contentType: "image/jpeg", formField: "picture",
                                   formValues: ["title": "holiday", "empty": ""], responseDestination: "/home/u/answer.json",
                                   size: 5_000_000_000, modificationTime: 1_700_000_000_123_456_789, fromDescriptor: true)
        var segmented = fullTransfer()
        segmented.snapshot.id = 8
        segmented.segments = SegmentMap(total: 10_000_000, done: [0..<1_000_000, 4_000_000..<4_500_000])
        let store = try SQLiteTransferStore(path: dir.database)
        try store.write([.saveTransfer(upload), .saveTransfer(segmented)])
        try store.close()
        let loaded = try SQLiteTransferStore(path: dir.database).load().transfers
        XCTAssertEqual(loaded, [upload, segmented])
        XCTAssertEqual(loaded.last?.segments?.missing, [1_000_000..<4_000_000, 4_500_000..<10_000_000])
    }

    func testEveryStateAndKindRoundTrips() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        var expected: [StoredTransfer] = []
        for (i, state) in TransferState.allCases.enumerated() {
            var t = fullTransfer()
            t.snapshot.id = UInt64(i + 1)
            t.snapshot.state = state
            expected.append(t)
        }
        try store.write(expected.map { .saveTransfer($0) })
        XCTAssertEqual(try store.load().transfers, expected)
    }

    /// Options are coded once per run of equal options: transfers whose options differ,
    /// alternate or repeat each come back with their own, written and read again.
    func testAlternatingOptionsComeBackPerTransfer() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        var expected: [StoredTransfer] = []
        for i in 1...6 {
            var t = fullTransfer()
            t.snapshot.id = UInt64(i)
            if i % 3 == 0 { t.options.destination = "/elsewhere/\(i)" }
            if i == 4 { t.options.headers = [:] }
            expected.append(t)
        }
        for t in expected { try store.write([.saveTransfer(t)]) }
        XCTAssertEqual(try store.load().transfers, expected)
        try store.close()
        XCTAssertEqual(try SQLiteTransferStore(path: dir.database).load().transfers, expected, "read by a fresh connection")
    }

    func testOperationsApplyInOrderAndDeletesCascade() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        let s = fullSession()
        var t = fullTransfer()
        try store.write([.saveSession(s), .saveTransfer(t),
                         .appendEvent(42, PendingEvent(serial: 1, transfer: 7, kind: .finished)),
                         .appendEvent(42, PendingEvent(serial: 2, transfer: 7, kind: .failed)),
                         .appendEvent(42, PendingEvent(serial: 3, transfer: 7, kind: .cancelled))])
        t.snapshot.state = .running
        try store.write([.saveTransfer(t), .acknowledgeEvents(42, upTo: 2)])
        var contents = try store.load()
        XCTAssertEqual(contents.transfers.map(\.snapshot.state), [.running], "replaced, not duplicated")
        XCTAssertEqual(contents.events[42]?.map(\.serial), [3])
        try store.write([.deleteTransfer(7)])
        contents = try store.load()
        XCTAssertEqual(contents.transfers, [])
        XCTAssertEqual(contents.events[42]?.map(\.serial), [3], "a removed transfer's events stay until acknowledged")
        try store.write([.deleteSession(42)])
        contents = try store.load()
        XCTAssertEqual(contents.sessions, [])
        XCTAssertNil(contents.events[42], "a closed session's events go with it")
    }

    func testCountersOnlyGrow() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        try store.write([.setCounters(StoreCounters(nextSessionID: 5, nextTransferID: 50, nextSerial: 500))])
        try store.write([.setCounters(StoreCounters(nextSessionID: 2, nextTransferID: 60, nextSerial: 1))])
        XCTAssertEqual(try store.load().counters, StoreCounters(nextSessionID: 5, nextTransferID: 60, nextSerial: 500))
    }

    /// The store skips counters it already wrote at that value, but only once they are
    /// committed: counters in a transaction that was rolled back are written again.
    func testCountersOfARolledBackWriteAreWrittenAgain() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        let counters = StoreCounters(nextSessionID: 10, nextTransferID: 20, nextSerial: 30)
        try store.database.write { db in try db.execute(sql: "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'no'); END") }
        XCTAssertThrowsError(try store.write([.setCounters(counters), .appendEvent(1, PendingEvent(serial: 1, transfer: 1, kind: .finished))]))
        XCTAssertEqual(try store.load().counters, StoreCounters(), "rolled back")
        try store.database.write { db in try db.execute(sql: "DROP TRIGGER refuse") }
        try store.write([.setCounters(counters)])
        XCTAssertEqual(try store.load().counters, counters)
        try store.write([.setCounters(StoreCounters(nextSessionID: 10, nextTransferID: 21, nextSerial: 30))])
        XCTAssertEqual(try store.load().counters.nextTransferID, 21, "the one that moved is written")
    }

    func testAFailedWriteChangesNothing() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        try store.write([.saveSession(fullSession())])
        // A trigger refuses the second operation: the first is rolled back with it.
        try store.database.write { db in try db.execute(sql: "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'no'); END") }
        XCTAssertThrowsError(try store.write([.deleteSession(42), .appendEvent(42, PendingEvent(serial: 1, transfer: 1, kind: .finished))]))
        XCTAssertEqual(try store.load().sessions.map(\.id), [42], "all or nothing")
    }
}
