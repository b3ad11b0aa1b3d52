import Dispatch
import XCTest
@testable import FerryCore

/// Engine events reach the coordinator in order; those that arrive while it is busy
/// are handled together, as one change (the inbox itself: FerryConcurrencyTests).
final class EngineEventInboxTests: XCTestCase {
    func testDownloadsEndingWhileTheCoreIsBusyAreOneChange() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let ids = try (0..<5).map { try h.download(s, "https://example.com/f\($0).bin") }
        XCTAssertEqual(h.engine.startedIDs, ids)
        let body = Array("hello".utf8)
        for id in ids {
            h.send(.response(id, EngineResponse(status: 200, expectedTotal: 5, effectiveURL: "https://example.com/f.bin")))
            h.writePart(id, body)
        }
        let writesBefore = h.store.writes.count
        h.observer.clear()

        let busy = DispatchSemaphore(value: 0)
        h.queue.async { busy.wait() }
        for id in ids.reversed() { h.engine.emit(.completed(id, .succeeded(bytesOnDisk: 5, sha256: nil))) }
        busy.signal()
        h.queue.sync {}

        XCTAssertEqual(ids.map { h.state($0) }, Array(repeating: TransferState.completed, count: ids.count))
        let completed = h.observer.events.compactMap { if case .completed(let id, _, _) = $0 { return id } else { return nil } }
        XCTAssertEqual(completed, ids.reversed(), "Completed in the order the engine reported")
        // The five final names in one write before any file moves, then the five final
        // states and events in one more: not two writes per download.
        let writes = Array(h.store.writes.dropFirst(writesBefore))
        XCTAssertEqual(writes.count, 2)
        let named = writes.first?.compactMap { op -> TransferID? in
            if case .saveTransfer(let t) = op, t.finishingPath != nil { return t.snapshot.id } else { return nil }
        }
        XCTAssertEqual(named.map(Set.init), Set(ids), "every final name stored before the moves")
        let managerCounts = h.observer.events.filter { if case .managerChanged = $0 { return true } else { return false } }
        XCTAssertEqual(managerCounts.count, 1, "the counts are announced once, for the whole burst")
    }
}

/// Group commit (`CoreEnvironment.commitWindow`, `CommitHold`): changes brought by engine
/// events within the window of the last store write wait, and are stored, moved and
/// announced together — never announced before stored, never moved before their path
/// is stored.
final class GroupCommitTests: XCTestCase {
    private let body = Array("hello".utf8)

    /// Five running downloads that have their bodies (their responses' rounds waited too).
    private func fiveRunning(_ h: CoreHarness) throws -> [TransferID] {
        let s = try h.openSession()
        let ids = try (0..<5).map { try h.download(s, "https://example.com/f\($0).bin") }
        for id in ids {
            h.send(.response(id, EngineResponse(status: 200, expectedTotal: 5, effectiveURL: "https://example.com/f.bin")))
            h.writePart(id, body)
        }
        return ids
    }

    private func completedIDs(_ h: CoreHarness) -> [TransferID] {
        h.observer.events.compactMap { if case .completed(let id, _, _) = $0 { return id } else { return nil } }
    }

