import Foundation

/// A download written into a file descriptor the caller passed (`destination-fd`,
/// v1.1) instead of a path: how a sandboxed application receives a file it may not
/// name (a portal-chosen document, a file outside its app directory).
///
/// The bytes first go, as for any download, to a private partial file in ferryd's own
/// state directory (`$XDG_STATE_HOME/ferry/fd-downloads/`), so pausing, resuming,
/// retries and the SHA-256 check work as ever; once the download is complete and
/// verified it is copied into the descriptor from its start (a regular file is cut to
/// the downloaded length; a pipe gets the bytes in order), flushed, and the private
/// copy is deleted. The descriptor never sees a partial or unverified file. It lives
/// only in memory: after a restart of ferryd such a download fails when it completes,
/// asking for it to be started again.
public final class DestinationDescriptor {
    public let fd: Int32

    /// Takes ownership of `fd` (closed when the transfer is done or forgotten).
    public init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// nil when `fd` can receive a download (an open, writable regular file or pipe), else why not.
    public static func refusal(_ fd: Int32) -> FerryError? {
        var st = stat()
        guard fd >= 0, fstat(fd, &st) == 0 else { return .invalidDestination("destination-fd is not an open file descriptor") }
        let type = st.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFIFO || type == S_IFSOCK else {
            return .invalidDestination("destination-fd must be a regular file or a pipe")
        }
        let mode = fcntl(fd, F_GETFL)
        guard mode >= 0, mode & O_ACCMODE == O_WRONLY || mode & O_ACCMODE == O_RDWR else {
            return .invalidDestination("destination-fd is not open for writing")
        }
        return nil
    }

    /// ferryd's private folder for the partial files of descriptor downloads (0700).
    static func workDirectory() throws -> String {
        let directory = StateDirectories.descriptorDownloads
        do {
            try StateDirectories.make(directory)
        } catch {
            throw FerryError.invalidDestination("cannot make ferryd's folder for descriptor downloads '\(directory)': \(error.localizedDescription)")
        }
        return directory
    }

    /// Copies the whole of `path` into the descriptor from its start and flushes it.
    func receive(_ path: String) throws {
        let source = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard source >= 0 else { throw Self.failure("reading the downloaded file", errno) }
        defer { close(source) }
        var st = stat()
        guard fstat(source, &st) == 0 else { throw Self.failure("reading the downloaded file", errno) }
        var target = stat()
        if fstat(fd, &target) == 0, target.st_mode & S_IFMT == S_IFREG {
            guard lseek(fd, 0, SEEK_SET) == 0, ftruncate(fd, 0) == 0 else { throw Self.failure("preparing the destination-fd", errno) }
        }
        var remaining = Int64(st.st_size)
        while remaining > 0 {
            let n = sendfile(fd, source, nil, Int(min(remaining, 1 << 30)))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw Self.failure("writing into the destination-fd", n < 0 ? errno : EIO) }
            remaining -= Int64(n)
        }
        if fsync(fd) != 0 && errno != EINVAL && errno != EROFS {
            throw Self.failure("flushing the destination-fd", errno)
        }
    }

    private static func failure(_ action: String, _ code: Int32) -> NSError {
        NSError(domain: "ferry", code: Int(code), userInfo: [NSLocalizedDescriptionKey: "\(String(cString: strerror(code))) while \(action)"])
    }
}

extension TransferCoordinator {
    /// Queues a download into `descriptor` (see `DestinationDescriptor`); the options'
    /// `destination` must be absent.
    public func download(session: SessionID, url: String, options: DownloadOptions,
                         into descriptor: DestinationDescriptor) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        guard options.destination == nil else {
            throw FerryError.invalidArgument("give either 'destination' or 'destination-fd', not both")
        }
        if let refusal = DestinationDescriptor.refusal(descriptor.fd) { throw refusal }
        var private_ = options
        private_.destination = try DestinationDescriptor.workDirectory() + "/" + UUID().uuidString
        private_.overwrite = false
        let id = try download(session: session, url: url, options: private_)
        transfers[id]?.destinationFD = descriptor
        return id
    }

    /// For a descriptor download: copies the verified file into the descriptor, deletes
    /// the private copy and returns the location to report ("": there is no path).
    /// nil for an ordinary download.
    func deliverToDescriptor(_ t: TransferRecord) throws -> String? {
        guard let directory = try? DestinationDescriptor.workDirectory(),
              FileSystemChecks.directoryName(t.destination) == directory else { return nil }
        guard let descriptor = t.destinationFD else {
            throw NSError(domain: "ferry", code: Int(EBADF), userInfo: [NSLocalizedDescriptionKey:
                "its destination-fd was lost when ferryd restarted; start the download again with a new descriptor"])
        }
        try descriptor.receive(t.partPath)
        t.destinationFD = nil
        try? fileManager.removeItem(atPath: t.partPath)
        return ""
    }
}
