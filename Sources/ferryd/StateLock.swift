import FerryCore
import Foundation
import Glibc
import Logging

/// One ferryd per state folder. Restoring changes the folder (part files settled,
/// interrupted transfers stored as queued again), so a ferryd started while another
/// uses it — a second activation on the same bus, or a ferryd on another bus with
/// the same home — must not touch it: it waits for the lock on `ferry.lock` (the one
/// leaving after an idle exit lets go when it exits) and gives up after a while.
enum StateLock {
    /// Takes the lock, waiting up to `timeout`; the descriptor stays open (and the
    /// lock held) until the process exits. True when taken, or when there is no folder
    /// to share (ferryd then runs without a state database anyway).
    static func acquire(in directory: String, timeout: TimeInterval, logger: Logger) -> Bool {
        guard (try? DurableFiles.createFolder(directory)) != nil else { return true }
        let path = directory + "/ferry.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            logger.warning("cannot open \(path) (\(String(cString: strerror(errno)))); not guarding the state folder")
            return true
        }
        let deadline = Date().addingTimeInterval(timeout)
        var waiting = false
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, Date() < deadline else {
                logger.critical("another ferryd (\(holder(path))) keeps using the state folder \(directory); exiting without touching it")
                close(fd)
                return false
            }
            if !waiting {
                logger.info("waiting for another ferryd (\(holder(path))) to let go of \(directory)")
                waiting = true
            }
            usleep(20_000)
        }
        // Who holds it, for the message another ferryd would log.
        let pid = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = pid.withCString { pwrite(fd, $0, strlen($0), 0) }
        return true
    }

    private static func holder(_ path: String) -> String {
        let text = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        return text.isEmpty ? "process unknown" : "process \(text)"
    }
}
