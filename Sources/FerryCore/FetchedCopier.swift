import Dispatch
import Foundation

/// Makes dedupe followers' copies of their leader's finished file, off the core's queue
/// (TransferCoordinator+Dedupe.swift): a copy of a large file where the file system has
/// no reflinks, and its `fdatasync`, take seconds, and the core's queue answers every
/// client meanwhile. ferryd's is a `FetchedCopyQueue`; core tests put in one they hold.
public protocol FetchedCopier: AnyObject, Sendable {
    /// Copies each job's source to its target and flushes the copies together, off the
    /// caller's thread, then calls `done` once (on any thread) with an outcome per job,
    /// in the jobs' order. A job cancelled meanwhile stops as soon as it can.
    func copy(_ jobs: [FetchedCopyJob], done: @escaping @Sendable ([FetchedCopyOutcome]) -> Void)
    /// ferryd stops: every job not done is cancelled; returns once none writes any more.
    func shutdown()
}

/// A dedupe leader's finished file, opened once on the core's queue for every copy of
/// it: the copies read the file the leader verified, even if its name is renamed,
/// replaced or removed before they run. The descriptor is closed with the last job.
///
/// `@unchecked Sendable`: every property is set once in `init`; the descriptor is only
/// read, at explicit offsets (`pread`) or by `FICLONE`, never through its file offset.
public final class FetchedSource: @unchecked Sendable {
    let fd: Int32
    /// Where the file was opened (for messages).
    public let path: String
    /// Its size when the leader completed: a copy of another size failed.
    public let bytes: Int64

    /// Opens the regular file at `path` (never through a link; a sandboxed application's
    /// relative to its folder as opened and checked, `area`).
    /// - Throws: `CoreError.disk`.
    public init(path: String, within area: SandboxArea?, bytes: Int64) throws {
        guard let (folder, name) = SandboxArea.place(of: path, within: area) else {
            throw CoreError.disk("the folder of '\(path)' is no longer where it was")
        }
        defer { SandboxArea.release(folder) }
        // O_NONBLOCK: a FIFO put at the name does not hang the core.
        let fd = openat(folder, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw FetchedCopy.error("cannot open '\(path)'") }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw CoreError.disk("'\(path)' is no longer a plain file")
        }
        self.fd = fd
        self.path = path
        self.bytes = bytes
    }

    deinit { close(fd) }
}

/// One follower's copy (`FetchedCopier`).
public struct FetchedCopyJob: Sendable {
    public let source: FetchedSource
    /// The follower's `.part` file (created, or emptied, with mode 0644; never through a link).
    public let target: String
    /// A sandboxed application's area the target is opened within (nil: unconfined).
    public let targetArea: SandboxArea?
    /// Set by the core when the follower stops waiting for this copy.
    public let cancellation: CopyCancellation

    public init(source: FetchedSource, target: String, targetArea: SandboxArea?, cancellation: CopyCancellation = CopyCancellation()) {
        self.source = source
        self.target = target
        self.targetArea = targetArea
        self.cancellation = cancellation
    }
}

public enum FetchedCopyOutcome: Sendable, Equatable {
    /// The target holds the whole file, flushed (`fdatasync`).
    case copied(bytes: Int64)
    /// The copy failed; the target may hold part of it.
    case failed(CoreError)
    /// Cancelled before it was done; the target may hold part of it, not flushed.
    case cancelled
}

/// Cancels one copy: the core sets it when the follower is paused, cancelled, failed or
/// removed meanwhile; the copy looks at it between writes.
///
/// `@unchecked Sendable`: `cancelled` is guarded by `lock` (set on the core's queue, read
/// by the copy).
public final class CopyCancellation: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false

    public init() {}

    public var isCancelled: Bool { lock.withLock { cancelled } }

    public func cancel() { lock.withLock { cancelled = true } }
}

