import XCTest
@testable import FerryCore

/// The manager's batch ends once nothing has been queued, waiting or running for the
/// settle time: a script that hands over files one call at a time gets one
/// AllFinished, not one per file.
final class BatchSettleTests: XCTestCase {
    func testOneByOneDownloadsThatFinishBetweenCallsMakeOneBatch() throws {
        let h = CoreHarness(batchSettleTime: 1)
        let s = try h.openSession()
        for i in 0..<1_000 {
            let t = try h.download(s, "https://example.com/f\(i).bin") { $0.destination = h.downloads + "/f\(i).bin" }
            h.succeed(t)
            // Each file is done before the next call: the batch is empty between calls.
            h.advanceAndWake(seconds: 0.01)
        }
        XCTAssertEqual(h.observer.allFinishedCounts, [], "still inside the settle time")
        h.advanceAndWake(seconds: 1)
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 1_000)])
        // The session's own AllFinished is not held back.
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s).count, 1_000)
    }

    func testNewWorkDuringTheSettleTimeKeepsTheBatchOpen() throws {
        let h = CoreHarness(batchSettleTime: 1)
        let s = try h.openSession()
        let a = try h.download(s, "https://example.com/a.bin")
        h.succeed(a)
        h.advanceAndWake(seconds: 0.6)
        let b = try h.download(s, "https://example.com/b.bin")
        h.advanceAndWake(seconds: 0.6)
        XCTAssertEqual(h.observer.allFinishedCounts, [], "b.bin runs: the first settle deadline passed, but the batch is live")
        h.fail(b, .network("connection reset"))
        h.advanceAndWake(seconds: 0.9)
        XCTAssertEqual(h.observer.allFinishedCounts, [], "settle time counts from the last end")
        h.advanceAndWake(seconds: 0.2)
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 1, failed: 1)])
    }

    /// A download that fails, has its link renewed and is resumed within the batch is
    /// one download: counted once, by its last outcome, in the manager's and the
    /// session's batch. A failure whose batch has ended stays counted there.
    func testAFailureResumedWithinTheBatchCountsOnceByItsLastOutcome() throws {
        let h = CoreHarness(batchSettleTime: 1)
        let s = try h.openSession()
        let other = try h.download(s, "https://example.com/other.bin")
        let t = try h.download(s, "https://example.com/report.pdf")
        h.fail(t, .http(status: 403, "HTTP 403 Forbidden"))
        try h.sync { try $0.setURL(t, url: "https://example.com/report.pdf?renewed") }
        try h.sync { try $0.resume(t) }
        h.succeed(t)
        h.succeed(other)
        h.advanceAndWake(seconds: 1.1)
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 2)])
        XCTAssertEqual(h.observer.sessionAllFinishedCounts(s), [BatchCounts(succeeded: 2)])

        // Failed, and its batch ended: resuming it later is a new batch's business.
        let late = try h.download(s, "https://example.com/late.bin")
        h.fail(late, .http(status: 404, "HTTP 404 Not Found"))
        h.advanceAndWake(seconds: 1.1)
        try h.sync { try $0.resume(late) }
        h.succeed(late)
        h.advanceAndWake(seconds: 1.1)
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 2), BatchCounts(failed: 1), BatchCounts(succeeded: 1)])
    }

    func testNoSettleEndsAtOnce() throws {
        let h = CoreHarness(batchSettleTime: 0)
        let s = try h.openSession()
        h.succeed(try h.download(s))
        XCTAssertEqual(h.observer.allFinishedCounts, [BatchCounts(succeeded: 1)])
    }
}

/// The core at scale: many queued transfers, decisions from the index.
final class ScaleTests: XCTestCase {
    func testTenThousandQueuedStartInPriorityAndAgeOrderWithinTheLimit() throws {
        let h = CoreHarness()
        let s = try h.openSession { $0.maxConnectionsPerHost = 64 }
        h.sync { try! $0.setMaxConcurrentTransfers(4) }
        var ids: [TransferID] = []
        for i in 0..<10_000 {
            ids.append(try h.download(s, "https://host\(i % 7).example/f\(i).bin") {
                $0.destination = h.downloads + "/f\(i).bin"
                $0.priority = i == 9_999 ? 1 : 0
            })
        }
        XCTAssertEqual(h.engine.startedIDs, Array(ids.prefix(4)))
        let manager = h.sync { $0.manager }
        XCTAssertEqual(manager.activeTransfers, 4)
        XCTAssertEqual(manager.queuedTransfers, 9_996)
        // The high-priority one goes next, then the oldest.
        h.succeed(ids[0])
        h.succeed(ids[1])
        XCTAssertEqual(Array(h.engine.startedIDs.suffix(2)), [ids[9_999], ids[4]])
        XCTAssertEqual(try h.sync { try $0.transferIDs(session: s) }.count, 10_000)
    }

    func testNamesStayUniqueAmongManyLiveTransfers() throws {
        let h = CoreHarness(start: false)
        let s = try h.openSession()
        var names = Set<String>()
        for _ in 0..<300 {
            let t = try h.download(s, "https://example.com/same.bin")
            names.insert(h.destination(t))
        }
        XCTAssertEqual(names.count, 300, "each live transfer claims its own name")
        XCTAssertTrue(names.contains(h.downloads + "/same (299).bin"))
    }

    func testProgressCarriesRateAndExpectedEnd() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.respondResumable(t, etag: "\"v\"", total: 4_000)
        h.clock.advance(seconds: 1)
        h.send(.progress(t, bytesWritten: 1_000, totalOnDisk: 1_000, expected: 4_000))
        let progress = h.observer.coreEvents.compactMap { event -> TransferProgress? in
            if case .progress(let p) = event { return p } else { return nil }
        }
        XCTAssertEqual(progress.count, 1)
        XCTAssertEqual(progress.first?.rate, 1_000)
        XCTAssertEqual(progress.first?.expectedEnd, h.clock.now + 3_000_000)
        XCTAssertNotNil(progress.first?.managerRates, "the first progress event carries the manager's rates")
    }

    func testAWaitingTransferNeedsNoTimerOfItsOwn() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        var ids: [TransferID] = []
        for i in 0..<1_000 {
            ids.append(try h.download(s, "https://example.com/w\(i).bin") {
                $0.destination = h.downloads + "/w\(i).bin"
                $0.startAfter = h.clock.now + UInt64(1 + i % 10) * 1_000_000
            })
        }
        XCTAssertEqual(h.state(ids[0]), .waiting)
        h.advanceAndWake(seconds: 1)
        let queuedOrRunning = ids.filter { [.queued, .running].contains(h.state($0)) }
        XCTAssertEqual(queuedOrRunning.count, 100, "exactly those due after one second go on")
    }
}
