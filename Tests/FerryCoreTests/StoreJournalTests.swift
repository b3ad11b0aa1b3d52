import XCTest
@testable import FerryCore

/// The store journal alone: staged operations written in order with the counters last,
/// kept in order while the store fails (reported once), and the oldest dropped past
/// the limit.
final class StoreJournalTests: XCTestCase {
    private let counters = StoreCounters(nextSessionID: 7, nextTransferID: 9)

    func testAFailedFlushKeepsTheOperationsForTheNextWriteAndIsReportedOnce() {
        let store = InMemoryTransferStore(recordingWrites: true)
        var journal = StoreJournal()
        XCTAssertEqual(journal.flush(to: store, counters: { counters }), .nothingStaged)
        XCTAssertTrue(store.writes.isEmpty, "nothing staged, nothing written")

        store.failure = StoreError("disk full")
        journal.stage(.deleteTransfer(1))
        XCTAssertEqual(journal.flush(to: store, counters: { counters }), .startedFailing("disk full"))
        journal.stage(.deleteTransfer(2))
        XCTAssertEqual(journal.flush(to: store, counters: { counters }), .stillFailing)
        XCTAssertTrue(journal.isFailing)
        XCTAssertEqual(journal.staged, [.deleteTransfer(1), .deleteTransfer(2)])

        store.failure = nil
        XCTAssertEqual(journal.flush(to: store, counters: { counters }), .recovered)
        XCTAssertEqual(store.writes, [[.deleteTransfer(1), .deleteTransfer(2), .setCounters(counters)]])
        XCTAssertTrue(journal.staged.isEmpty)
        XCTAssertFalse(journal.isFailing)

        journal.stage(.deleteSession(3))
        XCTAssertEqual(journal.flush(to: store, counters: { counters }), .written)
    }

    func testAWriteNowGoesAfterTheStagedOperationsAndKeepsThemWhenRefused() throws {
        let store = InMemoryTransferStore(recordingWrites: true)
        var journal = StoreJournal()
        journal.stage(.deleteTransfer(1))
        store.failure = StoreError("disk full")
        XCTAssertThrowsError(try journal.write([.deleteSession(2)], to: store))
        XCTAssertEqual(journal.staged, [.deleteTransfer(1)], "refused: still staged")

        store.failure = nil
        try journal.write([.deleteSession(2), .setCounters(counters)], to: store)
        XCTAssertEqual(store.writes, [[.deleteTransfer(1), .deleteSession(2), .setCounters(counters)]])
        XCTAssertTrue(journal.staged.isEmpty)
        XCTAssertFalse(journal.isFailing, "a write now does not change what flushes report")
    }

    func testALongOutageDropsTheOldestPastTheLimit() {
        let store = InMemoryTransferStore(recordingWrites: true)
        store.failure = StoreError("disk full")
        var journal = StoreJournal(limit: 2)
        for id: TransferID in 1...3 { journal.stage(.deleteTransfer(id)) }
        _ = journal.flush(to: store, counters: { counters })
        XCTAssertEqual(journal.staged, [.deleteTransfer(2), .deleteTransfer(3)])
    }
}
