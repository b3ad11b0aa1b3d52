import FerryCore
import FerryTestSupport
import Foundation
import GRDB
import XCTest
@testable import FerryStore

/// A database that cannot be read is moved aside with a clear log line, never wiped;
/// the daemon starts afresh.
final class RecoveryTests: XCTestCase {
    private let fixedNow = Date(timeIntervalSince1970: 1_763_000_000) // 2025-11-13T02:13:20Z

    /// - Parameter exact: the old file is kept byte for byte (SQLite may have written to
    ///   a damaged database's file while it tried to open it; never to a non-database).
    private func assertMovedAside(_ dir: TemporaryDirectory, original: Data, exact: Bool = true, log: LogCapture, opened: SQLiteTransferStore,
                                  file: StaticString = #filePath, line: UInt = #line) throws {
        let aside = dir.database + ".corrupt-20251113T021320Z"
        let kept = FileManager.default.contents(atPath: aside)
        if exact {
            XCTAssertEqual(kept, original, "the old file is kept, byte for byte", file: file, line: line)
        } else {
            XCTAssertGreaterThanOrEqual(kept?.count ?? 0, original.count, "the old file is kept", file: file, line: line)
            XCTAssertEqual(kept?.prefix(16), original.prefix(16), file: file, line: line)
        }
        let errors = log.messages.filter { $0.level == .error }.map(\.text)
        XCTAssertEqual(errors.count, 1, "\(errors)", file: file, line: line)
        XCTAssertTrue(errors.first?.contains(dir.database) ?? false, file: file, line: line)
        XCTAssertTrue(errors.first?.contains("moved it to \(aside)") ?? false, errors.first ?? "", file: file, line: line)
        XCTAssertEqual(opened.path, dir.database, file: file, line: line)
        XCTAssertEqual(try opened.load(), StoreContents(), "a fresh database", file: file, line: line)
    }

    /// A database another connection holds (a second ferryd where the folder's lock
    /// could not guard it) is "busy": never moved aside, and a named error so that the
    /// daemon stops instead of running on without its state. (Waits the 5 s busy timeout.)
    /// A new database's name is made durable: its folder is synced once it is created
    /// (and not again when it is opened later).
    func testANewDatabasesFolderIsSynced() throws {
        let dir = TemporaryDirectory()
        var folders: [String] = []
        let lock = NSLock()
        DurableFiles.observe { step in
            if case .syncFolder(let folder) = step { lock.withLock { folders.append(folder) } }
        }
        defer { DurableFiles.observe(nil) }
        let store = try StateDatabase.open(directory: dir.path, logger: LogCapture().logger)
        try store.close()
        XCTAssertEqual(lock.withLock { folders }, [dir.path])
        let again = try StateDatabase.open(directory: dir.path, logger: LogCapture().logger)
        try again.close()
        XCTAssertEqual(lock.withLock { folders }, [dir.path], "an existing database: no sync")
    }

    func testADatabaseInUseIsNotMovedAsideButRefused() throws {
        let dir = TemporaryDirectory()
        let first = try StateDatabase.open(directory: dir.path, logger: LogCapture().logger)
        try first.write([.setCounters(StoreCounters(nextSessionID: 7))])
        let log = LogCapture()
        XCTAssertThrowsError(try StateDatabase.open(directory: dir.path, logger: log.logger)) { error in
            XCTAssertTrue(error is StateDatabaseBusy, "\(error)")
            XCTAssertTrue("\(error)".contains("another ferryd"), "\(error)")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        XCTAssertFalse(names.contains { $0.contains("corrupt") }, "nothing moved aside: \(names)")
        XCTAssertEqual(try first.load().counters.nextSessionID, 7, "the first one carries on")
    }

    func testGarbageFileIsMovedAside() throws {
        let dir = TemporaryDirectory()
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        FileManager.default.createFile(atPath: dir.database, contents: garbage)
        let log = LogCapture()
        let store = try StateDatabase.open(directory: dir.path, logger: log.logger, now: { self.fixedNow })
        try assertMovedAside(dir, original: garbage, log: log, opened: store)
        try store.write([.setCounters(StoreCounters(nextSessionID: 2))])
        XCTAssertEqual(try store.load().counters.nextSessionID, 2, "the new database works")
    }

    func testDamagedPagesAreMovedAside() throws {
        let dir = TemporaryDirectory()
        do {
            let store = try SQLiteTransferStore(path: dir.database)
            var ops: [StoreOperation] = []
            for i in 1...300 {
                ops.append(.saveSession(StoredSession(id: UInt64(i), identifier: "com.example.S\(i)",
                                                      configuration: SessionConfiguration())))
            }
            try store.write(ops)
            try store.database.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        }
        var bytes = try XCTUnwrap(FileManager.default.contents(atPath: dir.database))
        XCTAssertGreaterThan(bytes.count, 3 * 4096)
        // Overwrite the middle pages (the sessions table's b-tree) with noise.
        for i in 4096..<(bytes.count - 4096) { bytes[i] = UInt8(truncatingIfNeeded: i &* 131) }
        FileManager.default.createFile(atPath: dir.database, contents: bytes)
        let log = LogCapture()
        let store = try StateDatabase.open(directory: dir.path, logger: log.logger, now: { self.fixedNow })
        try assertMovedAside(dir, original: bytes, exact: false, log: log, opened: store)
    }

    func testMovingAsideTakesTheLogAndSharedMemoryFiles() throws {
        // A fresh database must not replay the old one's write-ahead log.
        let dir = TemporaryDirectory()
        for (suffix, text) in [("", "db"), ("-wal", "wal"), ("-shm", "shm")] {
            FileManager.default.createFile(atPath: dir.database + suffix, contents: Data(text.utf8))
        }
        let aside = try StateDatabase.moveAside(dir.database, now: fixedNow)
        XCTAssertEqual(aside, dir.database + ".corrupt-20251113T021320Z")
        XCTAssertEqual(dir.files(), ["ferry.sqlite.corrupt-20251113T021320Z", "ferry.sqlite.corrupt-20251113T021320Z-shm",
                                     "ferry.sqlite.corrupt-20251113T021320Z-wal"])
        XCTAssertEqual(FileManager.default.contents(atPath: aside + "-wal"), Data("wal".utf8))
    }

    func testUnreadableRowIsMovedAside() throws {
        let dir = TemporaryDirectory()
        do {
            let store = try SQLiteTransferStore(path: dir.database)
            try store.database.write { db in
                try db.execute(sql: "INSERT INTO sessions (id, identifier, configuration, closing) VALUES (1, 'a', 'not json', 0)")
            }
        }
        let original = try XCTUnwrap(FileManager.default.contents(atPath: dir.database))
        let log = LogCapture()
        _ = try StateDatabase.open(directory: dir.path, logger: log.logger, now: { self.fixedNow })
        // The WAL was folded into the file when the connection closed, so the moved
        // file holds the row.
        XCTAssertNotNil(FileManager.default.contents(atPath: dir.database + ".corrupt-20251113T021320Z"))
        XCTAssertTrue(log.messages.contains { $0.text.contains("configuration of session 1") }, "\(log.messages)")
        _ = original
        XCTAssertEqual(try SQLiteTransferStore(path: dir.database).load(), StoreContents())
    }

    func testDatabaseFromANewerFerryIsMovedAsideNotMisread() throws {
        let dir = TemporaryDirectory()
        do {
            let store = try SQLiteTransferStore(path: dir.database)
            try store.database.write { db in try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('3-from-the-future')") }
        }
        let log = LogCapture()
        _ = try StateDatabase.open(directory: dir.path, logger: log.logger, now: { self.fixedNow })
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir.database + ".corrupt-20251113T021320Z"))
        XCTAssertTrue(log.messages.contains { $0.text.contains("newer version of Ferry") }, "\(log.messages)")
    }

