import Foundation

/// Durability: changes of persistent sessions are staged as store operations and
/// written, in one transaction, before the change's events leave the outbox
/// (`deliverEvents`), so nothing reaches the bus that a crash could take back.
extension TransferCoordinator {

    func isPersistent(_ session: SessionID) -> Bool {
        sessions[session]?.configuration.persistent ?? false
    }

    var counters: StoreCounters { numbering.counters(nextGroupID: groupBook.nextID) }

    /// Makes sure a restart never hands out `session` or `transfer` again although
    /// nothing of theirs is stored (an ephemeral session's): the stored counters are
    /// moved a block past them when they reach the last reservation — one write per
    /// 1,024 ids. Ephemeral sessions do not need the store otherwise: when it cannot
    /// be written, this logs and the next id tries again.
    /// Event serials of ephemeral sessions are reserved the same way (`serial`).
    func reserveIDs(session: SessionID? = nil, transfer: TransferID? = nil, serial: UInt64? = nil) {
        guard let next = numbering.reservation(session: session, transfer: transfer, serial: serial,
                                         nextGroupID: groupBook.nextID) else { return }
        syncMovedFolders()
        do {
            try journal.write([.setCounters(next)], to: store)
        } catch {
            logger.warning("could not reserve ids in the store; ids of ephemeral sessions may come again after a restart",
                           metadata: ["error": "\(error)"])
            return
        }
        numbering.reserved(next)
    }

    var settings: StoredSettings {
        managerSettings.stored(schedule: discretion.schedule.windows)
    }

    // MARK: - Staging

    /// Stages the transfer's stored form if it changed (persistent sessions only).
    func stageTransfer(_ t: TransferRecord) {
        guard isPersistent(t.session) else { return }
        let stored = t.stored
        let digest = stored.hashValue
        guard digest != t.persistedDigest else { return }
        t.persistedDigest = digest
        t.lastCheckpoint = environment.now()
        journal.stage(.saveTransfer(stored))
    }

    /// Stages the offset of a running transfer at most every `checkpointInterval`.
    func checkpointProgress(_ t: TransferRecord) {
        let now = environment.now()
        let interval = UInt64(max(environment.checkpointInterval, 0) * 1_000_000)
        guard now >= t.lastCheckpoint &+ interval || now < t.lastCheckpoint else { return }
        stageTransfer(t)
    }

    func stageSession(_ s: SessionRecord) {
        guard s.configuration.persistent else { return }
        journal.stage(.saveSession(storedSession(s)))
    }

    func storedSession(_ s: SessionRecord) -> StoredSession {
        StoredSession(id: s.id, identifier: s.identifier, configuration: s.configuration, isClosing: s.isClosing, owner: s.owner)
    }

    func stageSettings() {
        journal.stage(.setSettings(settings))
    }

    // MARK: - Writing

    /// Syncs the folders finished downloads were moved into, so their names survive a
    /// power cut before any completion is stored or announced: once per folder, however
    /// many files of the round went there. On the core's queue (never the bus's).
    func syncMovedFolders() {
        for folder in pendingMoves.takeFoldersToSync() { DurableFiles.syncFolder(folder) }
    }

    /// Writes what is staged, with the counters. A failure (a full disk under the
    /// database) is logged once: the change has happened in memory and is announced;
    /// its operations stay staged, in order, and go with the next write that works.
    func flushStore() {
        syncMovedFolders()
        switch journal.flush(to: store, counters: { counters }) {
        case .nothingStaged, .stillFailing:
            break
        case .written:
            noteStoreWritten()
        case .recovered:
            noteStoreWritten()
            logger.notice("Ferry's state is being saved again")
        case .startedFailing(let error):
            logger.error("could not save Ferry's state; changes are kept in memory only, and forgotten if ferryd restarts, until saving works again",
                         metadata: ["error": "\(error)"])
        }
    }

