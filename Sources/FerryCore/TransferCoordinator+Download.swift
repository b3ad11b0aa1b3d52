import Dispatch
import Foundation

extension TransferCoordinator {
    /// Queues a download and returns its id at once.
    /// - Throws: `.noSuchSession`; `.invalidState` (session closing); `.invalidUrl`,
    ///   `.unsupportedScheme`; `.invalidArgument` (sha256, priority, connections,
    ///   headers); `.invalidDestination` (relative, missing or unwritable directory);
    ///   `StoreError`. Then nothing has changed.
    public func download(session: SessionID, url: String, options: DownloadOptions) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        precondition(prepared.isEmpty, "download() while downloads are prepared: add them first")
        let id = try prepareDownload(session: session, url: url, options: options)
        try addPreparedDownloads()
        return id
    }

    /// Checks a download as `download` does and gives it its id and file name (no other
    /// download may take that name), without adding it yet: `addPreparedDownloads` adds
    /// every download prepared since its last call with one store write and one change.
    /// Downloads asked for together (a client's pipelined calls) so cost one
    /// transaction, not one each. Nothing else may happen on `queue` in between.
    /// - Throws: what `download` throws, but `StoreError`; then nothing is prepared.
    public func prepareDownload(session: SessionID, url: String, options: DownloadOptions) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let s = try openSessionRecord(session)
        let requestURL = try validateRequestURL(url)
        try DownloadOptionsValidation.validate(options)
        try validateMirrors(options.mirrors)
        var resolver = resolver(except: nil)
        resolver.knownWritable = prepared.writableDirectories
        let resolved = try resolver.resolve(requested: options.destination,
                                            defaultDirectory: { s.configuration.directory ?? environment.defaultDownloadDirectory() },
                                            suggestedName: requestURL.suggestedFileName,
                                            overwrite: options.overwrite)
        let id = numbering.nextTransferID + UInt64(prepared.count)
        let snapshot = TransferSnapshot(id: id, session: session, url: url, description: options.description,
                                        destination: resolved.path, state: .queued, created: environment.now(),
                                        priority: options.priority, speedLimit: options.speedLimit)
        let t = TransferRecord(snapshot: snapshot, life: initialLife(options), options: options, host: requestURL.host,
                               directory: resolved.directory, serverMayName: resolved.serverMayName)
        prepared.add(t)
        prepared.foundWritable(resolved.directory)
        return id
    }

    /// How many prepared downloads belong to `session` (they count towards its limit).
    public func preparedCount(session: SessionID) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return prepared.count(session: session)
    }

    /// Adds the prepared downloads, in the order they were prepared: written together
    /// (persistent sessions), then announced and scheduled as one change.
    /// - Throws: `StoreError` when the store refuses; then none of them is added (their
    ///   ids and names are free again).
    public func addPreparedDownloads() throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let group = prepared.takeAll()
        guard !group.isEmpty else { return }
        try persistNew(group)
        mutate {
            for t in group { add(t) }
        }
    }

    /// Gives a new transfer its first state and, in a persistent session, writes it
    /// (with the advanced counter) before anything else happens: once `Download`
    /// answers, the transfer survives a crash. Then takes its id.
    /// - Throws: `StoreError`; then nothing has changed.
    func persistNew(_ t: TransferRecord) throws {
        precondition(prepared.isEmpty, "a transfer created while downloads are prepared would take one's id")
        try persistNew([t])
    }

    /// `persistNew` for transfers with consecutive ids, in one transaction.
    func persistNew(_ group: [TransferRecord]) throws {
        guard let last = group.last else { return }
        var next = counters
        next.nextTransferID = max(next.nextTransferID, last.id + 1)
        let durable = group.filter { isPersistent($0.session) }
        if !durable.isEmpty {
            let stored = durable.map(\.stored)
            try writeNow(stored.map { .saveTransfer($0) }, counters: next)
            let now = environment.now()
            for (t, s) in zip(durable, stored) {
                t.persistedDigest = s.hashValue
                t.lastCheckpoint = now
            }
        }
        if let ephemeral = group.last(where: { !isPersistent($0.session) }) {
            reserveIDs(transfer: ephemeral.id)
        }
        numbering.tookTransfers(through: last.id)
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
    ///
    /// A `destination-fd` download (its file in ferryd's own folder) continues into
    /// `descriptor`, else into the descriptor the transfer it came from still holds;
    /// only the application whose download it was may continue it, and no message names
    /// ferryd's private file.
    public func resumeDownload(session: SessionID, resumeData: [UInt8], options: DownloadOptions,
                               into descriptor: DestinationDescriptor? = nil) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let caller = try openSessionRecord(session)
        let data = try openResumeData(resumeData)
        let requestURL = try validateRequestURL(data.url)
        try DownloadOptionsValidation.validate(options)
        try validateMirrors(options.mirrors)
        let intoDescriptor = Self.isDescriptorDownloadPath(data.destination)
        let partName = intoDescriptor ? "the download's partial file" : "the partial file '\(data.partPath)'"
        if intoDescriptor {
            if options.destination != nil {
                throw CoreError.invalidArgument("this download was made into a destination-fd: leave 'destination' out (give 'destination-fd' for a new descriptor)")
            }
        } else if descriptor != nil {
            throw CoreError.invalidArgument("'destination-fd' continues only a download made into a destination-fd; this one goes to '\(data.destination)'")
        }
        if let wanted = options.destination,
           !wanted.hasPrefix("/") || FileSystemChecks.normalize(wanted) != data.destination {
            throw CoreError.invalidDestination("destination '\(wanted)' differs from the resume data's '\(data.destination)'; leave the option out")
        }
        var segments: SegmentMap?
        if let text = data.segments {
            guard let map = SegmentMap(encoded: text), map.total == data.expected else {
                throw CoreError.invalidResumeData("the resume data's range map is damaged; start the download again")
            }
            segments = map
        }
        // ferryd's own folder for descriptor downloads is outside any app's area.
        let area = intoDescriptor ? nil : caller.owner.map { SandboxArea(appID: $0) }
        let partSize = FileSystemChecks.fileSize(data.partPath, within: area)
        if data.offset > 0 {
            guard let size = partSize else {
                throw CoreError.invalidResumeData("\(partName) no longer exists; start the download again")
            }
            guard size >= data.offset else {
                throw CoreError.invalidResumeData("\(partName) holds \(size) bytes, fewer than the \(data.offset) recorded when it was paused")
            }
        }
        let directory = FileSystemChecks.directoryName(data.destination)
        try FileSystemChecks.requireWritableDirectory(directory, role: "directory")
        let owners = Set(index.owners(of: data.destination) + index.owners(of: data.partPath)).sorted()
            .compactMap { transfers[$0] }.filter { $0.holdsClaim }
        // The partial file is taken over only from the download the data was made from,
        // with the validator its bytes are of: another download there since (the first
        // one cancelled, a new one into the same path), or the same one fetching a
        // changed file since, holds other bytes, which the data's range must not join.
        if intoDescriptor, owners.contains(where: { sessions[$0.session]?.owner != caller.owner }) {
            throw CoreError.invalidResumeData("this resume data is of another application's download")
        }
        if let other = owners.first(where: { !$0.madeResumeData(data) }) {
            throw CoreError.invalidResumeData("\(partName) now holds transfer \(other.id)'s bytes, not those this resume data was made for; resume transfer \(other.id) instead, or start the download again")
        }
        if let busy = owners.first(where: { $0.state.isActive }) {
            throw CoreError.invalidState("transfer \(busy.id) is still downloading into \(intoDescriptor ? "its destination-fd" : "'\(data.partPath)'"); pause it first, or resume that transfer instead")
        }
        // The descriptor it goes on into: a new one (counted against the caller's cap),
        // or the one the transfer it came from holds (taken over with its count).
        let inherited = descriptor == nil ? owners.first(where: { $0.destinationFD != nil }) : nil
        if intoDescriptor && descriptor == nil && inherited == nil {
            throw CoreError.invalidResumeData("this download was made into a destination-fd, which ferryd no longer holds (it restarted, or the transfer was removed); pass a new 'destination-fd' with ResumeDownload")
        }
        if let descriptor {
            if let refusal = DestinationDescriptor.refusal(descriptor.fd) { throw refusal }
            if let full = uploadSourceRoomMissing(for: caller.owner) {
                throw CoreError.limitExceeded(full + "; cancel or remove some destination-fd downloads first")
            }
        }
        // The download the data came from learnt since that it cannot be resumed (the
        // server refuses range requests): what the data says of the file is void, and the
        // new transfer starts over rather than continue ranges that would be refused.
        let unresumable = owners.contains { !$0.snapshot.resumable }
        if unresumable { segments = nil }
        let keep = unresumable ? 0 : data.offset
        return try mutate {
            let id = numbering.nextTransferID
            var snapshot = TransferSnapshot(id: id, session: session, url: data.url, description: options.description,
                                            destination: data.destination, state: .queued,
                                            bytesTransferred: segments.map { (partSize ?? 0) > 0 ? $0.bytesDone : 0 } ?? keep,
                                            bytesExpected: data.expected,
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
            // Data is made only for a part file that can be continued: without a map, a
            // prefix of the data's length (what is on disk after it may be ranges a later
            // attempt on several connections wrote, with holes between).
            t.partIsPrefix = segments == nil && keep > 0
            if segments == nil { t.prefixLimit = keep }
            try persistNew(t)
            // Added first so that the takeover below does not look like the end of a batch.
            add(t)
            if let descriptor {
                t.destinationFD = descriptor
                countUploadSource(of: caller.owner, by: 1)
            } else if let inherited {
                t.destinationFD = inherited.destinationFD
                inherited.destinationFD = nil // its count goes with it (same application)
            }
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
        joinFetch(t)
        reindex(t)
        stageTransfer(t)
        t.markPublished()
        emit(.transferAdded(t.snapshot))
        if t.state == .waiting { timeline.add(t.id, .wake, at: t.notBefore) }
    }

    /// A resolver that treats paths owned by live transfers (other than `except`), by
    /// prepared downloads or by downloads about to move there as taken.
    func resolver(except: TransferID?) -> DestinationResolver {
        DestinationResolver(fileManager: fileManager) { [unowned self] path in
            !self.index.owners(of: path, except: except).isEmpty || self.prepared.holds(path)
                || self.pendingMoves.holds(path)
        }
    }
}

extension TransferCoordinator {
    /// A client's URL checked by `RequestURL` and by the engine's own parser (the two
    /// disagree on some broken URLs): `InvalidUrl` at the call, never a transfer that
    /// fails as `Network` after all its retries.
    func validateRequestURL(_ url: String) throws -> RequestURL {
        let checked = try RequestURL.validate(url)
        if let refusal = engineRefusal(of: url) { throw CoreError.invalidUrl(refusal) }
        return checked
    }

    /// Mirrors the engine's own parser refuses are malformed values (`InvalidArgument`).
    func validateMirrors(_ mirrors: [String]) throws {
        for (i, mirror) in mirrors.enumerated() {
            if let refusal = engineRefusal(of: mirror) { throw CoreError.invalidArgument("mirror \(i): \(refusal)") }
        }
    }

    /// Why the engine's own parser refuses `url` (a request's or a proxy's), in words
    /// that show it without credentials and say what to do; nil when it takes it.
    func engineRefusal(of url: String) -> String? {
        guard let why = engine.urlRefusal(url) else { return nil }
        let authority = url.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false).dropFirst(2).first ?? ""
        let hint = authority.contains("%00") ? "; a user name or password may not hold %00"
            : authority.filter { $0 == "@" }.count > 1 ? "; percent-encode an '@' in a user name or password as %40"
            : authority.unicodeScalars.contains { !$0.isASCII } ? "; its host name is not a valid internationalised domain name" : ""
        return "'\(RequestURL.redacted(url))' is not a valid URL (libcurl: \(why))\(hint)"
    }
}
