import XCTest
@testable import FerryCore

/// What the manager last announced, alone: rates alone never make a managerChanged,
/// and they go with progress at most once a second.
final class PublishedManagerTests: XCTestCase {
    func testOnlyAChangeBesidesTheRatesIsAnnounced() {
        var published = PublishedManager()
        XCTAssertFalse(published.announces(ManagerSnapshot(downloadRate: 500, uploadRate: 20)), "rates alone")
        XCTAssertTrue(published.announces(ManagerSnapshot(activeTransfers: 1, downloadRate: 700)))
        XCTAssertEqual(published.last, ManagerSnapshot(activeTransfers: 1, downloadRate: 700))
        XCTAssertFalse(published.announces(ManagerSnapshot(activeTransfers: 1)), "announced already")

        published.assume(ManagerSnapshot(speedLimit: 9))
        XCTAssertFalse(published.announces(ManagerSnapshot(speedLimit: 9)), "assumed: nothing to announce")
        XCTAssertTrue(published.announces(ManagerSnapshot()))
    }

    func testRatesGoOutAtMostOnceASecondAndAtOnceWhenTheClockWentBack() {
        var published = PublishedManager()
        XCTAssertTrue(published.ratesDue(at: 5_000_000))
        XCTAssertFalse(published.ratesDue(at: 5_999_999))
        XCTAssertTrue(published.ratesDue(at: 6_000_000))
        XCTAssertTrue(published.ratesDue(at: 1_000), "the clock went back")
    }
}
