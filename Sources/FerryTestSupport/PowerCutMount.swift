import Foundation

/// A LazyFS-style power-cut layer for tests: a FUSE file system (python3-fusepy, run by
/// the Debian python3) passing everything through to a backing folder, that remembers
/// each file's content as of its last `fsync`/`fdatasync` and, on `cut()`, puts every
/// file back to it. The model (as LazyFS's default):
/// - file data is lost unless synced: `fsync` or `fdatasync` of any descriptor of the
///   file marks what it holds then as what survives (SQLite's WAL with
///   `synchronous = FULL` syncs the `-wal` file at each commit);
/// - a file created and never synced keeps its name but is emptied (length 0);
/// - metadata — create, mkdir, rename, link, unlink, extended attributes, mode, times —
///   is durable at once; a folder's `fsync` is accepted and changes nothing (with
///   `strictNames`, names are undone unless their folder was synced since);
/// - after the cut every request fails with EIO until the mount is taken away, so
///   nothing a killed writer still had in flight lands; `remount()` mounts a fresh
///   layer over the rolled-back folder, where everything on disk counts as synced.
/// How it keeps the synced content: per file (by inode, so a rename keeps it), the
/// synced length and, for each 4 KiB block an unsynced write or truncate first
/// replaces, that block as it was; a cut writes those blocks back and truncates to the
/// synced length (`cut(tornSeed:)`: a torn cut keeps a random half of the unsynced
/// blocks instead). fusepy (libfuse 2) implements no `fallocate`, `O_TMPFILE` nor
/// `renameat2` flags: the kernel refuses them and ferryd takes its fallbacks.
/// Throws `Unavailable` where FUSE cannot be mounted (the test then skips).
public final class PowerCutMount {
    public struct Unavailable: Error {
        public let reason: String
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Where the layer is mounted.
    public let mountPoint: String
    /// The folder below it, which keeps the files between mounts.
    public let backing: String
    private let directory: URL
    private let scriptPath: String
    private let control: String
    private let reply: String
    private var process: Process?
    private var errors = Pipe()
    /// How many cuts this mount has made.
    public private(set) var cuts = 0

