import Dispatch
import Foundation

extension TransferCoordinator {
    /// Queues a download and returns its id at once.
    /// - Throws: `.noSuchSession`; `.invalidState` (session closing); `.invalidUrl`,
    ///   `.unsupportedScheme`; `.invalidArgument` (sha256, priority, connections,
    ///   headers); `.invalidDestination` (relative, missing or unwritable directory).
    public func download(session: SessionID, url: String, options: DownloadOptions) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        let s = try openSessionRecord(session)
        let requestURL = try RequestURL.validate(url)
        try DownloadOptionsValidation.validate(options)
        let resolved = try resolver(except: nil).resolve(requested: options.destination,
                                                          defaultDirectory: { s.configuration.directory ?? environment.defaultDownloadDirectory() },
                                                          suggestedName: requestURL.suggestedFileName,
                                                          overwrite: options.overwrite)
        return try mutate {
            let id = nextTransferID
            let snapshot = TransferSnapshot(id: id, session: session, url: url, description: options.description,
                                            destination: resolved.path, state: .queued, created: environment.now(),
                                            priority: options.priority, speedLimit: options.speedLimit)
            let t = TransferRecord(snapshot: snapshot, life: initialLife(options), options: options, host: requestURL.host,
                                   directory: resolved.directory, serverMayName: resolved.serverMayName)
            try persistNew(t)
            add(t)
            return id
        }
    }

    /// Gives a new transfer its first state and, in a persistent session, writes it
    /// (with the advanced counter) before anything else happens: once `Download`
    /// answers, the transfer survives a crash. Then takes its id.
    /// - Throws: `StoreError`; then nothing has changed.
    func persistNew(_ t: TransferRecord) throws {
        var next = counters
        next.nextTransferID = max(next.nextTransferID, t.id + 1)
        if isPersistent(t.session) {
            let stored = t.stored
            try writeNow([.saveTransfer(stored)], counters: next)
            t.persistedDigest = stored.hashValue
            t.lastCheckpoint = environment.now()
        } else {
            reserveIDs(transfer: t.id)
        }
        nextTransferID = t.id + 1
    }

    /// What `resumeData` (from `pause`) holds, checked as `resumeDownload` checks it
    /// before looking at the disk.
    /// - Throws: `.invalidResumeData`, `.limitExceeded`.
    public func openResumeData(_ resumeData: [UInt8]) throws -> ResumeData {
        try ResumeData.decode(resumeData, seal: environment.resumeDataSeal)
    }

    /// A new download continuing from `resumeData` (from `pause`). It takes over the
    /// partial file: a paused or failed transfer that still owns it is cancelled
    /// (keeping the file). `options.destination`, when given, must be the same path.
    /// - Throws: `.invalidResumeData` (damaged, foreign or stale data, partial file
    ///   missing or shorter than recorded), `.invalidState` (a transfer is still
    ///   downloading into that file, or the session is closing), the option errors of
    ///   `download`.
    public func resumeDownload(session: SessionID, resumeData: [UInt8], options: DownloadOptions) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        _ = try openSessionRecord(session)
        let data = try openResumeData(resumeData)
        let requestURL = try RequestURL.validate(data.url)
        try DownloadOptionsValidation.validate(options)
        if let wanted = options.destination,
           !wanted.hasPrefix("/") || FileSystemChecks.normalize(wanted) != data.destination {
            throw FerryError.invalidDestination("destination '\(wanted)' differs from the resume data's '\(data.destination)'; leave the option out")
        }
        var segments: SegmentMap?
        if let text = data.segments {
            guard let map = SegmentMap(encoded: text), map.total == data.expected else {
                throw FerryError.invalidResumeData("the resume data's range map is damaged; start the download again")
            }
            segments = map
        }
        let partSize = FileSystemChecks.fileSize(data.partPath)
        if data.offset > 0 {
            guard let size = partSize else {
                throw FerryError.invalidResumeData("the partial file '\(data.partPath)' no longer exists; start the download again")
            }
            guard size >= data.offset else {
                throw FerryError.invalidResumeData("the partial file '\(data.partPath)' holds \(size) bytes, fewer than the \(data.offset) recorded when it was paused")
            }
        }
        let directory = FileSystemChecks.directoryName(data.destination)
        try FileSystemChecks.requireWritableDirectory(directory, role: "directory")
        let owners = Set(index.owners(of: data.destination) + index.owners(of: data.partPath)).sorted()
            .compactMap { transfers[$0] }.filter { $0.holdsClaim }
        if let busy = owners.first(where: { $0.state.isActive }) {
            throw FerryError.invalidState("transfer \(busy.id) is still downloading into '\(data.partPath)'; pause it first, or resume that transfer instead")
        }
        return try mutate {
            let id = nextTransferID
            var snapshot = TransferSnapshot(id: id, session: session, url: data.url, description: options.description,
                                            destination: data.destination, state: .queued,
                                            bytesTransferred: partSize ?? 0, bytesExpected: data.expected,
                                            created: environment.now(), priority: options.priority,
                                            speedLimit: options.speedLimit)
            snapshot.resumable = data.etag != nil || data.lastModified != nil
            var effective = options
            effective.destination = data.destination
            let t = TransferRecord(snapshot: snapshot, life: initialLife(options), options: effective, host: requestURL.host,
                                   directory: directory, serverMayName: false)
            t.etag = data.etag
            t.lastModified = data.lastModified
            t.segments = segments
            try persistNew(t)
            // Added first so that the takeover below does not look like the end of a batch.
            add(t)
            for owner in owners {
                cancelTransfer(owner, reason: .cancelled("Continued as transfer \(id) from its resume data"), deletePart: false)
            }
            return id
        }
    }

    /// A new transfer's first state: paused (`start` false), waiting (`start-after` in
    /// the future) or queued.
    func initialLife(_ options: DownloadOptions) -> TransferLife {
        if !options.start { return TransferLife(.paused) }
        if options.startAfter > environment.now() { return TransferLife(.waiting(.startAfter, until: options.startAfter)) }
        return TransferLife(.queued)
    }

    /// Registers a new transfer (in its first state, already stored) and announces it.
    func add(_ t: TransferRecord) {
        transfers[t.id] = t
        reindex(t)
        stageTransfer(t)
        t.markPublished()
        emit(.transferAdded(t.snapshot))
        if t.state == .waiting { timeline.add(t.id, .wake, at: t.notBefore) }
    }

    /// A resolver that treats paths owned by live transfers (other than `except`) as taken.
    func resolver(except: TransferID?) -> DestinationResolver {
        DestinationResolver(fileManager: fileManager) { [unowned self] path in
            !self.index.owners(of: path, except: except).isEmpty
        }
    }
}
