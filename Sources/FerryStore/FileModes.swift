import FerryCore
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The state holds secrets (request headers, proxy and URL credentials) in plain
/// text, so only the user may read it: the directory 0700, the database and every
/// file beside it (`-wal`, `-shm`, `-journal`, copies moved aside) 0600.
enum FileModes {
    static let directoryMode: mode_t = 0o700
    static let fileMode: mode_t = 0o600

    /// Tightens the modes of what exists and creates the database file empty with mode
    /// 0600 when it does not exist yet. SQLite then gives its `-wal` and `-shm` files
    /// the database's mode, and the process umask cannot widen it.
    static func restrict(directory: String, database: String, logger: Logger) {
        if chmod(directory, directoryMode) != 0 {
            logger.warning("cannot make the state directory \(directory) private (mode 0700): \(String(cString: strerror(errno)))")
        }
        let fd = open(database, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, fileMode)
        if fd >= 0 {
            close(fd)
            // A new database's name survives a power cut once its folder is synced
            // (SQLite syncs the folder for its -wal file, not for the file it opens).
            DurableFiles.syncFolder(directory)
        }
        let base = (database as NSString).lastPathComponent
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in names where name.hasPrefix(base) {
            let path = directory + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_mode & 0o777 != fileMode else { continue }
            if chmod(path, fileMode) != 0 {
                logger.warning("cannot make \(path) private (mode 0600): \(String(cString: strerror(errno)))")
            }
        }
    }
}
