import GRDB

/// The database's schema, as versioned migrations. They run at start-up, in order, each
/// once; a released migration is never edited — a change is a new migration.
enum StoreSchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()

        // Sessions, transfers, pending events and the id counters.
        migrator.registerMigration("1-initial") { db in
            try db.execute(sql: """
                CREATE TABLE sessions (
                    id INTEGER PRIMARY KEY,
                    identifier TEXT NOT NULL,
                    configuration TEXT NOT NULL,          -- JSON, see SessionConfigurationRecord
                    closing INTEGER NOT NULL DEFAULT 0
                );
                CREATE TABLE transfers (
                    id INTEGER PRIMARY KEY,
                    session_id INTEGER NOT NULL,
                    kind TEXT NOT NULL,
                    url TEXT NOT NULL,
                    description TEXT NOT NULL,
                    options TEXT NOT NULL,                -- JSON, see DownloadOptionsRecord
                    destination TEXT NOT NULL,
                    directory TEXT NOT NULL,
                    server_may_name INTEGER NOT NULL,     -- the client gave a directory
                    part_path TEXT NOT NULL,
                    etag TEXT,
                    last_modified TEXT,
                    bytes_expected INTEGER NOT NULL,
                    bytes_on_disk INTEGER NOT NULL,       -- a checkpoint; the .part file's size wins
                    state TEXT NOT NULL,
                    waiting_reason TEXT NOT NULL,
                    not_before INTEGER NOT NULL,
                    attempts INTEGER NOT NULL,
                    retries_used INTEGER NOT NULL,
                    error_name TEXT NOT NULL,
                    error_message TEXT NOT NULL,
                    http_status INTEGER NOT NULL,
                    resumable INTEGER NOT NULL,
                    sha256 TEXT NOT NULL,
                    created INTEGER NOT NULL,
                    started INTEGER NOT NULL,
                    completed INTEGER NOT NULL,
                    resource_started INTEGER NOT NULL,
                    priority INTEGER NOT NULL,
                    speed_limit INTEGER NOT NULL,
                    finishing_path TEXT                   -- set while the .part moves into place
                );
                CREATE INDEX transfers_by_session ON transfers(session_id);
                CREATE TABLE events (
                    serial INTEGER PRIMARY KEY,
                    session_id INTEGER NOT NULL,
                    transfer_id INTEGER NOT NULL,
                    kind TEXT NOT NULL,
                    location TEXT,
                    error_name TEXT,
                    error_message TEXT,
                    http_status INTEGER,
                    bytes INTEGER,
                    sha256 TEXT
                );
                CREATE INDEX events_by_session ON events(session_id, serial);
                -- next_session_id, next_transfer_id, next_serial: they only grow.
                CREATE TABLE counters (
                    name TEXT PRIMARY KEY,
                    value INTEGER NOT NULL
                );
                """)
        }

        // The manager's writable properties.
        migrator.registerMigration("2-settings") { db in
            try db.execute(sql: """
                CREATE TABLE settings (
                    name TEXT PRIMARY KEY,
                    value INTEGER NOT NULL
                );
                """)
        }
        // The sandboxed application that owns a session (NULL: opened unconfined).
        migrator.registerMigration("3-session-owner") { db in
            try db.execute(sql: "ALTER TABLE sessions ADD COLUMN owner TEXT")
        }
        // Uploads (their settings as JSON, see UploadSpecRecord, and the server's answer)
        // and the range map of a segmented download ("TOTAL:a-b,c-d", see SegmentMap).
        migrator.registerMigration("4-uploads-segments") { db in
            try db.execute(sql: """
                ALTER TABLE transfers ADD COLUMN upload TEXT;
                ALTER TABLE transfers ADD COLUMN segments TEXT;
                ALTER TABLE transfers ADD COLUMN response BLOB;
                """)
        }
        // A download asked for several connections whose part file one connection wrote
        // (a plain prefix, which a resume after a restart may continue).
        migrator.registerMigration("5-part-prefix") { db in
            try db.execute(sql: "ALTER TABLE transfers ADD COLUMN part_is_prefix INTEGER NOT NULL DEFAULT 0")
        }
        // The most of the part file a download made from resume data may keep (NULL: all).
        migrator.registerMigration("6-prefix-limit") { db in
            try db.execute(sql: "ALTER TABLE transfers ADD COLUMN prefix_limit INTEGER")
        }
        // What of a part file was synced to the disk ("prefix:N" or "ranges:" and a
        // SegmentMap, see DurablePart): trusted after the machine restarted.
        migrator.registerMigration("7-durable-part") { db in
            try db.execute(sql: "ALTER TABLE transfers ADD COLUMN durable_part TEXT")
        }
        // The Manager's Schedule (v1.2): its windows in order.
        migrator.registerMigration("8-schedule") { db in
            try db.execute(sql: """
                CREATE TABLE schedule_windows (
                    position INTEGER PRIMARY KEY,
                    days TEXT NOT NULL,
                    start_time TEXT NOT NULL,
                    end_time TEXT NOT NULL,
                    speed_limit INTEGER NOT NULL,
                    discretionary_only INTEGER NOT NULL
                );
                """)
        }
        // Paused because the session's last client left the bus (`on-client-exit` pause):
        // resumed when a client opens the session again.
        migrator.registerMigration("9-client-exit") { db in
            try db.execute(sql: "ALTER TABLE transfers ADD COLUMN paused_by_client_exit INTEGER NOT NULL DEFAULT 0")
        }
        // Groups (`Session.DownloadGroup`) and the group of each transfer (NULL: none).
        migrator.registerMigration("10-groups") { db in
            try db.execute(sql: """
                CREATE TABLE groups (
                    id INTEGER PRIMARY KEY,
                    session_id INTEGER NOT NULL,
                    description TEXT NOT NULL,
                    all_or_nothing INTEGER NOT NULL,
                    cancel_requested INTEGER NOT NULL,    -- Group.Cancel: it ends cancelled
                    tripped INTEGER NOT NULL,             -- all-or-nothing: a member failed
                    finished_announced INTEGER NOT NULL   -- its Finished was sent (once)
                );
                CREATE INDEX groups_by_session ON groups(session_id);
                ALTER TABLE transfers ADD COLUMN group_id INTEGER;
                """)
        }
        return migrator
    }

    /// The newest migration this build knows.
    static let latest = "10-groups"
}
