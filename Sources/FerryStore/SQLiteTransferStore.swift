import FerryCore
import Foundation
import GRDB

/// The daemon's `TransferStore`: one SQLite database (WAL, `synchronous = FULL`)
/// through a single GRDB `DatabaseQueue`. Every `write` is one transaction, committed
/// and synced to the disk (one fsync of the WAL) before it returns, so a change the
/// core announces survives `kill -9` of the daemon and a power cut alike. (NORMAL
/// synced at checkpoints only: a reply or signal could tell of a commit a power cut
/// then took back.) The core writes once per change, however many transfers it touched,
/// so the sync costs one fsync per change, not one per transfer.
///
/// Use `StateDatabase.open` in the daemon: it creates the directory and moves a corrupt
/// database aside. This initialiser just opens, checks and migrates.
///
/// Not thread-safe by contract: the core calls it on its queue only (GRDB's queue
/// serialises anyway).
public final class SQLiteTransferStore: TransferStore {
    /// The database file.
    public let path: String
    let database: DatabaseQueue
    /// The options column of the last transfer written and read: a batch's transfers
    /// mostly share their options, so most rows skip the JSON coder (and, read back,
    /// share one copy of the options' strings).
    private var optionsCache = OptionsColumnCache()
    /// Each counter's value in the database, as far as this store knows (committed):
    /// every change comes with the counters, and mostly only one of them has moved.
    private var storedCounters: [String: Int64] = [:]

    /// Opens (or creates) the database at `path`, checks it (`PRAGMA quick_check`) and
    /// runs the migrations it lacks.
    /// - Throws: GRDB's `DatabaseError` (e.g. `SQLITE_NOTADB`, `SQLITE_CORRUPT`) or
    ///   `StoreError` (a failed check, or a schema from a newer Ferry).
    public init(path: String) throws {
        self.path = path
        var configuration = Configuration()
        configuration.journalMode = .wal
        // Another ferryd starting at the same moment holds the lock only briefly.
        configuration.busyMode = .timeout(5)
        configuration.label = "ferry.store"
        configuration.prepareDatabase { db in
            // Only this connection ever opens the file (ferryd holds ferry.lock): no
            // fcntl lock and unlock around every transaction, and the WAL's index in
            // memory instead of a shared -shm file. Set before the WAL is first used.
            try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE")
        }
        database = try DatabaseQueue(path: path, configuration: configuration)
        // Durable before acknowledged: every commit is on the disk when `write` returns.
        // Set after opening: GRDB sets NORMAL itself as it turns WAL on (after
        // `prepareDatabase`). The queue has this one connection, so it stays set.
        try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        try database.read { db in
            let check = try String.fetchAll(db, sql: "PRAGMA quick_check")
            guard check == ["ok"] else {
                throw StoreError("the database failed its integrity check: \(check.prefix(3).joined(separator: "; "))")
            }
            if try StoreSchema.migrator.hasBeenSuperseded(db) {
                throw StoreError("the database was written by a newer version of Ferry (its schema is newer than \(StoreSchema.latest))")
            }
        }
        try StoreSchema.migrator.migrate(database)
    }

    /// Closes the connection, which lets go of the file: the connection holds its lock
    /// for as long as it is open (`locking_mode = EXCLUSIVE`), so a second store on the
    /// same file (a test playing a new ferryd) can open it only after this. Nothing is
    /// written here that `write` did not already commit.
    public func close() throws {
        try database.close()
    }

    /// The migrations applied, oldest first (for tests and diagnostics): in the order
    /// they were registered (a name's number is not sorted as text: "10-…" after "9-…").
    public func appliedMigrations() throws -> [String] {
        let migrator = StoreSchema.migrator
        let applied = try database.read { db in try migrator.appliedIdentifiers(db) }
        return migrator.migrations.filter(applied.contains)
    }

    // MARK: - TransferStore