    /// Writes what is staged and `operations` now, for calls that must not answer
    /// before their change is durable. Throws (leaving the staged operations staged)
    /// when the store refuses; the caller then changes nothing.
    func writeNow(_ operations: [StoreOperation], counters: StoreCounters) throws {
        syncMovedFolders()
        do {
            try journal.write(operations + [.setCounters(counters)], to: store)
            noteStoreWritten()
        } catch {
            logger.error("could not save Ferry's state; refusing the call", metadata: ["error": "\(error)"])
            throw StoreError("Ferry could not save its state (\(error)); nothing was changed. Is the disk full?")
        }
    }

    // MARK: - Restoring

    /// The copy of `string` already in `strings`, else `string` (then kept there).
    private func interned(_ string: String, in strings: inout Set<String>) -> String {
        if let existing = strings.firstIndex(of: string).map({ strings[$0] }) { return existing }
        strings.insert(string)
        return string
    }

    /// Carries on from the store: the same sessions, transfers (same ids, so the same
    /// object paths) and pending events, and counters that never hand out an id again.
    /// Transfers that were running are queued again and continue from their `.part`
    /// file; paused ones stay paused; finished ones stay as they are and are not
    /// announced again. Call once, on `queue`, before `start()`.
    /// - Throws: what the store's `load` throws; then nothing is restored.
    public func restore() throws {
        dispatchPrecondition(condition: .onQueue(queue))
        precondition(!lifecycle.isStarted, "restore() must come before start()")
        let contents = try store.load()
        var restoredSessions: [SessionID: SessionRecord] = [:]
        for stored in contents.sessions {
            var configuration = stored.configuration
            // Stored before `private-signals` existed: a sandboxed caller's is private all the same.
            if stored.owner != nil { configuration.privateSignals = true }
            let s = SessionRecord(id: stored.id, identifier: stored.identifier, configuration: configuration)
            s.isClosing = stored.isClosing
            s.owner = stored.owner
            s.pendingEvents = (contents.events[stored.id] ?? []).sorted { $0.serial < $1.serial }
            restoredSessions[s.id] = s
        }
        var restoredTransfers: [TransferID: TransferRecord] = [:]
        var strings: Set<String> = []
        var orphans: [TransferID] = []
        for stored in contents.transfers {
            guard restoredSessions[stored.snapshot.session] != nil else {
                orphans.append(stored.snapshot.id)
                continue
            }
            let t = restoredTransfer(stored, owner: restoredSessions[stored.snapshot.session]?.owner)
            // Many transfers share a folder and a host: one copy of each string.
            t.directory = interned(t.directory, in: &strings)
            t.host = interned(t.host, in: &strings)
            restoredTransfers[stored.snapshot.id] = t
        }
        sessions = restoredSessions
        transfers = restoredTransfers
        let maxSession = sessions.keys.max() ?? 0
        let maxTransfer = transfers.keys.max() ?? 0
        let maxSerial = contents.events.values.flatMap { $0 }.map(\.serial).max() ?? 0
        numbering.restore(contents.counters, maxSession: maxSession, maxTransfer: maxTransfer, maxSerial: maxSerial)
        for t in transfers.values.sorted(by: { $0.id < $1.id }) {
            if t.finishingPath != nil { settleInterruptedFinish(t) } else { settleIfAlreadyInPlace(t) }
        }
        restoreGroups(contents.groups, counters: contents.counters)
        for t in transfers.values.sorted(by: { $0.id < $1.id }) { reindex(t) }
        restoreClientExitPauses()
        _ = schedulingDue.takeNewlyQueued()
        _ = index.takeChangedSessions()
        for s in sessions.values { s.publishedActive = activeCount(s.id) }

        if let settings = contents.settings {
            managerSettings.restore(settings)
            restoreSchedule(settings.schedule)
        }
        publishedManager.assume(manager)
        for id in orphans { journal.stage(.deleteTransfer(id)) }
        removeForgottenPartFiles(stored: contents.transfers)
        removeForgottenAnswerFiles()
        // (Not a POST cut by the restart: stored as running until `start()` has counted
        // its attempt, so a daemon that dies before that still knows.)
        for t in transfers.values.sorted(by: { $0.id < $1.id }) where !t.postCutByRestart { stageTransfer(t) }
        flushStore()
        let active = transfers.values.filter { $0.state.isActive }.count
        logger.info("restored \(sessions.count) sessions and \(transfers.count) transfers (\(active) to carry on)")
    }

