import XCTest
@testable import FerryCore

final class PolicyTests: XCTestCase {
    private func entry(_ id: TransferID, session: SessionID = 1, host: String = "a", priority: Int32 = 0) -> TransferScheduler.Entry {
        TransferScheduler.Entry(id: id, session: session, host: host, priority: priority)
    }

    func testSchedulerOrdersByPriorityThenAge() {
        let s = TransferScheduler(maxConcurrent: 10)
        let picks = s.select(queued: [entry(4, priority: 0), entry(2, priority: -1), entry(5, priority: 1), entry(3, priority: 0)],
                             running: []) { _ in 10 }
        XCTAssertEqual(picks, [5, 3, 4, 2])
    }

    func testSchedulerLimits() {
        let s = TransferScheduler(maxConcurrent: 3)
        XCTAssertEqual(s.select(queued: [entry(3), entry(4)], running: [entry(1), entry(2)]) { _ in 10 }, [3])
        XCTAssertEqual(s.select(queued: [entry(4)], running: [entry(1), entry(2), entry(3)]) { _ in 10 }, [])
        // Per host within a session: host "a" is full, "b" still runs; another session's "a" is separate.
        let picks = s.select(queued: [entry(2, host: "a"), entry(3, host: "b"), entry(4, session: 2, host: "a")],
                             running: [entry(1, host: "a")]) { _ in 1 }
        XCTAssertEqual(picks, [3, 4])
    }

    func testSpeedLimitShares() {
        XCTAssertEqual(SpeedLimitAllocator.effectiveLimit(transfer: 0, session: 0, runningInSession: 1, global: 0, runningOverall: 1), 0)
        XCTAssertEqual(SpeedLimitAllocator.effectiveLimit(transfer: 0, session: 0, runningInSession: 2, global: 1000, runningOverall: 4), 250)
        XCTAssertEqual(SpeedLimitAllocator.effectiveLimit(transfer: 100, session: 0, runningInSession: 2, global: 1000, runningOverall: 4), 100)
        XCTAssertEqual(SpeedLimitAllocator.effectiveLimit(transfer: 0, session: 300, runningInSession: 3, global: 1000, runningOverall: 4), 100)
        XCTAssertEqual(SpeedLimitAllocator.effectiveLimit(transfer: 0, session: 0, runningInSession: 1, global: 2, runningOverall: 5), 1, "never 0 (unlimited) under a limit")
    }

    func testRateEstimatorSmoothsAndPredicts() {
        var r = RateEstimator()
        r.reset(at: 0)
        r.add(bytes: 1000, at: 1_000_000)
        XCTAssertEqual(r.rate, 1000)
        r.add(bytes: 2000, at: 2_000_000)
        XCTAssertEqual(r.rate, 1300)
        XCTAssertEqual(r.expectedEnd(now: 10_000_000, done: 3000, total: 5600), 12_000_000)
        XCTAssertEqual(r.expectedEnd(now: 10_000_000, done: 3000, total: -1), 0)
    }

    func testBackoffPolicy() {
        let p = RetryPolicy.exponentialBackoff(base: 2, cap: 10)
        XCTAssertEqual(p.decide(.network("x"), 1, 5), .retry(afterSeconds: 2))
        XCTAssertEqual(p.decide(.timeout("x"), 3, 5), .retry(afterSeconds: 8))
        XCTAssertEqual(p.decide(.timeout("x"), 5, 5), .retry(afterSeconds: 10))
        XCTAssertEqual(p.decide(.timeout("x"), 6, 5), .fail)
        XCTAssertEqual(p.decide(.http(status: 404, "x"), 1, 5), .fail)
        XCTAssertEqual(p.decide(.http(status: 503, "x"), 1, 5), .retry(afterSeconds: 2))
        XCTAssertEqual(RetryPolicy.never.decide(.network("x"), 1, 5), .fail)
    }
}
