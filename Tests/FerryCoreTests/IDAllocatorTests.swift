import XCTest
@testable import FerryCore

/// The id allocator alone: ids and serials come once each, and the store's counters are
/// moved a block ahead of ephemeral ids only when those reach the last reservation.
final class IDAllocatorTests: XCTestCase {
    private let block = IDAllocator.reservationBlock

    func testSerialsAndIDsComeOnceEach() {
        var ids = IDAllocator()
        XCTAssertEqual(ids.takeSerial(), 1)
        XCTAssertEqual(ids.takeSerial(), 2)
        XCTAssertEqual(ids.nextSessionID, 1)
        ids.tookSession(1)
        XCTAssertEqual(ids.nextSessionID, 2)
        ids.tookTransfers(through: 3)
        XCTAssertEqual(ids.nextTransferID, 4)
        XCTAssertEqual(ids.counters(nextGroupID: 9),
                       StoreCounters(nextSessionID: 2, nextTransferID: 4, nextSerial: 3, nextGroupID: 9))
    }

    func testReservationMovesTheCountersABlockAheadOnce() throws {
        var ids = IDAllocator()
        let first = try XCTUnwrap(ids.reservation(transfer: 1, nextGroupID: 1))
        XCTAssertEqual(first.nextTransferID, 1 + block)
        XCTAssertEqual(first.nextSessionID, 1, "only what reached the reservation moves")
        ids.reserved(first)
        XCTAssertNil(ids.reservation(transfer: block, nextGroupID: 1), "covered by the block written")
        ids.tookTransfers(through: block)
        XCTAssertEqual(ids.counters(nextGroupID: 1).nextTransferID, 1 + block)
        let second = try XCTUnwrap(ids.reservation(transfer: 1 + block, nextGroupID: 1))
        XCTAssertEqual(second.nextTransferID, 1 + 2 * block)
    }

    func testAnUnwrittenReservationIsAskedForAgain() {
        let ids = IDAllocator()
        XCTAssertNotNil(ids.reservation(serial: 5, nextGroupID: 1))
        XCTAssertNotNil(ids.reservation(serial: 5, nextGroupID: 1), "not reserved until `reserved` says it was written")
    }

    func testCountersStayPastReservedIDs() {
        var ids = IDAllocator()
        ids.reserved(StoreCounters(nextSessionID: 50, nextTransferID: 60, nextSerial: 70))
        XCTAssertEqual(ids.counters(nextGroupID: 1),
                       StoreCounters(nextSessionID: 50, nextTransferID: 60, nextSerial: 70, nextGroupID: 1))
    }

    func testRestoreCarriesOnPastTheStoredCountersAndIDs() {
        var ids = IDAllocator()
        ids.restore(StoreCounters(nextSessionID: 10, nextTransferID: 5, nextSerial: 3),
                    maxSession: 4, maxTransfer: 20, maxSerial: 30)
        XCTAssertEqual(ids.nextSessionID, 10)
        XCTAssertEqual(ids.nextTransferID, 21)
        XCTAssertEqual(ids.nextSerial, 31)
    }
}
