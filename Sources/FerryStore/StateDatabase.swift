import FerryCore
import Foundation
import GRDB
import Logging

/// Finds, opens and if need be recovers the daemon's database,
/// `$XDG_STATE_HOME/ferry/ferry.sqlite` (default `~/.local/state/ferry/ferry.sqlite`).
public enum StateDatabase {
    /// The database file name inside the state directory.
    public static let fileName = "ferry.sqlite"

    /// The state directory (`StateDirectories.root(in:)`): `$XDG_STATE_HOME/ferry`, else
    /// `$HOME/.local/state/ferry`.
    public static func directory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        StateDirectories.root(in: environment)
    }

    /// Opens the database in `directory`, creating the directory (mode 0700) and the
    /// database as needed. A database that cannot be read (not SQLite, damaged, failing
    /// its integrity check, unreadable rows, a schema from a newer Ferry) is renamed to
    /// `ferry.sqlite.corrupt-<UTC time>` (with its `-wal` and `-shm`) and a fresh one is
    /// started; both steps are logged. Never deletes a database.
    /// - Throws: `StoreError` when no database can be used at all (the directory cannot
    ///   be created, the disk is full, the file is locked by another process…); the
    ///   caller decides whether to go on without one.
    public static func open(directory: String, logger: Logger, now: () -> Date = Date.init) throws -> SQLiteTransferStore {
        do {
            try DurableFiles.createFolder(directory)
        } catch {
            throw StoreError("cannot create the state directory \(directory): \((error as NSError).localizedDescription)")
        }
        let path = directory + "/" + fileName
        FileModes.restrict(directory: directory, database: path, logger: logger)
        do {
            return try openAndCheck(path)
        } catch where isDamage(error) {
            let aside = try moveAside(path, now: now())
            FileModes.restrict(directory: directory, database: path, logger: logger)
            logger.error("the state database \(path) cannot be read (\(describe(error))); moved it to \(aside) and started a new one. Transfers and events recorded there are not restored.")
            do {
                return try openAndCheck(path)
            } catch {
                throw StoreError("cannot create a new state database at \(path): \(describe(error))")
            }
        } catch let error as DatabaseError where error.resultCode.primaryResultCode == .SQLITE_BUSY {
            throw StateDatabaseBusy(message: "the state database \(path) is in use by another ferryd (it opens it alone)")
        } catch {
            throw StoreError("cannot open the state database \(path): \(describe(error))")
        }
    }

    /// Opens, migrates and reads everything once, so that damage shows here and not
    /// in the middle of `restore()`.
    private static func openAndCheck(_ path: String) throws -> SQLiteTransferStore {
        let store = try SQLiteTransferStore(path: path)
        _ = try store.load()
        return store
    }

    /// Errors that mean the file's contents are unusable (as opposed to a busy lock,
    /// a full disk or memory pressure, which moving the file aside would not cure and
    /// which must not cost the user their state).
    static func isDamage(_ error: Error) -> Bool {
        if error is StoreError || error is RowDecodingError { return true }
        guard let db = error as? DatabaseError else { return false }
        switch db.resultCode.primaryResultCode {
        case .SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_FULL, .SQLITE_NOMEM, .SQLITE_INTERRUPT, .SQLITE_CANTOPEN,
             .SQLITE_PERM, .SQLITE_READONLY:
            return false
        default:
            return true
        }
    }

    /// Renames the database and its WAL and shared-memory files to
    /// `<path>.corrupt-<time>[-wal|-shm]` (never over an existing file). The WAL must go
    /// too: a fresh database must not replay a damaged one's log.
    static func moveAside(_ path: String, now: Date) throws -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        var aside = path + ".corrupt-" + formatter.string(from: now)
        var n = 2
        let fm = FileManager.default
        while fm.fileExists(atPath: aside) || fm.fileExists(atPath: aside + "-wal") {
            aside = path + ".corrupt-" + formatter.string(from: now) + "-\(n)"
            n += 1
        }
        for suffix in ["", "-wal", "-shm"] where fm.fileExists(atPath: path + suffix) {
            do {
                try fm.moveItem(atPath: path + suffix, toPath: aside + suffix)
            } catch {
                throw StoreError("cannot move the unreadable state database \(path + suffix) aside: \((error as NSError).localizedDescription)")
            }
        }
        return aside
    }

    static func describe(_ error: Error) -> String {
        if let db = error as? DatabaseError { return db.message ?? "\(db.resultCode)" }
        return "\(error)"
    }
}

/// Another process holds the state database (ferryd opens it in exclusive locking
/// mode): a second daemon must not run on without it, or in memory only.
public struct StateDatabaseBusy: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
