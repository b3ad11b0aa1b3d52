import XCTest
@testable import FerryCore

/// A batch ends when nothing is queued, waiting or running any more — also when
/// that happens because the user paused the last live transfer.
final class BatchEndTests: XCTestCase {
    func testPausingTheLastLiveTransferEndsTheBatch() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let done = try h.download(s, "https://example.com/a.bin")
        let live = try h.download(s, "https://example.com/b.bin")
        h.succeed(done)
        XCTAssertEqual(h.observer.allFinishedCounts, [], "b.bin still runs")
        _ = try h.sync { try $0.pause(live) }
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 1)])
    }

    func testTheCountsSayTheBatchIsOverBeforeAllFinishedDoes() throws {
        let h = CoreHarness() // batch settle time 0: the manager's AllFinished comes at once
        let s = try h.openSession()
        let done = try h.download(s, "https://example.com/a.bin")
        let live = try h.download(s, "https://example.com/b.bin")
        h.succeed(done)
        h.observer.clear()
        _ = try h.sync { try $0.pause(live) }

        let events = h.observer.events
        let sessionCounts = events.firstIndex(of: .sessionChanged(s, active: 0))
        let managerCounts = events.firstIndex(of: .managerChanged(active: 0, queued: 0))
        let sessionEnd = events.firstIndex { if case .sessionAllFinished = $0 { return true } else { return false } }
        let managerEnd = events.firstIndex { if case .allFinished = $0 { return true } else { return false } }
        for (name, index) in [("session counts", sessionCounts), ("manager counts", managerCounts),
                              ("session AllFinished", sessionEnd), ("AllFinished", managerEnd)] {
            XCTAssertNotNil(index, "\(name) in \(events)")
        }
        XCTAssertLessThan(sessionCounts ?? .max, sessionEnd ?? -1, "ActiveTransfers 0 before the session's AllFinished")
        XCTAssertLessThan(managerCounts ?? .max, managerEnd ?? -1, "ActiveTransfers 0 before the manager's AllFinished")
    }

    func testPausingWithNothingFinishedAnnouncesNothing() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        _ = try h.sync { try $0.pause(t) }
        XCTAssertEqual(h.observer.allFinishedCounts, [], "an empty batch is not reported")
    }
}
