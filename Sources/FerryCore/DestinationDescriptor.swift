import Foundation

/// A download written into a file descriptor the caller passed (`destination-fd`,
/// v1.1) instead of a path: how a sandboxed application receives a file it may not
/// name (a portal-chosen document, a file outside its app directory).
///
/// The bytes first go, as for any download, to a private partial file in ferryd's own
/// state directory (`$XDG_STATE_HOME/ferry/fd-downloads/`), so pausing, resuming,
/// retries and the SHA-256 check work as ever; once the download is complete and
/// verified it is copied into the descriptor from its start (a regular file is cut to
/// the downloaded length; a pipe or socket gets the bytes in order), flushed, and the
/// private copy is deleted. The descriptor never sees a partial or unverified file. It
/// lives only in memory: after a restart of ferryd such a download fails when it
/// completes, asking for it to be started again.
///
/// The copy runs on a queue of the descriptor's own, never on the core's: the other
/// end of a pipe is the client's, and a reader that takes nothing must not hold up
/// anyone else. A pipe or socket is written without blocking (`O_NONBLOCK` is set on
/// it, which the client's copies of it share); a reader that takes nothing for
/// `stallLimit` seconds, or closes its end, fails the transfer. A pipe that has had
/// bytes of the file cannot take them back: once a copy into it is cut short (the
/// transfer paused or stopped meanwhile), a later one is refused.
///
/// `@unchecked Sendable`: `fd` is immutable; `streamBegun` is only touched by jobs on
/// `queue`, one at a time.
public final class DestinationDescriptor: @unchecked Sendable {
    public let fd: Int32
    /// Copies into this descriptor, one after another (a new one waits for a
    /// cancelled one to stop writing).
    private let queue = DispatchQueue(label: "org.ferry.destination-fd")
    /// Bytes have gone into a pipe or socket (on `queue` only).
    private var streamBegun = false
    /// A copy failed so that none can ever succeed (guarded by `lock`): its reader left
    /// (EPIPE), or a pipe or socket that had part of the file was cut short.
    private var spent = false
    private let lock = NSLock()

    /// Whether no copy into the descriptor can succeed any more (it may be closed).
    var isSpent: Bool { lock.withLock { spent } }

    /// Takes ownership of `fd` (closed when the transfer is done or forgotten).
    public init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// nil when `fd` can receive a download (an open, writable regular file not in
    /// append mode, a pipe, or a connected stream socket), else why not.
    public static func refusal(_ fd: Int32) -> CoreError? {
        var st = stat()
        guard fd >= 0, fstat(fd, &st) == 0 else { return .invalidDestination("destination-fd is not an open file descriptor") }
        let type = st.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFIFO || type == S_IFSOCK else {
            return .invalidDestination("destination-fd must be a regular file, a pipe or a stream socket")
        }
        if type == S_IFSOCK, let why = socketRefusal(fd) { return .invalidDestination(why) }
        let mode = fcntl(fd, F_GETFL)
        guard mode >= 0, mode & O_ACCMODE == O_WRONLY || mode & O_ACCMODE == O_RDWR else {
            return .invalidDestination("destination-fd is not open for writing")
        }
        guard type != S_IFREG || mode & O_APPEND == 0 else {
            // Every write would go to the end, after what the file held: the file is
            // written from its start, so open it without O_APPEND.
            return .invalidDestination("destination-fd is open for appending (O_APPEND); the file is written from its start: open it without O_APPEND")
        }
        return nil
    }