    public func load() throws -> StoreContents {
        var cache = OptionsColumnCache()
        defer {
            optionsCache = cache
            // Reading every row filled SQLite's page cache; the daemon reads it once.
            database.releaseMemory()
        }
        return try database.read { db in
            var contents = StoreContents()
            for row in try Row.fetchAll(db, sql: "SELECT * FROM sessions ORDER BY id") {
                contents.sessions.append(try Self.session(row))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM transfers ORDER BY id") {
                contents.transfers.append(try Self.transfer(row, options: &cache))
            }
            for row in try Row.fetchAll(db, sql: "SELECT * FROM events ORDER BY serial") {
                let session = UInt64(stored: try row.value("session_id"))
                contents.events[session, default: []].append(try Self.event(row))
            }
            var counters = StoreCounters()
            for row in try Row.fetchAll(db, sql: "SELECT name, value FROM counters") {
                let value = UInt64(stored: try row.value("value"))
                switch try row.value("name") as String {
                case "next_session_id": counters.nextSessionID = value
                case "next_transfer_id": counters.nextTransferID = value
                case "next_serial": counters.nextSerial = value
                case "next_group_id": counters.nextGroupID = value
                default: break
                }
            }
            contents.counters = counters
            for row in try Row.fetchAll(db, sql: "SELECT * FROM groups ORDER BY id") {
                contents.groups.append(StoredGroup(
                    id: UInt64(stored: try row.value("id")), session: UInt64(stored: try row.value("session_id")),
                    description: try row.value("description"), allOrNothing: try row.value("all_or_nothing"),
                    cancelRequested: try row.value("cancel_requested"), tripped: try row.value("tripped"),
                    finishedAnnounced: try row.value("finished_announced")))
            }
            let settings = try Row.fetchAll(db, sql: "SELECT name, value FROM settings")
            if !settings.isEmpty {
                var s = StoredSettings()
                for row in settings {
                    let value: Int64 = try row.value("value")
                    switch try row.value("name") as String {
                    case "max_concurrent_transfers": s.maxConcurrentTransfers = UInt32(clamping: value)
                    case "speed_limit": s.speedLimit = UInt64(stored: value)
                    case "notifications_enabled": s.notificationsEnabled = value != 0
                    default: break
                    }
                }
                for row in try Row.fetchAll(db, sql: """
                    SELECT days, start_time, end_time, speed_limit, discretionary_only FROM schedule_windows ORDER BY position
                    """) {
                    s.schedule.append(ScheduleWindow(days: try row.value("days"), start: try row.value("start_time"),
                                                     end: try row.value("end_time"),
                                                     speedLimit: UInt64(stored: try row.value("speed_limit")),
                                                     discretionaryOnly: (try row.value("discretionary_only") as Int64) != 0))
                }
                contents.settings = s
            }
            return contents
        }
    }

    public func write(_ operations: [StoreOperation]) throws {
        guard !operations.isEmpty else { return }
        var cache = optionsCache
        defer { optionsCache = cache }
        var counters = storedCounters
        try database.write { db in
            for operation in operations { try Self.apply(operation, db, options: &cache, counters: &counters) }
        }
        // Only once committed: a transaction rolled back leaves the database as it was.
        storedCounters = counters
    }

    // MARK: - Rows

    /// Runs a statement compiled once per connection (GRDB's statement cache): the
    /// same few statements run for every change, and parsing them each time cost more
    /// than running them.
    private static func run(_ db: Database, sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try db.cachedStatement(sql: sql).execute(arguments: arguments)
    }