    /// Removes the `.part` files this ferryd made (`PartFileMark`) that no transfer owns
    /// any more, in the folders its transfers write to and the default download folder:
    /// one whose unlink a power cut took back, or an ephemeral session's after a crash.
    /// Before `start()`: nothing is writing. A sandboxed application's folders are left
    /// alone, and so is any file without the mark (another program's `NAME.part`).
    private func removeForgottenPartFiles(stored: [StoredTransfer]) {
        // Owned files by identity, not by name: a folder may be reached by two paths.
        func identity(_ path: String) -> [UInt64]? {
            var st = stat()
            return lstat(path, &st) == 0 ? [UInt64(st.st_dev), UInt64(st.st_ino)] : nil
        }
        var owned = Set(stored.compactMap { identity($0.partPath) })
        var folders: Set<String> = [environment.defaultDownloadDirectory()]
        for t in transfers.values where !t.isUpload {
            if let id = identity(t.partPath) { owned.insert(id) }
            if sessions[t.session]?.owner == nil { folders.insert(FileSystemChecks.directoryName(t.partPath)) }
        }
        removeFiles(in: folders, named: { $0.hasSuffix(".part") },
                    if: { path in identity(path).map { !owned.contains($0) } == true && PartFileMark.isMarked(path) },
                    saying: "removed a partial file no transfer owns any more")
    }

    /// Removes the hidden `.ferry-answer-…` files beside the `response-destination` of
    /// unfinished uploads: an answer being written when ferryd was killed, on a file
    /// system that cannot make a file without a name (which would have gone by itself).
    /// Before `start()`: no answer is being written. A sandboxed application's folders
    /// are left alone, as for `.part` files.
    private func removeForgottenAnswerFiles() {
        var folders: Set<String> = []
        for t in transfers.values where t.isUpload && !t.state.isFinal && sessions[t.session]?.owner == nil {
            if let destination = t.upload?.responseDestination { folders.insert(FileSystemChecks.directoryName(destination)) }
        }
        removeFiles(in: folders, named: { $0.hasPrefix(EngineUpload.hiddenAnswerPrefix) }, if: { path in
            var st = stat()
            return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG
        }, saying: "removed an upload's answer cut short by a restart")
    }

    /// The restore's sweep of files left behind: in each of `folders`, the entries whose
    /// name `named` picks and whose path passes `check` are unlinked (logged with
    /// `saying`), and a folder that lost any is synced.
    private func removeFiles(in folders: Set<String>, named: (String) -> Bool, if check: (String) -> Bool, saying: String) {
        for folder in folders.sorted() {
            guard let names = try? fileManager.contentsOfDirectory(atPath: folder) else { continue }
            var removed = 0
            for name in names where named(name) {
                let path = FileSystemChecks.join(folder, name)
                guard check(path), unlink(path) == 0 else { continue }
                removed += 1
                logger.info("\(saying): \(path)")
            }
            if removed > 0 { DurableFiles.syncFolder(folder) }
        }
    }

