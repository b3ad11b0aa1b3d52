import Dispatch
import XCTest
@testable import FerryEngine

final class FileJobQueuesTests: XCTestCase {
    /// A slow job (an fdatasync on a busy disk) holds up no other job behind it.
    func testAJobDoesNotWaitBehindABlockedOne() {
        let jobs = FileJobQueues(label: "test.files", width: 2)
        let release = DispatchSemaphore(value: 0)
        let blockedStarted = expectation(description: "blocked job started")
        let secondRan = expectation(description: "second job ran")
        jobs.async {
            blockedStarted.fulfill()
            release.wait()
        }
        wait(for: [blockedStarted], timeout: 10)
        jobs.async { secondRan.fulfill() }
        wait(for: [secondRan], timeout: 10)
        release.signal()
    }

    /// Every job runs once, from many threads handing them in at once.
    func testEveryJobRunsOnce() {
        let jobs = FileJobQueues(label: "test.files")
        let lock = NSLock()
        nonisolated(unsafe) var counts = [Int](repeating: 0, count: 500)
        let done = expectation(description: "all jobs")
        done.expectedFulfillmentCount = counts.count
        DispatchQueue.concurrentPerform(iterations: counts.count) { i in
            jobs.async {
                lock.lock(); counts[i] += 1; lock.unlock()
                done.fulfill()
            }
        }
        wait(for: [done], timeout: 30)
        XCTAssertEqual(Set(counts), [1])
    }
}
