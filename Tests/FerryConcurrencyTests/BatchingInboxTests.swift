import Dispatch
import FerryConcurrency
import Synchronization
import XCTest

/// Items reach the consumer in order, all of them, once; a burst wakes it once; a
/// closed inbox wakes nobody and takes nothing more.
final class BatchingInboxTests: XCTestCase {
    func testOnlyTheFirstItemIntoAnEmptyInboxWakesTheConsumer() {
        let inbox = BatchingInbox<Int>()
        var wakes = 0
        XCTAssertTrue(inbox.append(1) { wakes += 1 })
        XCTAssertTrue(inbox.append(2) { wakes += 1 })
        XCTAssertTrue(inbox.append(3) { wakes += 1 })
        XCTAssertEqual(wakes, 1, "a wake-up is already on its way for 2 and 3")
        XCTAssertEqual(inbox.drain(), [1, 2, 3], "oldest first")
        XCTAssertEqual(inbox.drain(), [])
        inbox.append(4) { wakes += 1 }
        XCTAssertEqual(wakes, 2, "empty again: the next item wakes anew")
    }

    func testAClosedInboxRefusesItemsAndWakesNobody() {
        let inbox = BatchingInbox<String>()
        var wakes = 0
        XCTAssertTrue(inbox.close(with: "last") { wakes += 1 })
        XCTAssertTrue(inbox.isClosed)
        XCTAssertFalse(inbox.append("late") { wakes += 1 }, "refused after close")
        XCTAssertFalse(inbox.close(with: "again") { wakes += 1 }, "closed once")
        XCTAssertEqual(wakes, 1, "only the close itself woke the consumer")
        XCTAssertEqual(inbox.drain(), ["last"])
    }

    func testItemsFromManyThreadsAreAllTakenOnceInOrder() {
        // As the engine and the core use it: producers append, and each wake-up (a hop
        // onto one serial queue) drains what is there.
        let inbox = BatchingInbox<Int>()
        let consumer = DispatchQueue(label: "test.consumer")
        let taken = Mutex<[Int]>([])
        let wakes = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for i in 0..<500 {
                inbox.append(thread * 1000 + i) {
                    wakes.withLock { $0 += 1 }
                    consumer.async { let batch = inbox.drain(); taken.withLock { $0 += batch } }
                }
            }
        }
        consumer.sync {}
        let all = taken.withLock { $0 }
        XCTAssertEqual(all.count, 2000, "no item is left without a wake-up to take it")
        XCTAssertEqual(Set(all).count, 2000, "none twice")
        for thread in 0..<4 {
            let mine = all.filter { $0 / 1000 == thread }
            XCTAssertEqual(mine, mine.sorted(), "each sender's items in the order it sent them")
        }
        XCTAssertLessThanOrEqual(wakes.withLock { $0 }, 2000)
    }
}
