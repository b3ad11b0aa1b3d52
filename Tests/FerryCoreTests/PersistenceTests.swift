import XCTest
@testable import FerryCore

/// Durability through the store, with the in-memory store (the SQLite store has its own
/// tests in FerryStoreTests): written before announced, restored after a restart,
/// nothing from ephemeral sessions.
final class PersistenceTests: XCTestCase {
    private func stored(_ h: CoreHarness, _ id: TransferID) -> StoredTransfer? {
        try? h.store.load().transfers.first { $0.snapshot.id == id }
    }

    private func storedEvents(_ h: CoreHarness, _ s: SessionID) -> [PendingEvent] {
        (try? h.store.load().events[s]) ?? []
    }

    // MARK: - Written before announced

    func testDownloadIsStoredBeforeItIsAnnouncedOrAnswered() throws {
        let h = CoreHarness(start: false)
        let s = try h.openSession()
        XCTAssertEqual(try h.store.load().sessions.map(\.id), [s], "the session is stored before OpenSession answers")
        var storedWhenAnnounced: StoredTransfer?
        h.sync { _ in
            h.observer.onEvent = { [unowned h] event in // h owns the observer
                if case .transferAdded(let id, _) = event { storedWhenAnnounced = self.stored(h, id) }
            }
        }
        let t = try h.download(s) { $0.headers = ["X-Token": "abc"]; $0.priority = 1 }
        XCTAssertEqual(storedWhenAnnounced?.snapshot.state, .queued)
        let row = try XCTUnwrap(stored(h, t), "in the store when download() returns")
        XCTAssertEqual(row.options.headers, ["X-Token": "abc"])
        XCTAssertEqual(row.snapshot.priority, 1)
        XCTAssertEqual(try h.store.load().counters.nextTransferID, t + 1)
    }