/// ferryd's `FetchedCopier`: the batches are copied one after another on a serial queue
/// of their own (not a concurrent one: see `FileJobQueues` in FerryEngine on libdispatch's
/// worker pool), each batch flushed together on up to 16 threads (`FetchedCopy.syncAll`).
///
/// `@unchecked Sendable`: `closed` is guarded by `lock`; `queue` never changes.
public final class FetchedCopyQueue: FetchedCopier, @unchecked Sendable {
    private let queue = DispatchQueue(label: "org.ferry.dedupe-copies", qos: .utility)
    private let lock = NSLock()
    private var closed = false

    public init() {}

    public func copy(_ jobs: [FetchedCopyJob], done: @escaping @Sendable ([FetchedCopyOutcome]) -> Void) {
        queue.async { [self] in
            done(FetchedCopy.run(jobs) { job in job.cancellation.isCancelled || isClosed })
        }
    }

    private var isClosed: Bool { lock.withLock { closed } }

    public func shutdown() {
        lock.withLock { closed = true }
        queue.sync {} // the batch under way sees `closed` at its next write and stops
    }
}

/// The copying itself (`FetchedCopyQueue`, and core tests' copiers).
public enum FetchedCopy {
    /// `FICLONE` (`_IOW(0x94, 9, int)`): the target shares the source's extents
    /// (btrfs, XFS, bcachefs…); refused where the file system cannot.
    static let ficlone: UInt = 0x4004_9409

    /// Copies handed to the copier at once, made and then flushed together (open
    /// descriptors held at once).
    public static let batch = 64

    /// Copies every job not cancelled (`stop`), then flushes together those still
    /// wanted; a copy whose size is not its source's fails.
    /// - Returns: an outcome per job, in order.
    public static func run(_ jobs: [FetchedCopyJob], stop: (FetchedCopyJob) -> Bool) -> [FetchedCopyOutcome] {
        var outcomes = [FetchedCopyOutcome](repeating: .cancelled, count: jobs.count)
        var open: [(index: Int, fd: Int32)] = []
        for (i, job) in jobs.enumerated() where !stop(job) {
            do {
                open.append((i, try copyUnsynced(job.source, to: job.target, within: job.targetArea) { stop(job) }))
            } catch is CancellationError {
                outcomes[i] = .cancelled
            } catch let error as CoreError {
                outcomes[i] = .failed(error)
            } catch {
                outcomes[i] = .failed(.disk("\(error)"))
            }
        }
        defer { for copy in open { close(copy.fd) } }
        let wanted = open.filter { !stop(jobs[$0.index]) }
        let flushed = syncAll(wanted.map { ($0.fd, jobs[$0.index].target) })
        for (k, copy) in wanted.enumerated() {
            let job = jobs[copy.index]
            var st = stat()
            let size: Int64 = fstat(copy.fd, &st) == 0 ? Int64(st.st_size) : -1
            if let failure = flushed[k] {
                outcomes[copy.index] = .failed(.disk("cannot flush '\(job.target)': \(String(cString: strerror(failure)))"))
            } else if size != job.source.bytes {
                outcomes[copy.index] = .failed(.disk("the file changed while it was copied (\(size) bytes, not \(job.source.bytes))"))
            } else {
                outcomes[copy.index] = .copied(bytes: size)
            }
        }
        return outcomes
    }

