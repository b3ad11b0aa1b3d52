@testable import FerryClient
import DBus
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

    /// A task's status follows what the session hears: properties, `Progress` counts
    /// (and the Foundation `Progress` with them), and the run's end; the creating call's
    /// seed counts only until the service has said something.
    func testTaskStatusFollowsWhatTheSessionHears() {
        let status = TaskStatus(id: 9, path: "/org/ferry/Ferry1/transfer/9")
        status.seed(["Kind": .string("download"), "State": .string("paused")])
        XCTAssertEqual(status.snapshot.state, .paused)
        XCTAssertEqual(status.progress.totalUnitCount, -1)
        status.apply(["State": .string("running"), "HttpStatus": .uint32(200), "BytesExpected": .int64(1_000)])
        status.seed(["State": .string("paused")])
        XCTAssertEqual(status.snapshot.state, .running, "the service's word wins over the seed")
        XCTAssertEqual(status.progress.totalUnitCount, 1_000)
        status.progressed(total: 400, expected: 1_000)
        XCTAssertEqual(status.snapshot.bytesTransferred, 400)
        XCTAssertEqual(status.progress.fractionCompleted, 0.4, accuracy: 1e-9)
        status.ended(state: "completed", errorName: "", errorMessage: "", httpStatus: 0, bytes: 1_000)
        XCTAssertEqual(status.snapshot.state, .completed)
        XCTAssertEqual(status.snapshot.httpStatus, 200, "a status the end does not name stays")
        XCTAssertEqual(status.progress.fractionCompleted, 1.0)

        let unsized = TaskStatus(id: 10, path: "/org/ferry/Ferry1/transfer/10")
        unsized.progressed(total: 300, expected: -1)
        XCTAssertTrue(unsized.progress.isIndeterminate)
        unsized.ended(state: "completed", errorName: "", errorMessage: "", httpStatus: 0, bytes: nil)
        XCTAssertEqual(unsized.progress.fractionCompleted, 1.0, "complete: its size is what it has")
        let failed = TaskStatus(id: 11, path: "/org/ferry/Ferry1/transfer/11")
        failed.ended(state: "failed", errorName: "org.ferry.Ferry1.Error.Http", errorMessage: "404 Not Found", httpStatus: 404, bytes: nil)
        XCTAssertEqual(failed.snapshot.state, .failed)
        XCTAssertEqual(failed.snapshot.error?.httpStatus, 404)
    }

    /// On an app's queue that runs several operations at once, the delegate's calls
    /// still run one at a time and in order, each followed by its `done`.
    func testDelegateCallsRunInOrderOnTheAppsQueue() {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        let calls = DelegateCalls(operationQueue: queue)
        let lock = NSLock()
        nonisolated(unsafe) var order: [Int] = []
        nonisolated(unsafe) var inside = 0
        nonisolated(unsafe) var overlapped = false
        nonisolated(unsafe) var offQueue = 0
        let all = expectation(description: "every call")
        all.expectedFulfillmentCount = 200
        for i in 0..<100 {
            calls.run({
                lock.withLock {
                    inside += 1
                    if inside > 1 { overlapped = true }
                    if OperationQueue.current !== queue { offQueue += 1 }
                    order.append(i)
                }
                lock.withLock { inside -= 1 }
            }, then: { lock.withLock { order.append(-i - 1) }; all.fulfill() })
            calls.run { all.fulfill() }
        }
        wait(for: [all], timeout: 20)
        lock.withLock {
            XCTAssertFalse(overlapped)
            XCTAssertEqual(offQueue, 0)
            XCTAssertEqual(order, (0..<100).flatMap { [$0, -$0 - 1] })
        }
        // Without a queue: at once, on the caller's thread.
        nonisolated(unsafe) var ran = false
        DelegateCalls(operationQueue: nil).run { ran = true }
        XCTAssertTrue(ran)
    }
}
