import Dispatch
import XCTest
@testable import DBus

/// ferryd's tasks run on a serial queue of their own, not on libdispatch's global
/// pool (whose first worker starts a once-a-second timer for the rest of the process).
final class QueueTaskExecutorTests: XCTestCase {
    func testTaskCodeRunsOnTheExecutorsQueueBeforeAndAfterAnAwait() async {
        let executor = QueueTaskExecutor(label: "test.tasks")
        let key = DispatchSpecificKey<String>()
        executor.queue.setSpecific(key: key, value: "tasks")
        let elsewhere = DispatchQueue(label: "test.elsewhere")

        let seen = await Task(executorPreference: executor) { () -> [String?] in
            let before = DispatchQueue.getSpecific(key: key)
            // Resumed from another queue: the rest of the task must come back.
            let resumedOn = await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
                elsewhere.async { c.resume(returning: DispatchQueue.getSpecific(key: key)) }
            }
            let after = DispatchQueue.getSpecific(key: key)
            return [before, resumedOn, after]
        }.value
        XCTAssertEqual(seen, ["tasks", nil, "tasks"])
    }

    func testOnQueueUsesTheSharedExecutor() async {
        let key = DispatchSpecificKey<Bool>()
        QueueTaskExecutor.shared.queue.setSpecific(key: key, value: true)
        defer { QueueTaskExecutor.shared.queue.setSpecific(key: key, value: nil) }
        let ran = expectation(description: "task ran")
        nonisolated(unsafe) var onShared: Bool?
        Task.onQueue {
            onShared = DispatchQueue.getSpecific(key: key)
            ran.fulfill()
        }
        await fulfillment(of: [ran], timeout: 10)
        XCTAssertEqual(onShared, true)
    }
}