    private static func apply(_ operation: StoreOperation, _ db: Database, options: inout OptionsColumnCache,
                              counters: inout [String: Int64]) throws {
        switch operation {
        case .saveSession(let s):
            try Self.run(db, sql: """
                INSERT OR REPLACE INTO sessions (id, identifier, configuration, closing, owner) VALUES (?, ?, ?, ?, ?)
                """, arguments: [s.id.stored, s.identifier, try JSONColumn.encode(SessionConfigurationRecord(s.configuration)),
                                 s.isClosing, s.owner])
        case .deleteSession(let id):
            try Self.run(db, sql: "DELETE FROM sessions WHERE id = ?", arguments: [id.stored])
            try Self.run(db, sql: "DELETE FROM transfers WHERE session_id = ?", arguments: [id.stored])
            try Self.run(db, sql: "DELETE FROM events WHERE session_id = ?", arguments: [id.stored])
            try Self.run(db, sql: "DELETE FROM groups WHERE session_id = ?", arguments: [id.stored])
        case .saveTransfer(let t):
            try saveTransfer(t, db, options: &options)
        case .deleteTransfer(let id):
            try Self.run(db, sql: "DELETE FROM transfers WHERE id = ?", arguments: [id.stored])
        case .appendEvent(let session, let e):
            try Self.run(db, sql: """
                INSERT OR REPLACE INTO events
                    (serial, session_id, transfer_id, kind, location, error_name, error_message, http_status, bytes, sha256)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [e.serial.stored, session.stored, e.transfer.stored, e.kind.rawValue, e.location,
                                 e.errorName, e.errorMessage, e.httpStatus.map { Int64($0) }, e.bytes, e.sha256])
        case .acknowledgeEvents(let session, let serial):
            try Self.run(db, sql: "DELETE FROM events WHERE session_id = ? AND serial <= ?",
                           arguments: [session.stored, Int64(clamping: serial)])
        case .setCounters(let c):
            // max(): an id handed out is never handed out again, whatever the caller says.
            // A counter already stored at this value or above is left alone: the
            // database keeps the greatest value written.
            for (name, value) in [("next_session_id", c.nextSessionID), ("next_transfer_id", c.nextTransferID),
                                  ("next_serial", c.nextSerial), ("next_group_id", c.nextGroupID)] {
                if let known = counters[name], UInt64(stored: known) >= value { continue }
                try Self.run(db, sql: """
                    INSERT INTO counters (name, value) VALUES (?, ?)
                    ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)
                    """, arguments: [name, value.stored])
                counters[name] = value.stored
            }
        case .setSettings(let s):
            for (name, value) in [("max_concurrent_transfers", Int64(s.maxConcurrentTransfers)),
                                  ("speed_limit", s.speedLimit.stored),
                                  ("notifications_enabled", Int64(s.notificationsEnabled ? 1 : 0))] {
                try Self.run(db, sql: "INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)", arguments: [name, value])
            }
            try Self.run(db, sql: "DELETE FROM schedule_windows")
            for (position, w) in s.schedule.enumerated() {
                try Self.run(db, sql: """
                    INSERT INTO schedule_windows (position, days, start_time, end_time, speed_limit, discretionary_only)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """, arguments: [Int64(position), w.days, w.start, w.end, w.speedLimit.stored, Int64(w.discretionaryOnly ? 1 : 0)])
            }
        case .saveGroup(let g):
            try Self.run(db, sql: """
                INSERT OR REPLACE INTO groups (id, session_id, description, all_or_nothing, cancel_requested, tripped,
                                               finished_announced)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """, arguments: [g.id.stored, g.session.stored, g.description, g.allOrNothing, g.cancelRequested,
                                 g.tripped, g.finishedAnnounced])
        case .deleteGroup(let id):
            try Self.run(db, sql: "DELETE FROM groups WHERE id = ?", arguments: [id.stored])
        }
    }

    private static func saveTransfer(_ t: StoredTransfer, _ db: Database, options: inout OptionsColumnCache) throws {
        let s = t.snapshot
        // Updated in place when the row exists (INSERT OR REPLACE deleted and inserted
        // it again, rewriting the session index's page in every transaction); a transfer
        // never changes session.
        try Self.run(db, sql: """
            INSERT INTO transfers (
                id, session_id, kind, url, description, options, destination, directory, server_may_name,
                part_path, etag, last_modified, bytes_expected, bytes_on_disk, state, waiting_reason, not_before,
                attempts, retries_used, error_name, error_message, http_status, resumable, sha256,
                created, started, completed, resource_started, priority, speed_limit, finishing_path,
                upload, segments, response, part_is_prefix, prefix_limit, durable_part, paused_by_client_exit, group_id
            )
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET
                kind = excluded.kind, url = excluded.url, description = excluded.description,
                options = excluded.options, destination = excluded.destination, directory = excluded.directory,
                server_may_name = excluded.server_may_name, part_path = excluded.part_path, etag = excluded.etag,
                last_modified = excluded.last_modified, bytes_expected = excluded.bytes_expected, bytes_on_disk = excluded.bytes_on_disk,
                state = excluded.state, waiting_reason = excluded.waiting_reason, not_before = excluded.not_before,
                attempts = excluded.attempts, retries_used = excluded.retries_used, error_name = excluded.error_name,
                error_message = excluded.error_message, http_status = excluded.http_status, resumable = excluded.resumable,
                sha256 = excluded.sha256, created = excluded.created, started = excluded.started,
                completed = excluded.completed, resource_started = excluded.resource_started, priority = excluded.priority,
                speed_limit = excluded.speed_limit, finishing_path = excluded.finishing_path, upload = excluded.upload,
                segments = excluded.segments, response = excluded.response, part_is_prefix = excluded.part_is_prefix,
                prefix_limit = excluded.prefix_limit, durable_part = excluded.durable_part,
                paused_by_client_exit = excluded.paused_by_client_exit, group_id = excluded.group_id
            """, arguments: [
                s.id.stored, s.session.stored, s.kind.rawValue, s.url, s.description,
                try options.encode(t.options), s.destination, t.directory, t.serverMayName,
                t.partPath, t.etag, t.lastModified, s.bytesExpected, s.bytesTransferred, s.state.rawValue,
                s.waitingReason, t.notBefore.stored, Int64(s.attempts), Int64(t.retriesUsed), s.errorName,
                s.errorMessage, Int64(s.httpStatus), s.resumable, s.sha256, s.created.stored, s.started.stored,
                s.completed.stored, t.resourceStarted.stored, Int64(s.priority), s.speedLimit.stored,
                t.finishingPath, try t.upload.map { try JSONColumn.encode(UploadSpecRecord($0)) },
                t.segments?.encoded, s.response.isEmpty ? nil : Data(s.response), t.partIsPrefix,
                t.prefixLimit, t.durablePart?.encoded, t.pausedByClientExit, s.group == 0 ? nil : s.group.stored,
            ])
    }

    private static func session(_ row: Row) throws -> StoredSession {
        let id = UInt64(stored: try row.value("id"))
        let config = try JSONColumn.decode(SessionConfigurationRecord.self, try row.value("configuration"),
                                           what: "configuration of session \(id)")
        return StoredSession(id: id, identifier: try row.value("identifier"), configuration: config.configuration,
                             isClosing: try row.value("closing"), owner: try row.value("owner"))
    }

    private static func transfer(_ row: Row, options cache: inout OptionsColumnCache) throws -> StoredTransfer {
        let id = UInt64(stored: try row.value("id"))
        let stateName: String = try row.value("state"), kindName: String = try row.value("kind")
        guard let state = TransferState(rawValue: stateName) else {
            throw StoreError("transfer \(id) has an unknown state '\(stateName)'")
        }
        guard let kind = TransferKind(rawValue: kindName) else {
            throw StoreError("transfer \(id) has an unknown kind '\(kindName)'")
        }
        let options = try cache.decode(try row.value("options"), transfer: id)
        let snapshot = TransferSnapshot(
            id: id, session: UInt64(stored: try row.value("session_id")), kind: kind, url: try row.value("url"),
            description: try row.value("description"), destination: try row.value("destination"), state: state,
            waitingReason: try row.value("waiting_reason"), bytesTransferred: try row.value("bytes_on_disk"),
            bytesExpected: try row.value("bytes_expected"), errorName: try row.value("error_name"),
            errorMessage: try row.value("error_message"),
            httpStatus: UInt32(clamping: try row.value("http_status") as Int64),
            attempts: UInt32(clamping: try row.value("attempts") as Int64), resumable: try row.value("resumable"),
            sha256: try row.value("sha256"), created: UInt64(stored: try row.value("created")),
            started: UInt64(stored: try row.value("started")), completed: UInt64(stored: try row.value("completed")),
            priority: Int32(clamping: try row.value("priority") as Int64),
            speedLimit: UInt64(stored: try row.value("speed_limit")))
        var withResponse = snapshot
        if let group = row["group_id"] as Int64? { withResponse.group = UInt64(stored: group) }
        if let response = row["response"] as Data? { withResponse.response = [UInt8](response) }
        let upload = try (row["upload"] as String?).map {
            try JSONColumn.decode(UploadSpecRecord.self, $0, what: "upload settings of transfer \(id)").spec
        }
        // A map that does not parse is dropped: the download then continues from its prefix.
        let segments = (row["segments"] as String?).flatMap { SegmentMap(encoded: $0) }
        return StoredTransfer(
            snapshot: withResponse, options: options, directory: try row.value("directory"),
            serverMayName: try row.value("server_may_name"), partPath: try row.value("part_path"),
            etag: try row.value("etag"), lastModified: try row.value("last_modified"),
            notBefore: UInt64(stored: try row.value("not_before")),
            retriesUsed: UInt32(clamping: try row.value("retries_used") as Int64),
            resourceStarted: UInt64(stored: try row.value("resource_started")),
            finishingPath: try row.value("finishing_path"), upload: upload, segments: segments,
            partIsPrefix: try row.value("part_is_prefix"), prefixLimit: try row.value("prefix_limit"),
            durablePart: (row["durable_part"] as String?).flatMap { DurablePart(encoded: $0) },
            pausedByClientExit: try row.value("paused_by_client_exit"))
    }

    private static func event(_ row: Row) throws -> PendingEvent {
        let serial = UInt64(stored: try row.value("serial"))
        let kindName: String = try row.value("kind")
        guard let kind = CompletionKind(rawValue: kindName) else {
            throw StoreError("event \(serial) has an unknown kind '\(kindName)'")
        }
        let status: Int64? = try row.value("http_status")
        return PendingEvent(serial: serial, transfer: UInt64(stored: try row.value("transfer_id")), kind: kind,
                            location: try row.value("location"), errorName: try row.value("error_name"),
                            errorMessage: try row.value("error_message"),
                            httpStatus: status.map { UInt32(clamping: $0) }, bytes: try row.value("bytes"),
                            sha256: try row.value("sha256"))
    }
}

extension Row {
    /// The column's value; throws (never traps) on NULL or a wrong type: a damaged
    /// row makes the database unreadable, and it is moved aside.
    func value<T: DatabaseValueConvertible>(_ column: String) throws -> T {
        try decode(forColumn: column)
    }
}

/// The last options encoded and decoded, with their JSON text.
struct OptionsColumnCache {
    private var encoded: (options: DownloadOptions, text: String)?
    private var decoded: (text: String, options: DownloadOptions)?

    mutating func encode(_ options: DownloadOptions) throws -> String {
        if let encoded, encoded.options == options { return encoded.text }
        let text = try JSONColumn.encode(DownloadOptionsRecord(options))
        encoded = (options, text)
        return text
    }

    mutating func decode(_ text: String, transfer id: UInt64) throws -> DownloadOptions {
        if let decoded, decoded.text == text { return decoded.options }
        let options = try JSONColumn.decode(DownloadOptionsRecord.self, text, what: "options of transfer \(id)").options
        decoded = (text, options)
        return options
    }
}