    /// A stored transfer as the restarted daemon takes it up.
    private func restoredTransfer(_ stored: StoredTransfer, owner: String?) -> TransferRecord {
        let t = TransferRecord(stored: stored)
        // A Content-Disposition rename may have been cut short: bring the bytes to the
        // current name.
        if stored.partPath != t.partPath, FileSystemChecks.exists(stored.partPath),
           !FileSystemChecks.exists(t.partPath) {
            do {
                try movePartFile(from: stored.partPath, to: t.partPath, within: confinement(of: t, owner: owner))
            } catch {
                logger.warning("could not move partial file", metadata: ["transfer": "\(t.id)", "error": "\(error)"])
            }
        }
        t.enginePartPath = nil // the bytes are at the current `.part` name (nil says so without a copy)
        // A running transfer's attempt died with the old daemon: its life is queued again
        // (not a client action, so not announced, and its retries and resource clock go on).
        if t.isUpload {
            // An upload that was under way starts over from byte 0. A POST that was
            // running may have reached the server: `start()` counts its attempt as failed.
            if !t.state.isFinal { t.snapshot.bytesTransferred = 0 }
            t.postCutByRestart = t.isPOST && stored.snapshot.state == .running
            t.enginePartPath = nil
        } else if !t.state.isFinal {
            if environment.machineRestarted { trustOnlySyncedBytes(t) }
            // The file's real size wins over the last checkpoint.
            let size = FileSystemChecks.fileSize(t.partPath, within: confinement(of: t, owner: owner)) ?? 0
            // A prefix is trusted only up to what was checkpointed with the mark: more on
            // disk may be the ranges of a later attempt on several connections whose
            // response the daemon died before storing (that file starts over). One with a
            // stored limit (made from resume data) keeps only that much anyway: no more
            // than its limit is continued, and the rest is cut at the next answer.
            if t.partIsPrefix && t.prefixLimit == nil && size > stored.snapshot.bytesTransferred { t.partIsPrefix = false }
            t.snapshot.bytesTransferred = size > 0 ? t.keptBytes(prefix: t.continuableBytes(ofPartSize: size)) : 0
        }
        t.snapshot.rate = 0
        t.snapshot.expectedEnd = 0
        t.markPublished()
        return t
    }

    /// The machine restarted since `t`'s part file was written: what was not synced may
    /// be holes (zeros) under the file's length, which its size cannot tell. Only the
    /// bytes last reported synced (`durablePart`) are continued; the rest is fetched
    /// again (an offset resume cuts the file where it continues).
    private func trustOnlySyncedBytes(_ t: TransferRecord) {
        switch t.durablePart {
        case .prefix(let n)? where t.segments == nil:
            t.prefixLimit = min(t.prefixLimit ?? n, n)
        case .ranges(let map)? where t.segments != nil:
            t.segments = map
        default:
            t.segments = nil
            t.partIsPrefix = false
            t.prefixLimit = 0
        }
        logger.info("transfer \(t.id): the machine restarted; continuing only the part file's synced bytes (\(t.durablePart?.encoded ?? "none"))")
    }

    /// The daemon died while moving a verified download into place. Moved (the `.part`
    /// is gone, or is a second name of the final file): the transfer is complete, and
    /// its event (never sent) is pending now. Not moved: it is queued again, and the
    /// engine finds the file complete.
    private func settleInterruptedFinish(_ t: TransferRecord) {
        guard let target = t.finishingPath else { return }
        t.finishingPath = nil
        guard !t.state.isFinal, FileSystemChecks.exists(target) else { return }
        let partExists = FileSystemChecks.exists(t.partPath)
        if partExists {
            guard Self.sameFile(t.partPath, target, fileManager) else { return }
            FileSystemChecks.removeIfPresent(t.partPath, fileManager: fileManager) // the link was made, not the unlink
        }
        settleAsFinished(t, at: target)
        logger.info("transfer \(t.id) had finished moving into place before the restart: \(target)")
    }

    /// The transfer completes at `target`, where its verified file is; its event (never
    /// sent) is pending now.
    private func settleAsFinished(_ t: TransferRecord, at target: String) {
        let size = FileSystemChecks.fileSize(target) ?? t.snapshot.bytesTransferred
        t.snapshot.destination = target
        t.life.finishedBeforeRestart()
        t.syncState()
        t.snapshot.bytesTransferred = size
        if t.snapshot.bytesExpected < 0 { t.snapshot.bytesExpected = size }
        t.snapshot.completed = environment.now()
        let digest = t.snapshot.sha256.isEmpty ? nil : t.snapshot.sha256
        _ = appendEvent(PendingEvent(serial: 0, transfer: t.id, kind: .finished, location: target, bytes: size,
                                     sha256: digest), session: t.session)
        t.markPublished()
    }

