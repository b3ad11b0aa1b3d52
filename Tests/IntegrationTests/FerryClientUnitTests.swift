@testable import FerryClient
import FerryBusClient
import Foundation
import XCTest

/// FerryClient's bookkeeping that needs no service.
final class FerryClientUnitTests: XCTestCase {
    /// What a session acknowledges up to: the lowest completion the app (or a reader
    /// of `FerrySessionEvents`) has not taken, in any order of taking; a serial from before a reset (an
    /// ephemeral session made anew, whose serials start again) takes nothing.
    func testTheLowestUntakenSerial() {
        var u = UntakenSerials()
        XCTAssertNil(u.lowest)
        for s: UInt64 in [3, 4, 5, 9] { u.add(s) }
        u.take(4)
        XCTAssertEqual(u.lowest, 3)
        u.take(3)
        XCTAssertEqual(u.lowest, 5, "4 was taken before")
        u.take(42)
        XCTAssertEqual(u.lowest, 5, "never handed out")
        u.take(5)
        u.take(9)
        XCTAssertNil(u.lowest)
        for s in UInt64(10)...UInt64(2_000) { u.add(s) }
        for s in UInt64(10)...UInt64(1_999) { u.take(s) }
        XCTAssertEqual(u.lowest, 2_000)

        u.removeAll()
        u.add(1)
        u.take(3) // of the session before the reset
        XCTAssertEqual(u.lowest, 1)
        u.add(2)
        u.add(3)
        u.take(1)
        u.take(2)
        XCTAssertEqual(u.lowest, 3, "the new session's 3 is not taken by the old one's")
    }

    /// The issue-43 additions reach a task's snapshot: when the next try comes, and why a
    /// download runs on one connection.
    func testSnapshotCarriesNextAttemptAndSingleConnectionReason() {
        var i = TransferInfo(id: 7, path: "/org/ferry/Ferry1/transfer/7")
        i.state = "waiting"
        i.waitingReason = "retry"
        i.nextAttempt = 1_700_000_000_500_000
        i.singleConnectionReason = "the server does not accept range requests"
        let s = FerryTaskSnapshot(i)
        XCTAssertEqual(s.nextAttempt, Date(timeIntervalSince1970: 1_700_000_000.5))
        XCTAssertEqual(s.singleConnectionReason, "the server does not accept range requests")
        let none = FerryTaskSnapshot(TransferInfo(id: 8, path: "/org/ferry/Ferry1/transfer/8"))
        XCTAssertNil(none.nextAttempt)
        XCTAssertNil(none.singleConnectionReason)
    }
}
