import XCTest
@testable import FerryCore

/// The coordinator's life alone: it only goes forward, and nested changes end with the
/// outermost one.
final class CoreLifecycleTests: XCTestCase {
    func testItStartsOnceAndNeverAfterAShutdown() {
        var life = CoreLifecycle()
        XCTAssertFalse(life.isRunning)
        XCTAssertTrue(life.start())
        XCTAssertFalse(life.start(), "started already")
        XCTAssertTrue(life.isRunning)
        life.shutDown()
        XCTAssertFalse(life.isRunning)

        var unstarted = CoreLifecycle()
        unstarted.shutDown()
        XCTAssertFalse(unstarted.start(), "shut down before it started: it never starts")
        XCTAssertFalse(unstarted.isRunning)
    }

    func testNestedChangesEndWithTheOutermostOne() {
        var life = CoreLifecycle()
        XCTAssertFalse(life.isInChange)
        life.enterChange()
        XCTAssertTrue(life.isOutermostChange)
        life.enterChange()
        XCTAssertFalse(life.isOutermostChange)
        XCTAssertFalse(life.leaveChange(), "the outer change goes on")
        XCTAssertTrue(life.isInChange)
        XCTAssertTrue(life.leaveChange())
        XCTAssertFalse(life.isInChange)
    }
}