    /// A download the store shows under way whose `.part` is gone while its final name
    /// holds the whole file: the move into place was made and reached the disk, the
    /// commit that would have said so did not (a power cut, or a store that could not be
    /// written). It completes there instead of starting over into `NAME (1)`. The file
    /// must be the one this download made: started (so its length is the server's), of
    /// that length, changed since the download started, its SHA-256 the expected one
    /// where the download has one, and its origin URL, where the file system keeps one,
    /// this download's.
    private func settleIfAlreadyInPlace(_ t: TransferRecord) {
        guard t.state.isActive, !t.isUpload, t.snapshot.attempts > 0, t.snapshot.started > 0, t.snapshot.bytesExpected > 0,
              !isDescriptorDownload(t) else { return }
        let area = confinement(of: t)
        guard FileSystemChecks.fileSize(t.partPath, within: area) == nil, !FileSystemChecks.exists(t.partPath),
              let file = FileSystemChecks.sizeAndModification(t.destination, within: area),
              file.size == t.snapshot.bytesExpected,
              file.modified + 2_000_000 >= t.snapshot.started else { return }
        if let origin = OriginURLAttribute.get(path: t.destination, fileManager: fileManager),
           origin != OriginURLAttribute.withoutCredentials(t.snapshot.url) { return }
        if let wanted = t.options.sha256?.lowercased() {
            guard FileDigest.sha256(path: t.destination, within: area) == wanted else { return }
            t.snapshot.sha256 = wanted
        }
        settleAsFinished(t, at: t.destination)
        logger.info("transfer \(t.id) was complete in its place before the restart: \(t.destination)")
    }

    private static func sameFile(_ a: String, _ b: String, _ fileManager: FileManager) -> Bool {
        guard let x = try? fileManager.attributesOfItem(atPath: a), let y = try? fileManager.attributesOfItem(atPath: b),
              let xi = x[.systemFileNumber] as? NSNumber, let yi = y[.systemFileNumber] as? NSNumber,
              let xd = x[.systemNumber] as? NSNumber, let yd = y[.systemNumber] as? NSNumber else { return false }
        return xi == yi && xd == yd
    }

    /// At `start()`: arms the timers of restored waiting transfers, fails those whose
    /// resource-timeout ran out while the daemon was away, and lets closing sessions
    /// whose transfers are all final go.
    func resumeRestoredWork() {
        // The window on now, before anything is judged; its next edge on the timeline.
        evaluateSchedule(judge: false)
        for t in transfers.values.sorted(by: { $0.id < $1.id }) {
            if t.state == .waiting && !t.isWaitingForNetwork { timeline.add(t.id, .wake, at: t.notBefore) }
            if t.state.isActive && t.resourceStarted > 0 { watchDeadline(t) }
            // Restored queued transfers meet the network policy like new ones.
            if t.state == .queued { schedulingDue.queued(t.id) }
            if t.postCutByRestart { failPOSTCutByRestart(t) }
        }
        // Network waits from before the restart are judged against today's network.
        applyNetworkPolicy(to: index.waitingForNetwork.sorted())
        wakeDueTransfers()
        for s in sessions.values.sorted(by: { $0.id < $1.id }) where s.isClosing { finishClosingIfDone(s) }
    }

    /// A POST upload that was running when the daemon stopped (killed, or its session
    /// ended) may have reached the server, which may have acted on it: sent again at
    /// once, it could act twice (RFC 9110 §9.2.2). Its attempt counts as failed, as a
    /// lost connection's does: the session's `retries` decide whether it is sent again.
    private func failPOSTCutByRestart(_ t: TransferRecord) {
        t.postCutByRestart = false
        guard t.state == .queued else { return }
        attemptFailed(t, .network("ferryd stopped while this POST upload was under way, so the server may have "
            + "received it; it is sent again only as the session's retries allow"))
    }

    // MARK: - Questions

    /// Whether the session has completion events not yet acknowledged (cheap: no disk).
    public func hasPendingEvents(session: SessionID) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return !(sessions[session]?.pendingEvents.isEmpty ?? true)
    }

    /// Sessions with completion events not yet acknowledged, oldest first.
    public var sessionsWithPendingEvents: [SessionID] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return sessions.values.filter { !$0.pendingEvents.isEmpty }.map(\.id).sorted()
    }
}
