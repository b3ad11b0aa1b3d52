import Dispatch
import Foundation

/// Dedupe (contract v1.2): a download whose fetch (`FetchKey`) matches a queued or
/// running download of the same caller follows it instead of fetching again.
///
/// - A follower holds no connection and never enters the queue; its state and progress
///   mirror its leader's (`mirror`). When the leader's file is complete, verified and in
///   place, each follower gets its own copy (a reflink where the file system can, else
///   a copy written to its `.part`, flushed, then renamed as any download is) and its
///   own events.
/// - The leader fails for a reason of the fetch (network, HTTP status, TLS, timeout,
///   checksum): its followers fail with the same error (a fetch of their own would
///   fail the same way, after its own retries). It fails for a reason of its own file
///   (`Disk`), or is paused or cancelled by its client: the oldest follower takes the
///   fetch over (from byte 0, into its own `.part`) and the others follow it.
/// - A follower paused or cancelled stops following: the leader goes on. Resumed, it
///   fetches on its own.
/// - Memory only: after a restart every follower is a plain download again and fetches
///   on its own (nothing is lost; the store needs no new column).
extension TransferCoordinator {
    /// What makes `t` the same fetch as another; nil when it may not be merged
    /// (`dedupe` false, an upload, a `destination-fd` download, a `metalink` download:
    /// its URL is the document's, not the file's). Mirrors and pieces are part of the
    /// key: a download with pieces never follows one whose pieces were not checked.
    func fetchKey(_ t: TransferRecord) -> FetchKey? {
        guard !t.isUpload, t.options.dedupe, !isDescriptorDownload(t), let s = sessions[t.session] else { return nil }
        guard t.options.metalink == nil else { return nil }
        let config = s.configuration
        let headers = HeaderFields.merge(session: config.headers, transfer: t.options.headers)
            .map { $0.name.lowercased() + ":" + $0.value }.sorted()
        return FetchKey(caller: s.owner, url: t.snapshot.url, headers: headers, sha256: t.options.sha256?.lowercased(),
                        proxy: config.proxy, cookieJar: config.cookies ? s.id : nil,
                        discretionary: t.options.discretionary ?? config.discretionary,
                        mirrors: t.options.mirrors, pieces: t.options.pieces)
    }

    /// A new download (`add`, before it is indexed): it follows the queued or running
    /// leader of its fetch, or leads it. Only a download that starts now from nothing
    /// joins (not one created paused, waiting for `start-after`, or continuing a partial
    /// file from resume data).
    func joinFetch(_ t: TransferRecord) {
        guard t.state == .queued, t.snapshot.bytesTransferred == 0, t.segments == nil, let key = fetchKey(t) else { return }
        if let id = dedupe.leader(for: key), let leader = transfers[id], leader.state == .queued || leader.state == .running {
            dedupe.follow(t.id, leader: id)
            mirror(leader, into: t)
            logger.debug("transfer \(t.id) follows transfer \(id) (same fetch)")
        } else {
            dedupe.lead(t.id, key: key)
        }
    }

    /// Shows the leader's state and counts in the follower (not announced: the caller does).
    private func mirror(_ leader: TransferRecord, into f: TransferRecord) {
        f.life.mirror(leader.life)
        f.syncState()
        f.snapshot.attempts = leader.snapshot.attempts
        f.snapshot.httpStatus = leader.snapshot.httpStatus
        f.snapshot.bytesExpected = leader.snapshot.bytesExpected
        f.snapshot.bytesTransferred = leader.state == .running ? leader.snapshot.bytesTransferred : 0
        if f.state == .running {
            if f.snapshot.started == 0 { f.snapshot.started = environment.now() }
            f.snapshot.rate = leader.snapshot.rate
            f.snapshot.expectedEnd = leader.snapshot.expectedEnd
        }
    }

    /// Called by `settle` after every state change: a follower that left the active
    /// states stops following; a leader's followers follow its state, or take the fetch
    /// over when it was paused or cancelled. O(followers of that leader).
    func dedupeSettled(_ t: TransferRecord) {
        if dedupe.isFollower(t.id) {
            if !t.state.isActive {
                dedupe.unfollow(t.id)
                reindex(t)
            }
            return
        }
        switch t.state {
        case .queued, .waiting, .running:
            for id in dedupe.followers(of: t.id) {
                guard let f = transfers[id] else { continue }
                mirror(t, into: f)
                reindex(f)
                publishChanged(f)
            }
        case .paused, .cancelled:
            if let entry = dedupe.dissolve(t.id) { handOver(entry.key, to: entry.followers, from: t) }
        case .failed, .completed:
            // `failTransfer` and `completeFinished` decide for the followers.
            break
        }
    }