    /// Why the socket `fd` cannot take a file as a stream of bytes, nil when it can: a
    /// datagram socket would cut the file into messages (and refuse large ones), a
    /// listening one has no peer to write to.
    private static func socketRefusal(_ fd: Int32) -> String? {
        var kind: Int32 = 0
        var listening: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &kind, &size) == 0 else {
            return "destination-fd is a socket whose type cannot be read"
        }
        guard kind == Int32(SOCK_STREAM.rawValue) else {
            return "destination-fd is a datagram or packet socket; give a stream socket, a pipe or a regular file"
        }
        size = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening != 0 {
            return "destination-fd is a listening socket; give a connected one"
        }
        return nil
    }

    /// ferryd's private folder for the partial files of descriptor downloads (0700).
    static func workDirectory() throws -> String {
        let directory = StateDirectories.descriptorDownloads
        do {
            try StateDirectories.make(directory)
        } catch {
            throw CoreError.invalidDestination("cannot make ferryd's folder for descriptor downloads '\(directory)': \(error.localizedDescription)")
        }
        return directory
    }

    /// Copies `path` into the descriptor on its own queue, then calls `done` there.
    func deliver(_ path: String, _ delivery: DescriptorDelivery, stallLimit: Double,
                 done: @escaping @Sendable (Result<Void, Error>) -> Void) {
        queue.async { [self] in
            done(Result {
                do {
                    try receive(path, delivery: delivery, stallLimit: stallLimit)
                } catch {
                    if streamBegun || (error as NSError).code == Int(EPIPE) { lock.withLock { spent = true } }
                    throw error
                }
            })
        }
    }

    /// Copies the whole of `path` into the descriptor from its start and flushes it.
    /// Blocks (a regular file) or waits for the reader in slices of 250 ms (a pipe or
    /// socket), giving up when `delivery` is cancelled.
    func receive(_ path: String, delivery: DescriptorDelivery = DescriptorDelivery(), stallLimit: Double = 60) throws {
        let source = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard source >= 0 else { throw Self.failure("reading the downloaded file", errno) }
        defer { close(source) }
        var st = stat()
        guard fstat(source, &st) == 0 else { throw Self.failure("reading the downloaded file", errno) }
        var target = stat()
        guard fstat(fd, &target) == 0 else { throw Self.failure("looking at the destination-fd", errno) }
        let isFile = target.st_mode & S_IFMT == S_IFREG
        if isFile {
            guard lseek(fd, 0, SEEK_SET) == 0, ftruncate(fd, 0) == 0 else { throw Self.failure("preparing the destination-fd", errno) }
        } else {
            guard !streamBegun else {
                throw CoreError.invalidState("the destination-fd is a pipe that already had part of the file before the copy was cut short; start the download again with a new descriptor")
            }
            guard DescriptorMode.setNonBlocking(fd, true) else {
                throw Self.failure("preparing the destination-fd", errno)
            }
        }
        var remaining = Int64(st.st_size)
        var lastProgress = DispatchTime.now().uptimeNanoseconds
        let stallNanoseconds = UInt64(max(stallLimit, 0) * 1e9)
        while remaining > 0 {
            if delivery.isCancelled { throw CancellationError() }
            let n = sendfile(fd, source, nil, Int(min(remaining, 1 << 30)))
            if n > 0 {
                remaining -= Int64(n)
                if !isFile { streamBegun = true }
                lastProgress = DispatchTime.now().uptimeNanoseconds
                continue
            }
            let code = n < 0 ? errno : EIO
            if code == EINTR { continue }
            guard code == EAGAIN, !isFile else { throw Self.failure("writing into the destination-fd", code) }
            guard DispatchTime.now().uptimeNanoseconds - lastProgress < stallNanoseconds else {
                throw CoreError.disk("the reader of the destination-fd took nothing for \(stallLimit.rounded() == stallLimit ? "\(Int(stallLimit))" : "\(stallLimit)") s")
            }
            var ready = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&ready, 1, 250)
        }
        if fsync(fd) != 0 && errno != EINVAL && errno != EROFS {
            throw Self.failure("flushing the destination-fd", errno)
        }
    }

    private static func failure(_ action: String, _ code: Int32) -> NSError {
        NSError(domain: "ferry", code: Int(code), userInfo: [NSLocalizedDescriptionKey: "\(String(cString: strerror(code))) while \(action)"])
    }
}

/// One copy into a descriptor under way: the core cancels it when the transfer stops
/// being the one that waits for it (paused, cancelled, failed); the copy looks at
/// the flag between writes.
final class DescriptorDelivery: @unchecked Sendable {
    // `cancelled` is guarded by `lock` (set on the core's queue, read by the copy).
    private let lock = NSLock()
    private var cancelled = false

    var isCancelled: Bool { lock.withLock { cancelled } }

    func cancel() { lock.withLock { cancelled = true } }
}

