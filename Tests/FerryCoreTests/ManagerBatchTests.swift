import XCTest
@testable import FerryCore

/// The manager's batch alone: counts with their private part, a failure leaving only
/// the batch it was counted in, and ending starting the next batch empty.
final class ManagerBatchTests: XCTestCase {
    func testAFailureLeavesOnlyTheBatchItWasCountedIn() {
        var batch = ManagerBatch()
        batch.count(.failed, isPrivate: true)
        let counted = batch.number
        batch.uncountFailure(countedIn: counted, isPrivate: true)
        XCTAssertFalse(batch.hasOutcomes)
        XCTAssertEqual(batch.privateCounts, BatchCounts())

        batch.count(.failed, isPrivate: false)
        let ended = batch.end()
        XCTAssertEqual(ended.counts, BatchCounts(failed: 1))
        batch.count(.failed, isPrivate: false)
        batch.uncountFailure(countedIn: counted, isPrivate: false)
        XCTAssertEqual(batch.counts, BatchCounts(failed: 1), "counted in an ended batch: this one keeps its own")
    }

    func testEndingGivesTheCountsAndStartsTheNextBatchEmpty() {
        var batch = ManagerBatch()
        batch.count(.completed, isPrivate: false)
        batch.count(.cancelled, isPrivate: true)
        batch.settle(at: 42)
        XCTAssertEqual(batch.settleDue, 42)
        let ended = batch.end()
        XCTAssertEqual(ended.counts, BatchCounts(succeeded: 1, cancelled: 1))
        XCTAssertEqual(ended.privateCounts, BatchCounts(cancelled: 1))
        XCTAssertFalse(batch.hasOutcomes)
        XCTAssertEqual(batch.number, 1)
        batch.stopSettling()
        XCTAssertNil(batch.settleDue)
    }
}