    func testAsideNameIsNeverReused() throws {
        let dir = TemporaryDirectory()
        let log = LogCapture()
        for round in 1...2 {
            FileManager.default.createFile(atPath: dir.database, contents: Data("garbage \(round)".utf8 + Data(count: 4096)))
            _ = try StateDatabase.open(directory: dir.path, logger: log.logger, now: { self.fixedNow })
        }
        XCTAssertEqual(dir.files().filter { $0.contains("corrupt") },
                       ["ferry.sqlite.corrupt-20251113T021320Z", "ferry.sqlite.corrupt-20251113T021320Z-2"])
    }

    func testHealthyDatabaseIsLeftAlone() throws {
        let dir = TemporaryDirectory()
        let log = LogCapture()
        try StateDatabase.open(directory: dir.path, logger: log.logger).write([.setCounters(StoreCounters(nextSerial: 77))])
        let store = try StateDatabase.open(directory: dir.path, logger: log.logger)
        XCTAssertEqual(try store.load().counters.nextSerial, 77)
        XCTAssertFalse(dir.files().contains { $0.contains("corrupt") })
        XCTAssertTrue(log.messages.filter { $0.level >= .warning }.isEmpty, "\(log.messages)")
    }

    // MARK: - The state directory

    func testStateDirectoryIsCreatedPrivate() throws {
        let dir = TemporaryDirectory()
        let state = dir.path + "/a/b/ferry"
        let store = try StateDatabase.open(directory: state, logger: LogCapture().logger)
        XCTAssertEqual(store.path, state + "/ferry.sqlite")
        let mode = try FileManager.default.attributesOfItem(atPath: state)[.posixPermissions] as? NSNumber
        XCTAssertEqual(mode?.intValue, 0o700)
    }

    func testStateDirectoryThatCannotBeCreatedIsAClearError() throws {
        let dir = TemporaryDirectory()
        FileManager.default.createFile(atPath: dir.path + "/file", contents: Data())
        XCTAssertThrowsError(try StateDatabase.open(directory: dir.path + "/file/ferry", logger: LogCapture().logger)) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("cannot create the state directory \(dir.path)/file/ferry"), message)
        }
    }

    func testDirectoryFollowsXDGStateHome() {
        XCTAssertEqual(StateDatabase.directory(environment: ["XDG_STATE_HOME": "/x/state", "HOME": "/home/u"]), "/x/state/ferry")
        XCTAssertEqual(StateDatabase.directory(environment: ["XDG_STATE_HOME": "/x/state/", "HOME": "/home/u"]), "/x/state/ferry")
        XCTAssertEqual(StateDatabase.directory(environment: ["XDG_STATE_HOME": "relative", "HOME": "/home/u"]),
                       "/home/u/.local/state/ferry", "a relative XDG_STATE_HOME is ignored")
        XCTAssertEqual(StateDatabase.directory(environment: ["HOME": "/home/u"]), "/home/u/.local/state/ferry")
    }
}
