import XCTest
@testable import FerryCore

final class SessionLifecycleTests: XCTestCase {
    func testAllFinishedPerSessionAndOverall() throws {
        let h = CoreHarness()
        let (s1, s2) = try h.openTwoSessions()
        let a = try h.download(s1, "https://example.com/a")
        let b = try h.download(s1, "https://example.com/b")
        let c = try h.download(s2, "https://example.com/c")
        let d = try h.download(s2, "https://example.com/d")
        let p = try h.download(s2, "https://example.com/p") { $0.start = false }
        h.succeed(a)
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s1), [])
        h.fail(b, .http(status: 500, "the server answered 500"))
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s1), [BatchCounts(succeeded: 1, failed: 1)])
        XCTAssertEqual(h.observer.allFinishedCounts, [])
        try h.sync { try $0.cancel(c) }
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s2), [])
        h.succeed(d)
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s2), [BatchCounts(succeeded: 1, cancelled: 1)], "a paused transfer does not hold it back")
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 2, failed: 1, cancelled: 1)])
        // AllFinished comes after the last transfer's Completed.
        let lastCompleted = h.observer.events.lastIndex(of: .completed(d, serial: 4, errorName: ""))!
        let allFinished = h.observer.events.lastIndex(of: .allFinished(BatchCounts(succeeded: 2, failed: 1, cancelled: 1)))!
        XCTAssertLessThan(lastCompleted, allFinished)
        // A new batch starts from zero.
        try h.sync { try $0.resume(p) }
        h.succeed(p)
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s2).last, BatchCounts(succeeded: 1))
        XCTAssertEqual(h.observer.allFinishedCounts.last, BatchCounts(succeeded: 1))
    }

    func testSessionActiveTransfersIsAnnounced() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        h.observer.clear()
        let t = try h.download(s)
        XCTAssertEqual(h.sync { $0.session(s)?.activeTransfers }, 1)
        XCTAssertTrue(h.observer.events.contains(.sessionChanged(s, active: 1)))
        XCTAssertTrue(h.observer.events.contains(.managerChanged(active: 1, queued: 0)))
        XCTAssertEqual(h.observer.events.first, .transferAdded(t, .queued))
        h.succeed(t)
        XCTAssertTrue(h.observer.events.contains(.sessionChanged(s, active: 0)))
    }

    func testCloseWithCancel() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.Close")
        let running = try h.download(s, "https://example.com/a")
        let paused = try h.download(s, "https://example.com/b") { $0.start = false }
        let done = try h.download(s, "https://example.com/c")
        h.succeed(done)
        h.writePart(running, [1])
        h.observer.clear()
        try h.sync { try $0.closeSession(s, cancelTransfers: true) }
        XCTAssertEqual(h.engine.stopped, [running])
        XCTAssertFalse(h.exists(h.downloads + "/a.part"))
        XCTAssertTrue(h.exists(h.downloads + "/c"), "finished files stay")
        XCTAssertEqual(h.sync { $0.sessionIDs }, [])
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
        XCTAssertEqual(h.observer.completions.map(\.0), [running, paused])
        let removed = h.observer.events.filter { if case .transferRemoved = $0 { return true } else { return false } }
        XCTAssertEqual(removed, [.transferRemoved(running), .transferRemoved(paused), .transferRemoved(done)])
        XCTAssertEqual(h.observer.events.last, .sessionRemoved(s))
        XCTAssertFerryError(try h.sync { try $0.pendingEvents(session: s) }, { $0.isNoSuchSession })
        // The stopped attempt reports in after the transfer is gone: harmless.
        h.send(.completed(running, .stopped(bytesOnDisk: 1)))
        let again = try h.sync { try $0.openSession(identifier: "com.example.Close", configuration: .init()) }
        XCTAssertTrue(again.created)
        XCTAssertNotEqual(again.id, s)
    }

    func testCloseLettingTransfersFinish() throws {
        let h = CoreHarness()
        let s = try h.openSession("com.example.Close")
        let a = try h.download(s, "https://example.com/a")
        let b = try h.download(s, "https://example.com/b")
        try h.sync { try $0.closeSession(s, cancelTransfers: false) }
        XCTAssertEqual(h.sync { $0.sessionIDs }, [s])
        XCTAssertFerryError(try h.download(s, "https://example.com/c"), { $0.isInvalidState && $0.message.contains("closing") })
        // The identifier opens a new session meanwhile.
        let fresh = try h.openSession("com.example.Close")
        XCTAssertNotEqual(fresh, s)
        h.succeed(a)
        XCTAssertEqual(h.sync { $0.sessionIDs }, [s, fresh])
        h.fail(b, .network("reset"))
        XCTAssertEqual(h.sync { $0.sessionIDs }, [fresh])
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
        XCTAssertTrue(h.observer.events.contains(.sessionRemoved(s)))
        XCTAssertTrue(h.exists(h.downloads + "/a"))
    }

    func testCloseEmptySessionGoesAtOnce() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        try h.sync { try $0.closeSession(s, cancelTransfers: false) }
        XCTAssertEqual(h.sync { $0.sessionIDs }, [])
        XCTAssertFerryError(try h.sync { try $0.closeSession(s, cancelTransfers: false) }, { $0.isNoSuchSession })
    }

    func testIdsAreNeverReused() throws {
        let h = CoreHarness()
        let s = try h.openSession("a")
        let t = try h.download(s)
        try h.sync { try $0.cancel(t) }
        try h.sync { try $0.closeSession(s, cancelTransfers: true) }
        let s2 = try h.openSession("a")
        let t2 = try h.download(s2)
        XCTAssertEqual([s, s2], [1, 2])
        XCTAssertEqual([t, t2], [1, 2])
    }

    func testManagerSettingsAndShutdown() throws {
        let h = CoreHarness()
        h.sync { $0.setNotificationsEnabled(false) }
        XCTAssertEqual(h.observer.managerSnapshots.last?.notificationsEnabled, false)
        XCTAssertEqual(h.sync { $0.manager.notificationsEnabled }, false)
        let s = try h.openSession()
        let t = try h.download(s)
        h.sync { $0.shutdown() }
        XCTAssertTrue(h.engine.isShutDown)
        h.observer.clear()
        h.send(.completed(t, .succeeded(bytesOnDisk: 0, sha256: nil)))
        XCTAssertEqual(h.observer.events, [], "nothing after shutdown")
    }
}