    /// The oldest live follower fetches `key` from now on, the others follow it.
    private func handOver(_ key: FetchKey, to followers: [TransferID], from leader: TransferRecord) {
        let live = followers.compactMap { transfers[$0] }.filter { $0.state.isActive && !$0.stopInFlight }
        guard let heir = live.first else { return }
        logger.info("transfer \(heir.id) takes over the fetch of transfer \(leader.id) (\(leader.state.rawValue))")
        heir.life.stopFollowing()
        heir.snapshot.bytesTransferred = 0
        dedupe.lead(heir.id, key: key)
        settle(heir)
        publishChanged(heir)
        for f in live.dropFirst() {
            dedupe.follow(f.id, leader: heir.id)
            mirror(heir, into: f)
            reindex(f)
            publishChanged(f)
        }
    }

    /// The leader failed for good (`failTransfer`): see the type's comment.
    func leaderFailed(_ t: TransferRecord, _ error: FerryError) {
        guard let entry = dedupe.dissolve(t.id), !entry.followers.isEmpty else { return }
        switch error {
        case .disk, .cancelled, .invalidDestination, .accessDenied:
            handOver(entry.key, to: entry.followers, from: t)
        default:
            for id in entry.followers {
                guard let f = transfers[id], f.state.isActive, !f.stopInFlight else { continue }
                f.snapshot.httpStatus = t.snapshot.httpStatus
                failTransfer(f, error)
            }
        }
    }

    /// The leader's verified file is at `location` (`completeFinished`): each follower
    /// gets its own copy, then finishes as a download does (verified, moved into place
    /// durably, its own events). The copies of a batch of followers are flushed together
    /// (`FetchedCopy.syncAll`), not one `fdatasync` after another on the core's queue.
    func leaderFinished(_ t: TransferRecord, location: String, bytesOnDisk: Int64, digest: String?) {
        guard let entry = dedupe.dissolve(t.id), !entry.followers.isEmpty else { return }
        let sourceArea = confinement(of: t)
        let live = entry.followers.compactMap { transfers[$0] }.filter { $0.state.isActive && !$0.stopInFlight }
        for start in stride(from: 0, to: live.count, by: FetchedCopy.batch) {
            var copies: [(follower: TransferRecord, fd: Int32)] = []
            for f in live[start..<min(start + FetchedCopy.batch, live.count)] {
                f.life.receiveCopy()
                settle(f)
                f.snapshot.httpStatus = t.snapshot.httpStatus
                f.snapshot.bytesExpected = bytesOnDisk
                f.etag = t.etag
                f.lastModified = t.lastModified
                if f.snapshot.started == 0 { f.snapshot.started = environment.now() }
                do {
                    copies.append((f, try FetchedCopy.copyUnsynced(from: location, within: sourceArea, to: f.partPath,
                                                                   within: confinement(of: f))))
                } catch {
                    copyFailed(f, from: t, error)
                }
            }
            let flushed = FetchedCopy.syncAll(copies.map(\.fd))
            for (i, copy) in copies.enumerated() {
                var st = stat()
                let size: Int64 = fstat(copy.fd, &st) == 0 ? Int64(st.st_size) : -1
                close(copy.fd)
                let f = copy.follower
                if let failure = flushed[i] {
                    copyFailed(f, from: t, FerryError.disk("cannot flush '\(f.partPath)': \(String(cString: strerror(failure)))"))
                } else if size != bytesOnDisk {
                    copyFailed(f, from: t, FerryError.disk("the file changed while it was copied (\(size) bytes, not \(bytesOnDisk))"))
                } else {
                    f.snapshot.bytesTransferred = bytesOnDisk
                    finishSucceeded(f, bytesOnDisk: bytesOnDisk, engineSHA256: digest)
                }
            }
        }
    }

    private func copyFailed(_ f: TransferRecord, from t: TransferRecord, _ error: Error) {
        deletePartFiles(f)
        failTransfer(f, .disk("could not copy the download of transfer \(t.id) to '\(f.partPath)': \(describe(error))"))
    }

    /// A leader's progress, shown by its followers (each sends its own `Progress`).
    func mirrorProgress(_ t: TransferRecord, bytesWritten: Int64) {
        for id in dedupe.followers(of: t.id) {
            guard let f = transfers[id], f.state == .running else { continue }
            f.snapshot.bytesTransferred = t.snapshot.bytesTransferred
            f.snapshot.bytesExpected = t.snapshot.bytesExpected
            f.snapshot.rate = t.snapshot.rate
            f.snapshot.expectedEnd = t.snapshot.expectedEnd
            f.lastProgress = (f.snapshot.bytesTransferred, f.snapshot.bytesExpected)
            emitProgress(f, bytesWritten: bytesWritten)
        }
    }

