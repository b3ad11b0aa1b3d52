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

    func testPausingWithNothingFinishedAnnouncesNothing() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        _ = try h.sync { try $0.pause(t) }
        XCTAssertEqual(h.observer.allFinishedCounts, [], "an empty batch is not reported")
    }
}