    /// Within a long window, downloads ending in five engine rounds are neither stored,
    /// moved nor announced; a client's call then finds them done first: one write stores
    /// where all five go before any moves, and the five complete in the order they ended,
    /// before the call's own change.
    func testDownloadsEndingWithinTheWindowWaitAndAClientsCallFinishesThemFirst() throws {
        let h = CoreHarness(commitWindow: 3600)
        let ids = try fiveRunning(h)
        let destinations = ids.map { h.destination($0) } // (a read: it finishes what waits)
        let writesBefore = h.store.writes.count
        h.observer.clear()
        for id in ids { h.send(.completed(id, .succeeded(bytesOnDisk: 5, sha256: nil))) }

        // Looked at from outside the core: a read through it would finish what waits.
        XCTAssertEqual(h.store.writes.count, writesBefore, "nothing written within the window")
        XCTAssertEqual(h.observer.events, [], "nothing announced before it is written")
        for path in destinations {
            XCTAssertFalse(h.exists(path), "not moved before its path is written")
            XCTAssertTrue(h.exists(path + ".part"))
        }

        let later = try h.download(try h.openSession("com.example.Later"), "https://example.com/later.bin")
        XCTAssertEqual(ids.map { h.state($0) }, Array(repeating: TransferState.completed, count: ids.count))
        for id in ids { XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: h.destination(id))), Data(body)) }
        XCTAssertEqual(completedIDs(h), ids, "in the order they ended")
        let added = h.observer.events.firstIndex { if case .transferAdded(later, _) = $0 { return true } else { return false } }
        let lastCompleted = h.observer.events.lastIndex { if case .completed = $0 { return true } else { return false } }
        XCTAssertLessThan(lastCompleted ?? .max, added ?? -1, "the waiting changes are announced before the call's")
        let named = h.store.writes.dropFirst(writesBefore).first?.compactMap { op -> TransferID? in
            if case .saveTransfer(let t) = op, t.finishingPath != nil { return t.snapshot.id } else { return nil }
        }
        XCTAssertEqual(named.map(Set.init), Set(ids), "one write names all five before any moves")
    }

    /// With no call, the window's end does it (a one-second window, so that the five
    /// rounds surely fall within it): every download is completed, and each `Completed`
    /// goes out only once the store holds it completed.
    func testTheWindowsEndStoresAndAnnouncesWhatWaited() throws {
        let h = CoreHarness(commitWindow: 1)
        let ids = try fiveRunning(h)
        let writesBefore = h.store.writes.count
        h.observer.clear()
        let announced = expectation(description: "a Completed for each")
        announced.expectedFulfillmentCount = ids.count
        var storedWhenAnnounced: [TransferID: Bool] = [:]
        h.observer.onEvent = { [unowned h] event in
            guard case .completed(let id, _, _) = event else { return }
            storedWhenAnnounced[id] = h.store.writes.contains { write in
                write.contains { if case .saveTransfer(let t) = $0 { return t.snapshot.id == id && t.snapshot.state == .completed } else { return false } }
            }
            announced.fulfill()
        }
        for id in ids { h.send(.completed(id, .succeeded(bytesOnDisk: 5, sha256: nil))) }
        XCTAssertEqual(h.store.writes.count, writesBefore, "the rounds waited")
        wait(for: [announced], timeout: 30)
        h.queue.sync {}
        XCTAssertEqual(ids.map { h.state($0) }, Array(repeating: TransferState.completed, count: ids.count))
        XCTAssertEqual(completedIDs(h), ids)
        XCTAssertEqual(storedWhenAnnounced, Dictionary(uniqueKeysWithValues: ids.map { ($0, true) }))
        for id in ids { XCTAssertTrue(h.exists(h.destination(id))) }
    }

    /// A clean stop finishes what waits: after a restart the downloads are completed
    /// and in place.
    func testAStopFinishesWhatWaits() throws {
        let h = CoreHarness(commitWindow: 3600)
        let ids = try fiveRunning(h)
        for id in ids { h.send(.completed(id, .succeeded(bytesOnDisk: 5, sha256: nil))) }
        let destinations = ids.map { h.destination($0) }
        let after = h.restarted()
        XCTAssertEqual(ids.map { after.state($0) }, Array(repeating: TransferState.completed, count: ids.count))
        for path in destinations { XCTAssertTrue(after.exists(path), path) }
    }

    /// A call on a download whose move waits finds it completed (the waiting change is
    /// finished first): `Cancel` is refused as for any completed transfer, and the file
    /// stays in place.
    func testACallOnADownloadWhoseMoveWaitsFindsItCompleted() throws {
        let h = CoreHarness(commitWindow: 3600)
        let ids = try fiveRunning(h)
        let destination = h.destination(ids[1])
        for id in ids { h.send(.completed(id, .succeeded(bytesOnDisk: 5, sha256: nil))) }
        XCTAssertFerryError(try h.sync { try $0.cancel(ids[1]) }, \.isInvalidState)
        XCTAssertEqual(ids.map { h.state($0) }, Array(repeating: TransferState.completed, count: ids.count))
        XCTAssertTrue(h.exists(destination))
    }

    /// An all-or-nothing group: one member's download ends and waits to be moved, then
    /// another fails in the same window. The group's rule runs after the move: the
    /// completed member's file is removed, the rest cancelled, the group failed; nothing
    /// is left half-done.
    func testAnAllOrNothingGroupWhoseMemberFailsWhileAnotherWaitsToMove() throws {
        let h = CoreHarness(commitWindow: 3600)
        let s = try h.openSession()
        let (group, ids) = try h.sync { core -> (GroupID, [TransferID]) in
            let ids = try (0..<3).map { try core.prepareDownload(session: s, url: "https://example.com/g\($0).bin", options: DownloadOptions()) }
            return (try core.addPreparedDownloadsAsGroup(session: s, description: "", allOrNothing: true), ids)
        }
        for id in ids.prefix(2) {
            h.send(.response(id, EngineResponse(status: 200, expectedTotal: 5, effectiveURL: "https://example.com/g.bin")))
            h.writePart(id, body)
        }
        let kept = h.destination(ids[0])
        h.send(.completed(ids[0], .succeeded(bytesOnDisk: 5, sha256: nil)))
        h.send(.completed(ids[1], .failed(.http(status: 404, "HTTP 404 Not Found"), bytesOnDisk: 0)))
        let snapshot = h.sync { $0.group(group) }
        XCTAssertEqual(h.state(ids[0]), .completed)
        XCTAssertFalse(h.exists(kept), "its file removed: the group failed")
        XCTAssertFalse(h.exists(kept + ".part"))
        XCTAssertEqual(h.state(ids[1]), .failed)
        XCTAssertEqual(h.state(ids[2]), .cancelled)
        XCTAssertEqual(snapshot?.failed, 1)
    }

    // MARK: - A POST's start is stored before it is sent

    /// A download to example.net ends within the window, so the changes after it wait.
    /// Returns a running download to example.com and a POST queued behind it (one
    /// connection per host), after `alsoAdd`'s transfers.
    private func postQueuedWhileChangesWait(_ h: CoreHarness, _ configure: (inout SessionConfigurationUpdate) -> Void = { _ in },
                                            alsoAdd: (SessionID) throws -> Void = { _ in }) throws -> (TransferID, TransferID) {
        let s = try h.openSession { $0.maxConnectionsPerHost = 1; configure(&$0) }
        let download = try h.download(s, "https://example.com/f.bin")
        let post = try h.upload(s, "https://example.com/up/form", method: "POST")
        try alsoAdd(s)
        let other = try h.download(s, "https://example.net/e.bin")
        h.send(.response(other, EngineResponse(status: 200, expectedTotal: 5, effectiveURL: "https://example.net/e.bin")))
        h.writePart(other, body)
        h.send(.completed(other, .succeeded(bytesOnDisk: 5, sha256: nil)))
        return (download, post)
    }

    /// The download to example.com frees its connection (an engine event, in a change
    /// that waits), which starts the POST queued behind it, and one to example.org starts
    /// a PUT. The PUT goes to the engine at once; the POST only once the store holds it
    /// running (here: the next call finishes what waits). Sent before, a kill would leave
    /// it stored as queued, and the restart would send it again.
    func testAPOSTStartedByAWaitingChangeGoesOutOnlyOnceItsStartIsStored() throws {
        let h = CoreHarness(commitWindow: 3600)
        var toOrg: TransferID = 0, put: TransferID = 0
        let (download, post) = try postQueuedWhileChangesWait(h, alsoAdd: { s in
            toOrg = try h.download(s, "https://example.org/g.bin")
            put = try h.upload(s, "https://example.org/up/put.bin", method: "PUT")
        })
        let startedBefore = h.engine.startedIDs
        XCTAssertFalse(startedBefore.contains(post) || startedBefore.contains(put), "both wait for a connection")
        let writesBefore = h.store.writes.count

        h.send(.connectionsFreed(download), .connectionsFreed(toOrg))
        XCTAssertEqual(h.store.writes.count, writesBefore, "the changes wait for the window's end")
        XCTAssertEqual(h.engine.startedIDs, startedBefore + [put], "the PUT goes out at once, the POST waits for the store")

        XCTAssertEqual(h.state(post), .running) // a call: what waits is written first
        XCTAssertEqual(h.engine.startedIDs, startedBefore + [put, post])
        XCTAssertEqual(h.savedRows(of: post, since: writesBefore).last?.snapshot.state, .running)
        XCTAssertEqual(h.engine.started.last?.upload?.method, "POST")
    }

    /// Killed while such a POST waits for its write: the store holds it queued, and it
    /// was never sent, so the restarted core sends it as a first attempt (not as one cut
    /// by the restart, which would count a failed attempt).
    func testAPOSTNotYetStoredAsStartedIsAFirstAttemptAfterAKill() throws {
        let h = CoreHarness(commitWindow: 3600)
        let (download, post) = try postQueuedWhileChangesWait(h)
        h.send(.connectionsFreed(download))
        XCTAssertFalse(h.engine.startedIDs.contains(post), "the POST was not sent")

        let after = h.restarted(crashed: true)
        XCTAssertEqual(after.state(post), .queued, "behind the download again")
        after.send(.connectionsFreed(download))
        XCTAssertEqual(after.state(post), .running)
        XCTAssertEqual(after.snapshot(post)?.attempts, 1)
        XCTAssertEqual(after.snapshot(post)?.errorName, "")
        XCTAssertEqual(after.engine.startedIDs.filter { $0 == post }, [post])
    }

    /// A POST whose start waits for the write is stopped before the engine had it (its
    /// resource-timeout passes, a timer's change): it fails with `Timeout`, was never
    /// sent, and completes once; `Resume` then sends it, once.
    func testAPOSTStoppedBeforeItsStartWasStoredIsNeverSent() throws {
        let h = CoreHarness(commitWindow: 3600)
        let (download, post) = try postQueuedWhileChangesWait(h) { $0.resourceTimeout = 30 }
        h.send(.connectionsFreed(download))
        XCTAssertFalse(h.engine.startedIDs.contains(post))

        h.advanceAndWake(seconds: 31)
        h.queue.sync {}
        XCTAssertEqual(h.state(post), .failed)
        XCTAssertEqual(h.snapshot(post)?.errorName, "org.ferry.Ferry1.Error.Timeout")
        XCTAssertFalse(h.engine.startedIDs.contains(post), "never sent")
        XCTAssertFalse(h.engine.stopped.contains(post), "the engine never had it")
        XCTAssertEqual(h.observer.completions.filter { $0.0 == post }.count, 1)

        try h.sync { try $0.resume(post) }
        XCTAssertEqual(h.state(post), .running)
        XCTAssertEqual(h.engine.startedIDs.filter { $0 == post }, [post])
    }

    /// Its share of the global speed limit changes while its start waits (another
    /// download starts in the window): the POST goes out with the share it has then.
    func testAPOSTWhoseStartWaitsGoesOutWithItsSpeedLimitOfThen() throws {
        let h = CoreHarness(commitWindow: 3600)
        h.sync { $0.setSpeedLimit(600_000) }
        let s = try h.openSession { $0.maxConnectionsPerHost = 1 }
        let download = try h.download(s, "https://example.com/f.bin")
        let post = try h.upload(s, "https://example.com/up/form", method: "POST")
        let toOrg = try h.download(s, "https://example.org/g.bin")
        _ = try h.download(s, "https://example.org/h.bin")
        let other = try h.download(s, "https://example.net/e.bin")
        h.fail(other, .http(status: 404, "HTTP 404 Not Found")) // within the window from here on
        h.send(.connectionsFreed(download))
        XCTAssertEqual(h.queue.sync { h.core.transfers[post]?.appliedSpeedLimit }, 200_000, "a third: with f.bin and g.bin")
        h.send(.connectionsFreed(toOrg)) // h.bin starts: a fourth share
        XCTAssertFalse(h.engine.startedIDs.contains(post))

        XCTAssertEqual(h.state(post), .running)
        XCTAssertEqual(h.queue.sync { h.core.transfers[post]?.appliedSpeedLimit }, 150_000)
        XCTAssertEqual(h.engine.started.last { $0.id == post }?.speedLimit, 150_000, "its share when it went out")
    }

    /// ferryd stops cleanly while such a POST waits for its write: it was never sent, so
    /// it goes back to the queue and the restarted core sends it as a first attempt
    /// (stored running, the restart would count it as cut: failed with `Network` here,
    /// where no retry is allowed).
    func testAPOSTWhoseStartWaitsIsAFirstAttemptAfterACleanStop() throws {
        let h = CoreHarness(commitWindow: 3600)
        let (download, post) = try postQueuedWhileChangesWait(h)
        h.send(.connectionsFreed(download))
        XCTAssertFalse(h.engine.startedIDs.contains(post))

        let after = h.restarted()
        XCTAssertFalse(h.engine.startedIDs.contains(post), "not sent as ferryd went")
        XCTAssertEqual(after.savedRows(of: post).last?.snapshot.attempts, 0)
        after.send(.connectionsFreed(download))
        XCTAssertEqual(after.state(post), .running)
        XCTAssertEqual(after.snapshot(post)?.attempts, 1)
        XCTAssertEqual(after.snapshot(post)?.errorName, "")
    }
}