    /// Copies the regular file at `source` to `target` and flushes it, at once.
    /// - Returns: the bytes the target holds.
    static func copy(from source: String, within sourceArea: SandboxArea?, to target: String,
                     within targetArea: SandboxArea?) throws -> Int64 {
        let file = try FetchedSource(path: source, within: sourceArea, bytes: -1)
        let fd = try copyUnsynced(file, to: target, within: targetArea) { false }
        defer { close(fd) }
        if let failure = syncAll([(fd, target)])[0] { throw CoreError.disk("cannot flush '\(target)': \(String(cString: strerror(failure)))") }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw error("cannot read the size of '\(target)'") }
        return Int64(st.st_size)
    }

    /// Copies `source` to `target` (created, or emptied, with mode 0644; never through a
    /// link; marked as ferryd's partial file, `PartFileMark`), as a reflink where the file
    /// system can, else byte by byte, looking at `stopped` between writes. The paths of a
    /// sandboxed application's transfer (`area`) are opened relative to their folders as
    /// opened and checked.
    /// - Returns: the target, open for writing: the caller flushes (`syncAll`) and closes it.
    /// - Throws: `CoreError.disk`, or `CancellationError` when stopped.
    static func copyUnsynced(_ source: FetchedSource, to target: String, within targetArea: SandboxArea?,
                             stopped: () -> Bool) throws -> Int32 {
        guard let (targetFolder, targetName) = SandboxArea.place(of: target, within: targetArea) else {
            throw CoreError.disk("the folder of '\(target)' is no longer inside the application's directory")
        }
        defer { SandboxArea.release(targetFolder) }
        let output = openat(targetFolder, targetName, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw error("cannot create '\(target)'") }
        // Ours: a restart that finds it forgotten (ferryd killed mid-copy) may remove it.
        PartFileMark.set(fd: output)
        if ioctl(output, ficlone, source.fd) != 0 {
            do {
                try copyBytes(from: source.fd, to: output, target: target, stopped: stopped)
            } catch {
                close(output)
                throw error
            }
        }
        return output
    }

    /// Syncs the files (`DurableFiles.syncFile`, as every finished download is) on up to
    /// 16 threads at once (the file system joins concurrent syncs into fewer journal
    /// commits; one after another, a batch of small copies would cost a commit each).
    /// - Returns: for each file, nil when flushed, else the `errno`.
    static func syncAll(_ files: [(fd: Int32, path: String)]) -> [Int32?] {
        guard files.count > 1 else { return files.map(SyncWork.sync) }
        let work = SyncWork(files)
        let group = DispatchGroup()
        for _ in 0..<min(16, files.count) {
            group.enter()
            Thread.detachNewThread {
                work.run()
                group.leave()
            }
        }
        group.wait()
        return work.results
    }

    private static func copyBytes(from input: Int32, to output: Int32, target: String, stopped: () -> Bool) throws {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: off_t = 0
        while true {
            if stopped() { throw CancellationError() }
            let n = buffer.withUnsafeMutableBytes { pread(input, $0.baseAddress, $0.count, offset) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw error("cannot read the finished download") }
            if n == 0 { return }
            offset += off_t(n)
            var done = 0
            while done < n {
                let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { throw error("cannot write '\(target)'") }
                done += w
            }
        }
    }

    static func error(_ what: String) -> CoreError {
        .disk("\(what): \(String(cString: strerror(errno)))")
    }
}

/// The descriptors `FetchedCopy.syncAll` flushes, taken one at a time by its threads.
private final class SyncWork: @unchecked Sendable {
    // `next` and `outcomes` are guarded by `lock`; `files` never changes.
    private let lock = NSLock()
    private let files: [(fd: Int32, path: String)]
    private var next = 0
    private var outcomes: [Int32?]

    init(_ files: [(fd: Int32, path: String)]) {
        self.files = files
        outcomes = Array(repeating: nil, count: files.count)
    }

    static func sync(_ file: (fd: Int32, path: String)) -> Int32? {
        let failure = DurableFiles.syncFile(fd: file.fd, path: file.path)
        return failure == 0 ? nil : failure
    }

    var results: [Int32?] { lock.withLock { outcomes } }

    func run() {
        while let i = take() {
            let failure = Self.sync(files[i])
            lock.withLock { outcomes[i] = failure }
        }
    }

    private func take() -> Int? {
        lock.withLock {
            guard next < files.count else { return nil }
            defer { next += 1 }
            return next
        }
    }
}
