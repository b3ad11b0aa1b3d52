import FerryCore
import GRDB
import XCTest
@testable import FerryStore

final class SchemaTests: XCTestCase {
    func testMigrationsOnAnEmptyDatabase() throws {
        let dir = TemporaryDirectory()
        let store = try SQLiteTransferStore(path: dir.database)
        XCTAssertEqual(try store.appliedMigrations(), ["1-initial", "2-settings", "3-session-owner", "4-uploads-segments", "5-part-prefix", "6-prefix-limit", "7-durable-part", "8-schedule", "9-client-exit", "10-groups"])
        XCTAssertEqual(try store.load(), StoreContents(), "nothing stored yet")
        let (mode, sync) = try store.database.read { db in
            (try String.fetchOne(db, sql: "PRAGMA journal_mode"), try Int.fetchOne(db, sql: "PRAGMA synchronous"))
        }
        XCTAssertEqual(mode, "wal")
        XCTAssertEqual(sync, 2, "synchronous = FULL: a commit is synced before write returns (and the core answers)")
        let tables = try store.database.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'grdb%' ORDER BY name")
        }
        XCTAssertEqual(tables, ["counters", "events", "groups", "schedule_windows", "sessions", "settings", "transfers"])
    }

    func testMigrationOfAnExistingDatabaseKeepsItsRows() throws {
        let dir = TemporaryDirectory()
        // A database as the first schema left it, with a session, a transfer and an event.
        do {
            let old = try DatabaseQueue(path: dir.database)
            try StoreSchema.migrator.migrate(old, upTo: "1-initial")
            try old.write { db in
                try db.execute(sql: """
                    INSERT INTO sessions (id, identifier, configuration, closing) VALUES (3, 'com.example.Old', '{"retries":2}', 0);
                    INSERT INTO transfers (id, session_id, kind, url, description, options, destination, directory,
                        server_may_name, part_path, etag, last_modified, bytes_expected, bytes_on_disk, state, waiting_reason,
                        not_before, attempts, retries_used, error_name, error_message, http_status, resumable, sha256,
                        created, started, completed, resource_started, priority, speed_limit)
                    VALUES (7, 3, 'download', 'https://example.com/a', '', '{}', '/tmp/a', '/tmp', 0, '/tmp/a.part',
                        '"e"', NULL, 100, 40, 'paused', '', 0, 1, 0, '', '', 200, 1, '', 1, 2, 0, 2, 0, 0);
                    INSERT INTO events (serial, session_id, transfer_id, kind) VALUES (5, 3, 6, 'cancelled');
                    INSERT INTO counters (name, value) VALUES ('next_session_id', 4), ('next_transfer_id', 8), ('next_serial', 6);
                    """)
            }
        }
        let store = try SQLiteTransferStore(path: dir.database)
        XCTAssertEqual(try store.appliedMigrations(), ["1-initial", "2-settings", "3-session-owner", "4-uploads-segments", "5-part-prefix", "6-prefix-limit", "7-durable-part", "8-schedule", "9-client-exit", "10-groups"])
        let contents = try store.load()
        XCTAssertEqual(contents.sessions.map(\.identifier), ["com.example.Old"])
        XCTAssertEqual(contents.sessions.first?.configuration.retries, 2)
        XCTAssertEqual(contents.sessions.first?.configuration.resourceTimeout, 604_800, "keys missing from old rows read as defaults")
        XCTAssertEqual(contents.transfers.map(\.snapshot.id), [7])
        XCTAssertEqual(contents.transfers.first?.snapshot.state, .paused)
        XCTAssertEqual(contents.transfers.first?.options, DownloadOptions())
        XCTAssertEqual(contents.transfers.first?.partIsPrefix, false, "an old row marks no prefix")
        XCTAssertNil(contents.transfers.first?.prefixLimit, "nor a limit")
        XCTAssertEqual(contents.events[3]?.map(\.serial), [5])
        XCTAssertEqual(contents.counters, StoreCounters(nextSessionID: 4, nextTransferID: 8, nextSerial: 6))
        XCTAssertNil(contents.settings)
        try store.write([.setSettings(StoredSettings(maxConcurrentTransfers: 2))])
        XCTAssertEqual(try store.load().settings?.maxConcurrentTransfers, 2, "the new table works")
    }

    func testReopeningRunsNoMigrationTwice() throws {
        let dir = TemporaryDirectory()
        try SQLiteTransferStore(path: dir.database).write([.setCounters(StoreCounters(nextSessionID: 9))])
        let again = try SQLiteTransferStore(path: dir.database)
        XCTAssertEqual(try again.appliedMigrations(), ["1-initial", "2-settings", "3-session-owner", "4-uploads-segments", "5-part-prefix", "6-prefix-limit", "7-durable-part", "8-schedule", "9-client-exit", "10-groups"])
        XCTAssertEqual(try again.load().counters.nextSessionID, 9)
    }
}