    func testCompletionAndItsEventAreStoredTogetherBeforeCompleted() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        var seen: (state: TransferState?, events: [UInt64])?
        h.sync { _ in
            h.observer.onEvent = { [unowned h] event in // h owns the observer
                if case .transferChanged(t, .completed) = event {
                    seen = (self.stored(h, t)?.snapshot.state, self.storedEvents(h, s).map(\.serial))
                }
            }
        }
        h.succeed(t)
        let (_, serial, name) = try XCTUnwrap(h.observer.completions.first)
        XCTAssertEqual(name, "")
        XCTAssertEqual(seen?.state, .completed, "the final state is stored before it is announced")
        XCTAssertEqual(seen?.events, [serial], "with its event, in the same write")
        let write = try XCTUnwrap(h.store.writes.first { $0.contains { if case .appendEvent = $0 { return true } else { return false } } })
        XCTAssertTrue(write.contains { if case .saveTransfer(let st) = $0 { return st.snapshot.state == .completed } else { return false } },
                      "one transaction holds both")
    }

    /// Paused, a download's attempt stops a moment later with bytes that came in since
    /// its last Progress: one more Progress counts them, and they are stored before it
    /// is announced (a client may kill ferryd then and still continue from there).
    func testAPausedDownloadsLastProgressComesAfterItsBytesAreStored() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.answerAndWrite(t, [1, 2, 3, 4], total: 8)
        _ = try h.sync { try $0.pause(t) }
        var storedWhenAnnounced: Int64?
        h.sync { _ in
            h.observer.onEvent = { [unowned h] event in // h owns the observer
                if case .progress(t, _, 6, _) = event { storedWhenAnnounced = self.stored(h, t)?.snapshot.bytesTransferred }
            }
        }
        h.observer.clear()
        h.writePart(t, [1, 2, 3, 4, 5, 6])
        h.send(.progress(t, bytesWritten: 2, totalOnDisk: 6, expected: 8)) // the stopping attempt's last bytes
        XCTAssertEqual(h.observer.events.filter { if case .progress = $0 { return true } else { return false } }, [],
                       "nothing is announced before the attempt has stopped")
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.observer.events.filter { if case .progress = $0 { return true } else { return false } },
                       [.progress(t, written: 2, total: 6, expected: 8)])
        XCTAssertEqual(storedWhenAnnounced, 6, "the count is stored before the Progress announces it")
    }

    func testStoreFailureRefusesDownloadAndChangesNothing() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        h.store.failure = StoreError("disk full")
        XCTAssertThrowsError(try h.download(s)) { error in
            XCTAssertTrue(error is StoreError, "\(error)")
        }
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
        XCTAssertEqual(h.engine.started, [])
        h.store.failure = nil
        XCTAssertEqual(try h.download(s), 1, "the refused call did not use up an id")
    }

    func testChangesThatCouldNotBeSavedAreSavedWithTheNextWrite() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try h.download(s, "https://example.com/a")
        let b = try h.download(s, "https://example.com/b")
        h.store.failure = StoreError("disk full")
        h.succeed(a)
        XCTAssertEqual(h.state(a), .completed, "the daemon goes on")
        XCTAssertEqual(stored(h, a)?.snapshot.state, .running, "not saved yet")
        h.store.failure = nil
        _ = try h.sync { try $0.pause(b) }
        XCTAssertEqual(stored(h, a)?.snapshot.state, .completed, "saved with the next write")
        XCTAssertEqual(storedEvents(h, s).map(\.transfer), [a])
        XCTAssertEqual(stored(h, b)?.snapshot.state, .paused)
    }

    // MARK: - Restart

    func testRestartCarriesOnWithSameIdsStatesAndEvents() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession("com.example.Podcasts") { $0.retries = 3 }
        // 1: running with 6 bytes on disk and a validator (of a file large enough for
        // its validator to be stored at the response).
        let running = try h.download(s, "https://example.com/running.bin")
        h.send(.response(running, EngineResponse(status: 200, etag: "\"r1\"", expectedTotal: 100 << 20, acceptsRanges: true,
                                                 effectiveURL: "https://example.com/running.bin")))
        h.writePart(running, [1, 2, 3, 4, 5, 6])
        h.send(.progress(running, bytesWritten: 6, totalOnDisk: 6, expected: 100 << 20))
        // 2: paused.
        let paused = try h.download(s, "https://example.com/paused.bin")
        _ = try h.sync { try $0.pause(paused) }
        h.send(.completed(paused, .stopped(bytesOnDisk: 0)))
        // 3: completed, its event pending.
        let done = try h.download(s, "https://example.com/done.bin")
        h.succeed(done)
        // 4: failed for good.
        let failed = try h.download(s, "https://example.com/failed.bin")
        h.fail(failed, .http(status: 404, "Not Found"))
        // 5: queued behind the concurrency limit.
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        let queued = try h.download(s, "https://example.com/queued.bin")
        XCTAssertEqual(h.state(queued), .queued)
        let events = try h.sync { try $0.pendingEvents(session: s) }
        XCTAssertEqual(events.map(\.transfer), [done, failed])
        // The part file grew after the last checkpoint (no progress event since).
        h.writePart(running, Array(repeating: 7, count: 40))

        let h2 = h.restarted()
        XCTAssertEqual(h2.sync { $0.sessionIDs }, [s])
        XCTAssertEqual(h2.sync { $0.session(s)?.identifier }, "com.example.Podcasts")
        XCTAssertEqual(h2.sync { $0.session(s)?.configuration.retries }, 3)
        XCTAssertEqual(try h2.sync { try $0.transferIDs() }, [running, paused, done, failed, queued])
        XCTAssertEqual(h2.sync { $0.manager.maxConcurrentTransfers }, 1, "manager settings come back too")
        XCTAssertEqual(h2.state(running), .running, "a running transfer carries on")
        let request = try XCTUnwrap(h2.engine.lastRequest(running))
        XCTAssertEqual(request.offset, 40, "from the .part file's real size, not the checkpoint")
        XCTAssertEqual(request.ifRange, "\"r1\"")
        XCTAssertEqual(h2.snapshot(running)?.attempts, 2)
        XCTAssertEqual(h2.state(paused), .paused)
        XCTAssertEqual(h2.state(done), .completed)
        XCTAssertEqual(h2.state(failed), .failed)
        XCTAssertEqual(h2.snapshot(failed)?.httpStatus, 404)
        XCTAssertEqual(h2.state(queued), .queued)
        XCTAssertEqual(h2.engine.startedIDs, [running], "the limit still holds")
        XCTAssertEqual(try h2.sync { try $0.pendingEvents(session: s) }, events, "the same events, in order")
        XCTAssertTrue(h2.observer.completions.isEmpty, "nothing is announced again")
        XCTAssertFalse(h2.observer.events.contains { if case .finished = $0 { return true } else { return false } })
        XCTAssertTrue(h2.sync { $0.hasPendingEvents(session: s) })

        // Counters go on: new ids and serials are new.
        let next = try h2.download(s, "https://example.com/next.bin")
        XCTAssertEqual(next, queued + 1)
        try h2.sync { try $0.cancel(next) }
        XCTAssertEqual(try h2.sync { try $0.pendingEvents(session: s) }.last?.serial, events.last!.serial + 1)
        let s2 = try h2.openSession("com.example.Other")
        XCTAssertEqual(s2, s + 1)
    }

    /// A download asked for four connections whose attempt ran on one wrote a plain
    /// prefix: paused, it continues after a restart from its bytes (as it would without
    /// one). A part file grown past the bytes stored with that mark (a later attempt's
    /// ranges, written before the daemon stored their response) is not taken as a
    /// prefix: the download starts over.
    func testAOneConnectionPrefixIsContinuedAfterARestartUpToItsCheckpoint() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        func pausedPrefix(_ url: String) throws -> TransferID {
            let t = try h.download(s, url) { $0.connections = 4 }
            XCTAssertEqual(h.engine.lastRequest(t)?.connections, 4)
            h.send(.response(t, EngineResponse(status: 200, etag: "\"p\"", expectedTotal: 100 << 20, acceptsRanges: true,
                                               effectiveURL: url)))
            h.writePart(t, Array(repeating: 1, count: 400))
            h.send(.progress(t, bytesWritten: 400, totalOnDisk: 400, expected: 100 << 20))
            XCTAssertFalse(try h.sync { try $0.pause(t) }.isEmpty, "a prefix can be continued")
            h.send(.completed(t, .stopped(bytesOnDisk: 400)))
            return t
        }
        let kept = try pausedPrefix("https://example.com/kept.bin")
        let grown = try pausedPrefix("https://example.com/grown.bin")
        h.writePart(grown, Array(repeating: 1, count: 900))

        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.snapshot(kept)?.resumable, true)
        try h2.sync { try $0.resume(kept) }
        XCTAssertEqual(h2.engine.lastRequest(kept)?.offset, 400, "continued after its 400 bytes")
        XCTAssertEqual(h2.engine.lastRequest(kept)?.ifRange, "\"p\"")
        try h2.sync { try $0.resume(grown) }
        XCTAssertEqual(h2.engine.lastRequest(grown)?.offset, 0, "more on disk than was stored as a prefix: started over")
    }

    /// Running when ferryd stops cleanly, such a prefix keeps every byte: the engine
    /// stops first, then the file's real size is stored with the mark, and the restarted
    /// daemon continues after it.
    func testAOneConnectionPrefixRunningAtACleanStopKeepsItsBytes() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try runningPrefix(h, s, "https://example.com/running.bin")
        h.writePart(t, Array(repeating: 1, count: 900)) // written after the last progress event

        let h2 = h.restarted()
        XCTAssertEqual(h2.state(t), .running)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 900, "continued after all 900 bytes, not started over")
    }

    /// But not when the attempt under way has not been heard from: resumed, it may have
    /// gone on several connections (holes past the prefix) before ferryd stopped, so the
    /// size is not stored as a prefix and the download starts over.
    func testAPrefixWhoseNewAttemptWasNotHeardFromIsNotTrustedAtACleanStop() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try runningPrefix(h, s, "https://example.com/resumed.bin")
        _ = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 400)))
        try h.sync { try $0.resume(t) }
        h.writePart(t, Array(repeating: 1, count: 900)) // ranges of the new attempt, its answer not handled yet

        let h2 = h.restarted()
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 0, "started over, not continued after possible holes")
    }

    /// A download asked for four connections running on one (its answer taken), 400
    /// bytes of it reported.
    private func runningPrefix(_ h: CoreHarness, _ s: SessionID, _ url: String) throws -> TransferID {
        let t = try h.download(s, url) { $0.connections = 4 }
        var answer = EngineResponse(status: 200, etag: "\"p\"", expectedTotal: 100 << 20, acceptsRanges: true, effectiveURL: url)
        answer.connections = 1
        h.send(.response(t, answer))
        h.writePart(t, Array(repeating: 1, count: 400))
        h.send(.progress(t, bytesWritten: 400, totalOnDisk: 400, expected: 100 << 20))
        return t
    }

    func testAcknowledgedEventsStayAcknowledgedAfterRestart() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try h.download(s, "https://example.com/a")
        let b = try h.download(s, "https://example.com/b")
        h.succeed(a)
        h.fail(b, .http(status: 403, "Forbidden"))
        let events = try h.sync { try $0.pendingEvents(session: s) }
        XCTAssertEqual(events.count, 2)
        try h.sync { try $0.acknowledgeEvents(session: s, upTo: events[0].serial) }
        let h2 = h.restarted()
        XCTAssertEqual(try h2.sync { try $0.pendingEvents(session: s) }, [events[1]], "each event exactly once until acknowledged")
        try h2.sync { try $0.acknowledgeEvents(session: s, upTo: events[1].serial) }
        XCTAssertFalse(h2.sync { $0.hasPendingEvents(session: s) })
        let h3 = h2.restarted()
        XCTAssertEqual(try h3.sync { try $0.pendingEvents(session: s) }, [])
    }

    func testIdsAreNeverReusedAfterDeletes() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.A")
        let a = try h.download(s)
        let b = try h.download(s)
        h.succeed(b)
        try h.sync { try $0.remove(b) }
        try h.sync { try $0.cancel(a) }
        try h.sync { try $0.remove(a) }
        try h.sync { try $0.closeSession(s, cancelTransfers: true) }
        XCTAssertEqual(try h.store.load().sessions.count, 0, "the closed session's rows are gone")
        XCTAssertEqual(try h.store.load().transfers.count, 0)
        let h2 = h.restarted()
        let s2 = try h2.openSession("com.example.A")
        XCTAssertEqual(s2, s + 1, "a session id is not handed out twice")
        XCTAssertEqual(try h2.download(s2), b + 1, "nor a transfer id")
        try h2.sync { try $0.cancel(b + 1) }
        XCTAssertEqual(try h2.sync { try $0.pendingEvents(session: s2) }.first?.serial, 3, "nor a serial (1 and 2 went to b and a)")
    }

    /// Ephemeral sessions and their transfers are never stored, yet their ids are not
    /// handed out again after a restart either (the contract: never reused).
    func testEphemeralIdsAreNeverReusedAfterARestart() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.Ephemeral") { $0.persistent = false }
        let transfers = try (0..<3).map { _ in try h.download(s) }
        XCTAssertEqual(try h.store.load().transfers.count, 0, "nothing of an ephemeral session is stored")
        let h2 = h.restarted()
        let s2 = try h2.openSession("com.example.Ephemeral") { $0.persistent = false }
        XCTAssertGreaterThan(s2, s, "a session id is not handed out twice")
        XCTAssertGreaterThan(try h2.download(s2), transfers.max()!, "nor a transfer id")
        // A persistent session's write does not take the reservation back.
        let p = try h2.openSession("com.example.Persistent")
        let kept = try h2.download(p)
        let h3 = h2.restarted()
        let s3 = try h3.openSession("com.example.Ephemeral2") { $0.persistent = false }
        XCTAssertGreaterThan(s3, max(s2, p))
        XCTAssertGreaterThan(try h3.download(s3), kept)
    }

    /// Ephemeral sessions keep working while the store cannot be written (a full
    /// disk): only their ids' reservation waits for it.
    func testEphemeralSessionsWorkWhileTheStoreFails() throws {
        let h = CoreHarness()
        h.store.failure = StoreError("disk full")
        let s = try h.openSession("com.example.Ephemeral") { $0.persistent = false }
        let t = try h.download(s)
        XCTAssertEqual(h.state(t), .running)
        h.store.failure = nil
        let later = try h.download(s)
        let h2 = h.restarted()
        let s2 = try h2.openSession("com.example.Ephemeral") { $0.persistent = false }
        XCTAssertGreaterThan(try h2.download(s2), later, "reserved once the store could be written again")
    }

    /// Reserving costs one store write per block of ids, not one per transfer.
    func testEphemeralTransfersDoNotWriteTheStoreEachTime() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.Ephemeral") { $0.persistent = false }
        _ = try h.download(s)
        let before = try h.store.load().counters
        for _ in 0..<100 { _ = try h.download(s) }
        XCTAssertEqual(try h.store.load().counters, before)
    }

    func testWaitingAndClosingStatesSurviveRestart() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.Later")
        let later = try h.download(s) { $0.startAfter = h.clock.now + 60_000_000 }
        let c = try h.openSession("com.example.Closing")
        let ct = try h.download(c)
        try h.sync { try $0.closeSession(c, cancelTransfers: false) }
        let h2 = h.restarted()
        XCTAssertEqual(h2.state(later), .waiting)
        XCTAssertEqual(h2.snapshot(later)?.waitingReason, "start-after")
        h2.clock.advance(seconds: 61)
        h2.sync { $0.wakeDueTransfers() }
        XCTAssertEqual(h2.state(later), .running)
        XCTAssertEqual(h2.state(ct), .running, "a closing session's transfers still finish")
        h2.succeed(ct)
        XCTAssertNil(h2.sync { $0.session(c) }, "then the session goes")
        XCTAssertFalse(try h2.store.load().sessions.contains { $0.id == c })
    }

    func testInterruptedServerRenameIsRepairedOnRestore() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, "https://example.com/get?id=1") { $0.destination = h.downloads }
        let first = h.destination(t)
        // The server names it before the engine created the part file under the old
        // name; the daemon dies before the attempt ends (which would move the file).
        h.send(.response(t, EngineResponse(status: 200, etag: "\"n\"", expectedTotal: 10,
                                           contentDisposition: "attachment; filename=named.bin", acceptsRanges: true,
                                           effectiveURL: "https://example.com/get?id=1")))
        let named = h.downloads + "/named.bin"
        XCTAssertEqual(h.destination(t), named)
        h.writePart(t, [1, 2, 3], path: first + ".part")
        let h2 = h.restarted()
        XCTAssertEqual(h2.destination(t), named)
        XCTAssertTrue(h2.exists(named + ".part"))
        XCTAssertFalse(h2.exists(first + ".part"))
        XCTAssertEqual(h2.engine.lastRequest(t)?.partPath, named + ".part")
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 3)
    }

    // MARK: - A crash while the finished file moves into place

    /// A transfer whose body is complete in its `.part`, stored as the daemon leaves it
    /// just before moving the file: `finishingPath` names the target.
    private func interruptedFinish(_ h: CoreHarness) throws -> (SessionID, TransferID, part: String, target: String) {
        let s = try h.openSession()
        let t = try h.download(s)
        h.respondResumable(t, etag: "\"f\"", total: 5)
        h.writePart(t, Array("hello".utf8))
        var row = try XCTUnwrap(stored(h, t))
        // As the write before the move stores it: with the response's validator.
        row.finishingPath = h.destination(t)
        row.etag = "\"f\""
        row.snapshot.bytesExpected = 5
        row.snapshot.resumable = true
        row.snapshot.bytesTransferred = 5
        try h.store.write([.saveTransfer(row)])
        return (s, t, h.destination(t) + ".part", h.destination(t))
    }

    func testFinishingPathIsStoredBeforeTheFileMoves() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.succeed(t)
        let rows = h.savedRows(of: t)
        let intentIndex = try XCTUnwrap(rows.firstIndex { $0.finishingPath == h.destination(t) })
        XCTAssertNotEqual(rows[intentIndex].snapshot.state, .completed, "the intent comes before the completion")
        XCTAssertEqual(rows.last?.snapshot.state, .completed)
        XCTAssertNil(rows.last?.finishingPath)
    }

    func testRestartAfterTheMoveCompletesInsteadOfDownloadingAgain() throws {
        let h = CoreHarness()
        let (s, t, part, target) = try interruptedFinish(h)
        try FileManager.default.moveItem(atPath: part, toPath: target)
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .completed)
        XCTAssertEqual(h2.destination(t), target)
        XCTAssertEqual(h2.engine.started, [], "not downloaded again")
        let events = try h2.sync { try $0.pendingEvents(session: s) }
        XCTAssertEqual(events.map(\.kind), [.finished])
        XCTAssertEqual(events.first?.location, target)
        XCTAssertEqual(events.first?.bytes, 5)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: h.downloads), ["file.bin"], "one file, no copy")
        XCTAssertEqual(stored(h2, t)?.snapshot.state, .completed)
        XCTAssertEqual(storedEvents(h2, s).map(\.serial), events.map(\.serial))
        // And only once: a further restart finds it completed.
        let h3 = h2.restarted()
        XCTAssertEqual(try h3.sync { try $0.pendingEvents(session: s) }, events)
    }

    func testRestartBetweenLinkAndUnlinkCompletesAndDropsThePart() throws {
        let h = CoreHarness()
        let (_, t, part, target) = try interruptedFinish(h)
        try FileManager.default.linkItem(atPath: part, toPath: target)
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .completed)
        XCTAssertFalse(h2.exists(part))
        XCTAssertEqual(FileManager.default.contents(atPath: target), Data("hello".utf8))
    }

    func testRestartBeforeTheMoveCarriesOnFromThePart() throws {
        let h = CoreHarness()
        let (_, t, part, _) = try interruptedFinish(h)
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .running)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 5, "the engine finds the body complete")
        XCTAssertEqual(h2.engine.lastRequest(t)?.partPath, part)
        XCTAssertNil(stored(h2, t)?.finishingPath)
    }

    // MARK: - Checkpoints

    func testProgressIsCheckpointedNotWrittenPerChunk() throws {
        let h = CoreHarness(checkpointInterval: 5)
        let s = try h.openSession()
        let t = try h.download(s)
        h.respondResumable(t, etag: "\"c\"", total: 1000)
        let writesBefore = h.store.writes.count
        for i in 1...20 {
            h.send(.progress(t, bytesWritten: 10, totalOnDisk: Int64(i * 10), expected: 1000))
            h.clock.advance(seconds: 0.2)
        }
        XCTAssertEqual(h.store.writes.count, writesBefore, "20 chunks in 4 s: no write")
        h.clock.advance(seconds: 1.1)
        h.send(.progress(t, bytesWritten: 10, totalOnDisk: 210, expected: 1000))
        XCTAssertEqual(h.store.writes.count, writesBefore + 1, "one checkpoint after 5 s")
        XCTAssertEqual(stored(h, t)?.snapshot.bytesTransferred, 210)
        _ = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 250)))
        XCTAssertEqual(stored(h, t)?.snapshot.state, .paused)
        XCTAssertEqual(stored(h, t)?.snapshot.bytesTransferred, 250, "and at the stop")
    }

    // MARK: - Ephemeral sessions

    func testEphemeralSessionWritesNothing() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 1, cap: 1))
        let s = try h.openSession("com.example.Private") { $0.persistent = false }
        let a = try h.download(s, "https://example.com/a")
        let b = try h.download(s, "https://example.com/b")
        h.succeed(a)
        h.fail(b, .network("reset"))
        h.advanceAndWake(seconds: 2)
        _ = try h.sync { try $0.pause(b) }
        h.send(.completed(b, .stopped(bytesOnDisk: 0)))
        let events = try h.sync { try $0.pendingEvents(session: s) }
        try h.sync { try $0.acknowledgeEvents(session: s, upTo: events.last!.serial) }
        try h.sync { try $0.cancel(b) }
        try h.sync { try $0.closeSession(s, cancelTransfers: true) }
        // Nothing but the id counters (so that its ids are never handed out again).
        XCTAssertEqual(h.store.writes.flatMap { $0 }.filter { if case .setCounters = $0 { false } else { true } }, [],
                       "not one write of the session, its transfers or events")
        XCTAssertLessThanOrEqual(h.store.writes.count, 3, "a reservation for the session's id, one for its transfers' ids and one for its events' serials")
        let h2 = h.restarted()
        XCTAssertEqual(h2.sync { $0.sessionIDs }, [], "it vanished with the daemon")
    }

    func testSessionThatBecomesPersistentIsWrittenWithItsTransfers() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.Flip") { $0.persistent = false }
        let t = try h.download(s)
        h.succeed(t)
        XCTAssertEqual(try h.store.load().sessions, [])
        XCTAssertEqual(try h.store.load().transfers, [])
        _ = try h.openSession("com.example.Flip") { $0.persistent = true }
        let contents = try h.store.load()
        XCTAssertEqual(contents.sessions.map(\.id), [s])
        XCTAssertEqual(contents.transfers.map(\.snapshot.id), [t])
        XCTAssertEqual(contents.events[s]?.map(\.transfer), [t])
        _ = try h.openSession("com.example.Flip") { $0.persistent = false }
        XCTAssertEqual(try h.store.load().sessions, [], "and deleted when it becomes ephemeral again")
        XCTAssertEqual(try h.store.load().transfers, [])
    }
}
