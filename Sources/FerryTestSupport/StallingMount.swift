import Foundation

/// A FUSE file system (python3-fusepy, run by the Debian python3) with one file,
/// `file`, whose reads wait until `release()`; its contents are those of a backing
/// file. Looking up any name in the folder `slow` waits as well; once released, files
/// can be made there (their sizes are kept, not their bytes), except those whose
/// name holds `refused`. Throws `Unavailable` where FUSE cannot be mounted (the test
/// then skips).
public final class StallingMount: Sendable {
    public struct Unavailable: Error {
        public let reason: String
    }

    public let mountPoint: String
    public var file: String { mountPoint + "/file" }
    /// Where looking up a name waits until `release()`.
    public var slowFolder: String { mountPoint + "/slow" }
    private let process = Process()
    private let errors = Pipe()
    private let readsSeen: String

    private static let script = #"""
    import errno, os, stat, sys, threading
    from fusepy import FUSE, FuseOSError, Operations

    backing, mountpoint, seen = sys.argv[1], sys.argv[2], sys.argv[3]
    gate = threading.Event()
    MTIME = 1700000000
    made = {}  # files made in /slow: name -> size (their bytes are not kept)

    class Stalling(Operations):
        def getattr(self, path, fh=None):
            if path == "/":
                return dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2, st_mtime=MTIME)
            if path == "/file":
                return dict(st_mode=stat.S_IFREG | 0o644, st_nlink=1,
                            st_size=os.path.getsize(backing), st_mtime=MTIME)
            if path == "/slow":
                return dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2, st_mtime=MTIME)
            if path.startswith("/slow/"):
                # A name looked up in /slow (a part file before it is made) waits too.
                # In a folder of its own: the kernel looks up one name at a time per
                # folder, and `release` makes a file at the top.
                if not gate.is_set():
                    open(seen, "a").close()
                    gate.wait()
                if path in made:
                    return dict(st_mode=stat.S_IFREG | 0o644, st_nlink=1, st_size=made[path],
                                st_mtime=MTIME, st_uid=os.getuid(), st_gid=os.getgid())
                raise FuseOSError(errno.ENOENT)
            if path == "/release" and gate.is_set():
                return dict(st_mode=stat.S_IFREG | 0o644, st_nlink=1, st_size=0, st_mtime=MTIME)
            raise FuseOSError(errno.ENOENT)

        def readdir(self, path, fh):
            if path == "/":
                return [".", "..", "file", "slow"]
            return [".", ".."] + [name[len("/slow/"):] for name in made]

        def open(self, path, flags):
            return 0

        def create(self, path, mode, fi=None):
            if path.startswith("/slow/") and "refused" not in path:
                made[path] = 0  # once released (looking it up came first)
                return 0
            if path != "/release":
                raise FuseOSError(errno.EACCES)
            gate.set()
            return 0

        def truncate(self, path, length, fh=None):
            if path not in made:
                raise FuseOSError(errno.EACCES)
            made[path] = length

        def write(self, path, data, offset, fh):
            if path not in made:
                raise FuseOSError(errno.EACCES)
            made[path] = max(made[path], offset + len(data))
            return len(data)

        def unlink(self, path):
            if made.pop(path, None) is None:
                raise FuseOSError(errno.ENOENT)

        def read(self, path, size, offset, fh):
            if not gate.is_set():
                open(seen, "a").close()
                gate.wait()
            with open(backing, "rb") as f:
                f.seek(offset)
                return f.read(size)

    # hard_remove: an open file is unlinked, not renamed to .fuse_hidden (no rename here).
    FUSE(Stalling(), mountpoint, foreground=True, nothreads=False, direct_io=True, hard_remove=True)
    """#

    public init(backing: String, in directory: URL) throws {
        if let reason = FUSEServer.unavailableReason() { throw Unavailable(reason: reason) }
        mountPoint = directory.appendingPathComponent("mnt").path
        readsSeen = directory.appendingPathComponent("read-seen").path
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let scriptPath = directory.appendingPathComponent("stalling_fs.py").path
        try Self.script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [scriptPath, backing, mountPoint, readsSeen]
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Mounted when the file shows.
        if let reason = FUSEServer.waitUntilMounted(process, errors: errors, {
            var st = stat()
            return stat(file, &st) == 0
        }) {
            unmount()
            throw Unavailable(reason: reason)
        }
    }

    /// Waits (bounded) until a read of `file`, or a look-up in `slowFolder`, is being held.
    public func waitForStalledRead(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while access(readsSeen, F_OK) != 0 {
            guard Date() < deadline else { return false }
            usleep(10_000)
        }
        return true
    }

    /// Lets every read, held or to come, through.
    public func release() {
        guard process.isRunning else { return }
        let fd = open(mountPoint + "/release", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        if fd >= 0 { close(fd) }
    }

    /// Ends the file system and takes the mount away. SIGKILL: libfuse's own handler of
    /// SIGTERM only ends its loop when the main thread is the one that gets it; a killed
    /// server's mount answers every request left with an error.
    public func unmount() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        if ProcFile.contents("/proc/self/mounts")?.contains(" \(mountPoint) ") == true {
            _ = umount2(mountPoint, Int32(MNT_DETACH))
        }
    }
}