    static let script = #"""
import errno, os, random, shutil, stat, sys, threading
from fusepy import FUSE, FuseOSError, Operations

# A LazyFS-style passthrough: writes reach the backing folder at once, but every
# file's content as of its last fsync/fdatasync is kept (the 4 KiB blocks an unsynced
# write or truncate replaced, and the synced length); "cut" on the control FIFO puts
# every file back to that content. Model:
# - data: lost unless fsynced (fsync or fdatasync of any descriptor of the file);
# - a file created and never synced keeps its name but is emptied (length 0);
# - metadata (create, mkdir, rename, link, unlink, xattrs, mode, times) is durable at
#   once, as in LazyFS; a folder's fsync is accepted and changes nothing;
# - after a cut every request fails with EIO until the mount is taken away (what the
#   killed writer sends after the power went is lost too).
backing, mountpoint, control, reply = sys.argv[1:5]
# strict: names too are undone unless their folder was synced (fsync of the folder)
# since: a create, link, rename or unlink in a folder not synced after it is taken back.
strict = len(sys.argv) > 5 and sys.argv[5] == "strict"
graveyard = backing.rstrip("/") + ".graveyard"  # unlinked and replaced files, kept for a cut
os.makedirs(graveyard, exist_ok=True)
folders = {}  # folder (as mounted) -> {name: key} as of its last sync, for folders changed since
BS = 4096
lock = threading.RLock()
dead = False
state = {}  # (dev, ino) -> [synced_length, {block: bytes as synced}, {blocks written since}, truncated since]
log = open(reply + ".log", "a", buffering=1)

def real(path):
    return os.path.join(backing, path.lstrip("/"))

def key(st):
    return (st.st_dev, st.st_ino)

def alive():
    if dead:
        raise FuseOSError(errno.EIO)

def entry(fd):
    st = os.fstat(fd)
    e = state.get(key(st))
    if e is None:
        e = state[key(st)] = [st.st_size, {}, set(), False]
    return e

def keep(fd, e, start, end):
    """Keeps the synced bytes of the blocks [start, end) touches before they change."""
    synced, saved = e[0], e[1]
    end = min(end, synced)
    if start >= end:
        return
    for b in range(start // BS, (end - 1) // BS + 1):
        if b not in saved:
            saved[b] = os.pread(fd, BS, b * BS)

def torn_length(fd, e, rng):
    """A torn cut: each 4 KiB block written since the last sync reached the disk, or not,
    at random (the kernel's write-back had taken some pages, in any order); the length is
    the synced one, or up to the end of the last block kept. Blocks not kept go back to
    their synced bytes (zeros past the synced length: a hole). Returns the new length."""
    synced, saved, dirty, _ = e
    size = os.fstat(fd).st_size
    kept = {b for b in dirty if rng.random() < 0.5}
    length = max(synced, min(size, (max(kept) + 1) * BS)) if kept else synced
    for b in sorted(dirty - kept):
        start, end = b * BS, min((b + 1) * BS, length)
        if start >= end:
            continue
        if b in saved:  # its synced bytes were overwritten: back
            os.pwrite(fd, saved[b][:max(0, min(end, synced) - start)], start)
        if end > max(start, synced):  # past the synced length: a hole
            os.pwrite(fd, bytes(end - max(start, synced)), max(start, synced))
    return length

def listing(folder):
    r = {}
    for n in os.listdir(real(folder)):
        try:
            r[n] = key(os.lstat(os.path.join(real(folder), n)))
        except OSError:
            pass
    return r

def changing(*paths):
    """Before a change of names in the folders of `paths`: keeps their synced listing."""
    if strict:
        for p in paths:
            folder = os.path.dirname(p) or "/"
            if folder not in folders:
                folders[folder] = listing(folder)

def bury(path):
    """Keeps the file at `path` (about to lose its name) in the graveyard, for a cut."""
    if strict:
        try:
            st = os.lstat(real(path))
        except OSError:
            return
        if stat.S_ISREG(st.st_mode):
            grave = os.path.join(graveyard, "%d-%d" % key(st))
            if not os.path.exists(grave):
                os.link(real(path), grave)

def undo_names(files_by_inode):
    """Puts every folder changed since its sync back to its synced listing: first takes
    away the names made since, then puts back those lost (from where their files are
    now, the graveyard included)."""
    for folder in sorted(folders, key=lambda f: f.count("/")):
        if not os.path.isdir(real(folder)):
            continue
        want, have = folders[folder], listing(folder)
        for n, k in have.items():
            if want.get(n) != k:
                p = os.path.join(real(folder), n)
                grave = os.path.join(graveyard, "%d-%d" % k)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                elif os.path.isfile(p) and not os.path.exists(grave):
                    os.rename(p, grave)  # it may have another name to take back
                else:
                    os.unlink(p)
                log.write("cut: %s taken back\n" % os.path.relpath(p, backing))
    by_inode = files_by_inode()
    for folder in sorted(folders, key=lambda f: f.count("/")):
        if not os.path.isdir(real(folder)):
            continue
        want, have = folders[folder], listing(folder)
        for n, k in want.items():
            if have.get(n) != k and k in by_inode:
                os.link(by_inode[k], os.path.join(real(folder), n))
                log.write("cut: %s put back\n" % os.path.relpath(os.path.join(real(folder), n), backing))
    folders.clear()

def cut(seed=None):
    global dead
    rng = random.Random(seed) if seed is not None else None
    with lock:
        dead = True
        def files_by_inode():
            r = {}
            for top in ([graveyard] if strict else []) + [backing]:
                for root, dirs, files in os.walk(top):
                    for n in files:
                        p = os.path.join(root, n)
                        try:
                            r[key(os.lstat(p))] = p
                        except OSError:
                            pass
            return r
        if strict:
            undo_names(files_by_inode)
        by_inode = files_by_inode()
        rolled = 0
        for k, e in sorted(state.items()):
            synced, saved = e[0], e[1]
            p = by_inode.get(k)
            if p is None:
                continue  # unlinked since: nothing to roll back
            fd = os.open(p, os.O_RDWR)
            try:
                had = os.fstat(fd).st_size
                if rng is not None and not e[3]:
                    synced = torn_length(fd, e, rng)
                else:
                    for b, data in saved.items():
                        os.pwrite(fd, data, b * BS)
                os.ftruncate(fd, synced)
                os.fsync(fd)
            finally:
                os.close(fd)
            if had != synced or saved:
                rolled += 1
                log.write("cut%s: %s from %d back to %d bytes (%d synced blocks kept aside)\n"
                          % (" (torn)" if rng is not None and not e[3] else "", os.path.relpath(p, backing), had, synced, len(saved)))
        state.clear()
        return rolled

def controller():
    while True:
        with open(control) as f:
            for line in f:
                words = line.split()
                if words and words[0] == "cut":
                    n = cut(int(words[1]) if len(words) > 1 else None)
                    with open(reply + ".tmp", "w") as r:
                        r.write("%d\n" % n)
                    os.rename(reply + ".tmp", reply)

class PowerCut(Operations):
    use_ns = True

    def getattr(self, path, fh=None):
        alive()
        st = os.fstat(fh) if fh is not None else os.lstat(real(path))
        return {"st_mode": st.st_mode, "st_nlink": st.st_nlink, "st_size": st.st_size, "st_uid": st.st_uid,
                "st_gid": st.st_gid, "st_blocks": st.st_blocks, "st_atime": st.st_atime_ns,
                "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def readdir(self, path, fh):
        alive()
        return [".", ".."] + os.listdir(real(path))

    def access(self, path, amode):
        alive()
        if not os.access(real(path), amode):
            raise FuseOSError(errno.EACCES)

    def statfs(self, path):
        alive()
        v = os.statvfs(real(path))
        return {k: getattr(v, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                           "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def mkdir(self, path, mode):
        with lock:
            alive(); changing(path); os.mkdir(real(path), mode)

    def rmdir(self, path):
        with lock:
            alive(); changing(path); os.rmdir(real(path))

    def chmod(self, path, mode):
        alive(); os.chmod(real(path), mode)

    def chown(self, path, uid, gid):
        alive(); os.chown(real(path), uid, gid)

    def utimens(self, path, times=None):
        alive(); os.utime(real(path), ns=times) if times else os.utime(real(path))

    def readlink(self, path):
        alive(); return os.readlink(real(path))

    def symlink(self, target, source):
        with lock:
            alive(); changing(target); os.symlink(source, real(target))

    def link(self, target, source):
        with lock:
            alive(); changing(target); os.link(real(source), real(target))

    def unlink(self, path):
        with lock:
            alive()
            st = os.lstat(real(path))
            changing(path)
            bury(path)
            os.unlink(real(path))
            if st.st_nlink <= 1 and not strict:
                state.pop(key(st), None)

    def rename(self, old, new):
        with lock:
            alive()
            try:
                st = os.lstat(real(new))
            except OSError:
                st = None
            changing(old, new)
            if st is not None:
                bury(new)
            os.rename(real(old), real(new))
            if st is not None and st.st_nlink <= 1 and not stat.S_ISDIR(st.st_mode) and not strict:
                state.pop(key(st), None)

    def getxattr(self, path, name, position=0):
        alive()
        try:
            return os.getxattr(real(path), name, follow_symlinks=False)
        except OSError as e:
            raise FuseOSError(e.errno)

    def setxattr(self, path, name, value, options, position=0):
        alive(); os.setxattr(real(path), name, value, options, follow_symlinks=False)

    def listxattr(self, path):
        alive(); return os.listxattr(real(path), follow_symlinks=False)

    def removexattr(self, path, name):
        alive(); os.removexattr(real(path), name, follow_symlinks=False)

    def open(self, path, flags):
        alive()
        # Read-write (the blocks a write replaces are read first), never O_APPEND (the
        # kernel gives every write its offset) nor O_TRUNC (the kernel truncates
        # through truncate(), where the bytes it drops are kept).
        flags &= ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND | os.O_ACCMODE)
        return os.open(real(path), flags | os.O_RDWR)

    def create(self, path, mode, fi=None):
        with lock:
            alive()
            changing(path)
            fd = os.open(real(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
            state[key(os.fstat(fd))] = [0, {}, set(), False]  # never synced: nothing of it survives a cut
            return fd

    def read(self, path, size, offset, fh):
        alive()
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        with lock:
            alive()
            e = entry(fh)
            keep(fh, e, offset, offset + len(data))
            if data:
                e[2].update(range(offset // BS, (offset + len(data) - 1) // BS + 1))
            return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        with lock:
            alive()
            fd = fh if fh is not None else os.open(real(path), os.O_RDWR)
            try:
                e = entry(fd)
                size = os.fstat(fd).st_size
                keep(fd, e, length, size)
                if length < size:
                    e[3] = True  # shrunk: a torn cut rolls this one back whole
                os.ftruncate(fd, length)
            finally:
                if fh is None:
                    os.close(fd)

    def fsync(self, path, datasync, fh):
        with lock:
            alive()
            if datasync:
                os.fdatasync(fh)
            else:
                os.fsync(fh)
            st = os.fstat(fh)
            state[key(st)] = [st.st_size, {}, set(), False]  # what it holds now is what a cut leaves

    def fsyncdir(self, path, datasync, fh):
        with lock:
            alive()
            folders.pop(path, None)  # its names as they are now survive a cut

    def flush(self, path, fh):
        alive()

    def release(self, path, fh):
        os.close(fh)

threading.Thread(target=controller, daemon=True).start()
# direct_io off (the page cache, and shared mmap for SQLite's -shm, work); writes are
# written through (no writeback cache), so every write() reaches this process at once.
FUSE(PowerCut(), mountpoint, foreground=True, nothreads=False, hard_remove=True, big_writes=True,
     max_write=131072, default_permissions=False)
"""#

    /// Whether names too are undone by a cut unless their folder was synced.
    public let strictNames: Bool

    /// `strictNames`: a stricter model than LazyFS's, where a create, link, rename or
    /// unlink is undone by a cut unless its folder was synced (`fsync` of the folder)
    /// after it, as on a file system that journals nothing (ext2) or a disk that
    /// reorders. (A folder made and never synced goes with everything in it; a folder
    /// renamed or removed comes back empty.)
    public init(in directory: URL, strictNames: Bool = false) throws {
        self.strictNames = strictNames
        if let reason = FUSEServer.unavailableReason() { throw Unavailable(reason: reason) }
        self.directory = directory
        mountPoint = directory.appendingPathComponent("mnt").path
        backing = directory.appendingPathComponent("backing").path
        control = directory.appendingPathComponent("control").path
        reply = directory.appendingPathComponent("cut-reply").path
        scriptPath = directory.appendingPathComponent("powercut_fs.py").path
        for d in [mountPoint, backing] {
            try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        }
        try Self.script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        guard mkfifo(control, 0o600) == 0 || errno == EEXIST else {
            throw Unavailable(reason: "mkfifo failed: \(String(cString: strerror(errno)))")
        }
        try mount()
    }

    /// The layer's log: one line per file a cut changed (its length before and after, how
    /// many synced blocks it put back).
    public var log: String { (try? String(contentsOfFile: reply + ".log", encoding: .utf8)) ?? "" }

    private func mount() throws {
        let p = Process()
        errors = Pipe()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = [scriptPath, backing, mountPoint, control, reply] + (strictNames ? ["strict"] : [])
        p.standardError = errors
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        process = p
        // Mounted when /proc/self/mounts shows it.
        if let reason = FUSEServer.waitUntilMounted(p, errors: errors, { isMounted }) {
            unmount()
            throw Unavailable(reason: reason)
        }
    }

    private var isMounted: Bool {
        ProcFile.contents("/proc/self/mounts")?.contains(" \(mountPoint) fuse") == true
    }

    /// The power cut: every file goes back to its last synced content, and the mount
    /// answers EIO from now on. Kill the writers first (SIGKILL, and wait for them), so
    /// nothing they wrote after the cut can survive it. Returns how many files it
    /// changed (unsynced data dropped).
    /// `tornSeed`: a torn cut instead (seeded): of each file's 4 KiB blocks written
    /// since its last sync a random half reached the disk, in any order, and its length
    /// reaches the last one kept; the others hold their synced bytes, or zeros (a hole).
    /// Stricter than ext4's ordered write-back, which keeps a prefix of appended data,
    /// but what POSIX allows. (A file shrunk since its sync is rolled back whole.)
    @discardableResult
    public func cut(tornSeed: UInt64? = nil, timeout: TimeInterval = 20) throws -> Int {
        guard let p = process, p.isRunning else { throw Failure(description: "the power-cut layer is not running") }
        unlink(reply)
        let fd = open(control, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(description: "cannot open the control FIFO: \(String(cString: strerror(errno)))") }
        let command = Array((tornSeed.map { "cut \($0)\n" } ?? "cut\n").utf8)
        let written = command.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == command.count else { throw Failure(description: "cannot write to the control FIFO") }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let text = try? String(contentsOfFile: reply, encoding: .utf8), let n = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                cuts += 1
                return n
            }
            guard Date() < deadline, p.isRunning else {
                throw Failure(description: "the cut did not finish within \(timeout) s")
            }
            usleep(5_000)
        }
    }

    /// Takes the (cut) mount away and mounts a fresh layer over the same folder: the
    /// machine coming back up.
    public func remount() throws {
        unmount()
        try mount()
    }

    /// Ends the file system and takes the mount away. SIGKILL: libfuse's own handler of
    /// SIGTERM only ends its loop when the main thread is the one that gets it.
    public func unmount() {
        if let p = process, p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
        process = nil
        if isMounted {
            _ = umount2(mountPoint, Int32(MNT_DETACH))
        }
    }
}