    /// The leader's file was named by the server (Content-Disposition): followers that
    /// left the name to the server take the same one (unique in their directory).
    func followersTakeServerName(of t: TransferRecord, _ name: String, adopt: (TransferRecord, String) -> Void) {
        for id in dedupe.followers(of: t.id) {
            guard let f = transfers[id], f.serverMayName else { continue }
            f.serverMayName = false
            adopt(f, name)
            publishChanged(f)
        }
    }
}

/// A finished file copied for a dedupe follower.
enum FetchedCopy {
    /// `FICLONE` (`_IOW(0x94, 9, int)`): the target shares the source's extents
    /// (btrfs, XFS, bcachefs…); refused where the file system cannot.
    static let ficlone: UInt = 0x4004_9409

    /// Copies made before they are flushed together (open descriptors held at once).
    static let batch = 64

    /// Copies the regular file at `source` to `target` and flushes it.
    /// - Returns: the bytes the target holds.
    static func copy(from source: String, within sourceArea: SandboxArea?, to target: String,
                     within targetArea: SandboxArea?) throws -> Int64 {
        let fd = try copyUnsynced(from: source, within: sourceArea, to: target, within: targetArea)
        defer { close(fd) }
        if let failure = syncAll([fd])[0] { throw FerryError.disk("cannot flush '\(target)': \(String(cString: strerror(failure)))") }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw error("cannot read the size of '\(target)'") }
        return Int64(st.st_size)
    }

    /// Copies the regular file at `source` to `target` (created, or emptied, with mode
    /// 0644; never through a link), as a reflink where the file system can, else byte by
    /// byte. Paths of a sandboxed application's transfer (`area`) are opened relative to
    /// their folders as opened and checked.
    /// - Returns: the target, open for writing: the caller flushes (`syncAll`) and closes it.
    static func copyUnsynced(from source: String, within sourceArea: SandboxArea?, to target: String,
                             within targetArea: SandboxArea?) throws -> Int32 {
        guard let (sourceFolder, sourceName) = SandboxArea.place(of: source, within: sourceArea) else {
            throw FerryError.disk("the folder of '\(source)' is no longer where it was")
        }
        defer { SandboxArea.release(sourceFolder) }
        guard let (targetFolder, targetName) = SandboxArea.place(of: target, within: targetArea) else {
            throw FerryError.disk("the folder of '\(target)' is no longer inside the application's directory")
        }
        defer { SandboxArea.release(targetFolder) }
        let input = openat(sourceFolder, sourceName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard input >= 0 else { throw error("cannot open '\(source)'") }
        defer { close(input) }
        var st = stat()
        guard fstat(input, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            throw FerryError.disk("'\(source)' is no longer a plain file")
        }
        let output = openat(targetFolder, targetName, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw error("cannot create '\(target)'") }
        if ioctl(output, ficlone, input) != 0 {
            do {
                try copyBytes(from: input, to: output, target: target)
            } catch {
                close(output)
                throw error
            }
        }
        return output
    }

    /// `fdatasync`s the descriptors on up to 16 threads at once (the file system joins
    /// concurrent syncs into fewer journal commits; one after another, a batch of small
    /// copies would cost a commit each).
    /// - Returns: for each descriptor, nil when flushed, else the `errno`.
    static func syncAll(_ fds: [Int32]) -> [Int32?] {
        guard fds.count > 1 else { return fds.map { fdatasync($0) == 0 ? nil : errno } }
        let work = SyncWork(fds)
        let group = DispatchGroup()
        for _ in 0..<min(16, fds.count) {
            group.enter()
            Thread.detachNewThread {
                work.run()
                group.leave()
            }
        }
        group.wait()
        return work.results
    }

    private static func copyBytes(from input: Int32, to output: Int32, target: String) throws {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw error("cannot read the finished download") }
            if n == 0 { return }
            var done = 0
            while done < n {
                let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { throw error("cannot write '\(target)'") }
                done += w
            }
        }
    }

    private static func error(_ what: String) -> FerryError {
        .disk("\(what): \(String(cString: strerror(errno)))")
    }
}

/// The descriptors `FetchedCopy.syncAll` flushes, taken one at a time by its threads.
private final class SyncWork: @unchecked Sendable {
    // `next` and `outcomes` are guarded by `lock`; `fds` never changes.
    private let lock = NSLock()
    private let fds: [Int32]
    private var next = 0
    private var outcomes: [Int32?]

    init(_ fds: [Int32]) {
        self.fds = fds
        outcomes = Array(repeating: nil, count: fds.count)
    }

    var results: [Int32?] { lock.withLock { outcomes } }

    func run() {
        while let i = take() {
            let failure: Int32? = fdatasync(fds[i]) == 0 ? nil : errno
            lock.withLock { outcomes[i] = failure }
        }
    }

    private func take() -> Int? {
        lock.withLock {
            guard next < fds.count else { return nil }
            defer { next += 1 }
            return next
        }
    }
}
