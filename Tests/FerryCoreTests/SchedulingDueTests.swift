import XCTest
@testable import FerryCore

/// What scheduling owes, alone: newly startable transfers handed out once, in order,
/// and the speed limits shared out again only when something changed.
final class SchedulingDueTests: XCTestCase {
    func testNewlyQueuedTransfersAreHandedOutOnceInOrder() {
        var due = SchedulingDue()
        due.queued(3)
        due.queued(1)
        XCTAssertEqual(due.takeNewlyQueued(), [3, 1])
        XCTAssertEqual(due.takeNewlyQueued(), [])
    }

    func testLimitsAreSharedAgainOnlyAfterAStartAChangedRunningSetOrAChangedLimit() {
        var due = SchedulingDue()
        XCTAssertTrue(due.sharesLimits(starting: false, runningChanges: 0), "never shared yet")
        XCTAssertFalse(due.sharesLimits(starting: false, runningChanges: 0))
        XCTAssertTrue(due.sharesLimits(starting: true, runningChanges: 0), "a transfer starts")
        XCTAssertTrue(due.sharesLimits(starting: false, runningChanges: 1), "the running set changed")
        XCTAssertFalse(due.sharesLimits(starting: false, runningChanges: 1))
        due.limitChanged()
        XCTAssertTrue(due.sharesLimits(starting: false, runningChanges: 1), "a limit changed")
    }
}