extension TransferCoordinator {
    /// Queues a download into `descriptor` (see `DestinationDescriptor`); the options'
    /// `destination` must be absent.
    public func download(session: SessionID, url: String, options: DownloadOptions,
                         into descriptor: DestinationDescriptor) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        guard options.destination == nil else {
            throw CoreError.invalidArgument("give either 'destination' or 'destination-fd', not both")
        }
        if let refusal = DestinationDescriptor.refusal(descriptor.fd) { throw refusal }
        // Each descriptor held is one of ferryd's open files: capped per caller, with
        // the upload sources (no app can exhaust ferryd's descriptors).
        let owner = sessions[session]?.owner
        if let full = uploadSourceRoomMissing(for: owner) {
            throw CoreError.limitExceeded(full + "; cancel or remove some destination-fd downloads first")
        }
        var private_ = options
        private_.destination = try DestinationDescriptor.workDirectory() + "/" + UUID().uuidString
        private_.overwrite = false
        let id = try download(session: session, url: url, options: private_)
        transfers[id]?.destinationFD = descriptor
        countUploadSource(of: owner, by: 1)
        return id
    }

    /// Closes a download's `destination-fd` once nothing can write to it any more:
    /// completed, cancelled or forgotten, or failed with a descriptor no copy can
    /// succeed into (`isSpent`); a paused or otherwise failed one may be resumed, and
    /// keeps it. A copy into it still under way holds it until that copy stops.
    func releaseDestinationFD(_ t: TransferRecord, forgetting: Bool = false) {
        guard let descriptor = t.destinationFD else { return }
        guard forgetting || t.state == .completed || t.state == .cancelled || (t.state == .failed && descriptor.isSpent) else { return }
        t.destinationFD = nil
        countUploadSource(of: sessions[t.session]?.owner, by: -1)
    }

    /// Whether `path` is a `destination-fd` download's private file in ferryd's folder.
    public static func isDescriptorDownloadPath(_ path: String) -> Bool {
        FileSystemChecks.directoryName(path) == StateDirectories.descriptorDownloads
    }

    /// Whether `t` is a `destination-fd` download: it holds its descriptor, or (after a
    /// restart, which loses it) its private copy is in ferryd's folder for them.
    func isDescriptorDownload(_ t: TransferRecord) -> Bool {
        t.destinationFD != nil || Self.isDescriptorDownloadPath(t.destination)
    }

    /// A descriptor download is verified: its copy into the descriptor starts off this
    /// queue, and the transfer stays running until it ends (`deliveryEnded`).
    func startDelivery(_ t: TransferRecord, bytesOnDisk: Int64, digest: String?) {
        guard let descriptor = t.destinationFD else {
            failTransfer(t, .disk("could not move the finished download to '\(t.destination)': its destination-fd is gone (lost when ferryd restarted, or closed after a copy into it failed for good); start the download again with a new descriptor"))
            return
        }
        let delivery = DescriptorDelivery()
        t.delivery = delivery
        let id = t.id, queue = self.queue, coordinator = WeakCoordinator(self)
        descriptor.deliver(t.partPath, delivery, stallLimit: environment.descriptorStallLimit) { result in
            queue.async {
                coordinator.coordinator?.deliveryEnded(id, delivery, result, bytesOnDisk: bytesOnDisk, digest: digest)
            }
        }
    }

    /// The copy into the descriptor is over: the transfer completes (its private copy
    /// deleted) or fails. Nothing happens when the transfer left meanwhile (paused,
    /// cancelled, removed): its copy was cancelled then.
    func deliveryEnded(_ id: TransferID, _ delivery: DescriptorDelivery, _ result: Result<Void, Error>,
                       bytesOnDisk: Int64, digest: String?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let t = transfers[id], t.delivery === delivery else { return }
        t.delivery = nil
        mutate {
            switch result {
            case .success:
                // Its descriptor is closed as it completes (`reachedFinalState`).
                try? fileManager.removeItem(atPath: t.partPath)
                completeFinished(t, location: "", bytesOnDisk: bytesOnDisk, digest: digest)
            case .failure(let error):
                failTransfer(t, .disk("could not copy the finished download into its destination-fd: \(describe(error))"))
            }
        }
    }
}
