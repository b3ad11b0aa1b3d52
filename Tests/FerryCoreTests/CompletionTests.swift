import XCTest
@testable import FerryCore

final class CompletionTests: XCTestCase {
    func testSuccessRenamesPartAndRecordsEvents() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try h.download(s)
        let b = try h.download(s, "https://example.com/other.bin")
        XCTAssertEqual(h.state(a), .running)
        let request = try XCTUnwrap(h.engine.lastRequest(a))
        XCTAssertEqual(request.partPath, h.downloads + "/file.bin.part")
        XCTAssertEqual(request.offset, 0)
        XCTAssertNil(request.ifRange)
        XCTAssertFalse(request.computeSHA256)
        h.observer.clear()
        h.succeed(a, body: Array("hello".utf8))
        let final = h.downloads + "/file.bin"
        XCTAssertEqual(try String(contentsOfFile: final, encoding: .utf8), "hello")
        XCTAssertFalse(h.exists(final + ".part"))
        let snap = try XCTUnwrap(h.snapshot(a))
        XCTAssertEqual(snap.state, .completed)
        XCTAssertEqual(snap.bytesTransferred, 5)
        XCTAssertEqual(snap.bytesExpected, 5)
        XCTAssertEqual(snap.sha256, "")
        XCTAssertEqual(snap.completed, h.clock.now)
        XCTAssertEqual(snap.attempts, 1)
        XCTAssertEqual(snap.httpStatus, 200)
        XCTAssertTrue(snap.resumable)
        // Progress once (the final counts equal it, so no repeat), then Finished, then Completed.
        let order = h.observer.events.filter {
            switch $0 { case .progress, .finished, .completed: return true; default: return false }
        }
        XCTAssertEqual(order, [.progress(a, written: 5, total: 5, expected: 5), .finished(a, location: final),
                               .completed(a, serial: 1, errorName: "")])

        h.fail(b, .http(status: 404, "the server answered 404 Not Found"), bytes: 0)
        let events = try h.sync { try $0.pendingEvents(session: s) }
        XCTAssertEqual(events, [
            PendingEvent(serial: 1, transfer: a, kind: .finished, location: final, bytes: 5, sha256: nil),
            PendingEvent(serial: 2, transfer: b, kind: .failed, errorName: "org.ferry.Ferry1.Error.Http",
                         errorMessage: "the server answered 404 Not Found", httpStatus: 404, bytes: 0),
        ])
        let failed = try XCTUnwrap(h.snapshot(b))
        XCTAssertEqual(failed.state, .failed)
        XCTAssertEqual(failed.httpStatus, 404)
        XCTAssertEqual(failed.errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertEqual(h.observer.completions.last?.2, "org.ferry.Ferry1.Error.Http")
    }

    func testFinalProgressIsSentWhenCountsChanged() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: -1, effectiveURL: "https://example.com/file.bin")))
        h.writePart(t, Array(repeating: 7, count: 10))
        h.send(.progress(t, bytesWritten: 4, totalOnDisk: 4, expected: -1))
        h.observer.clear()
        h.send(.completed(t, .succeeded(bytesOnDisk: 10, sha256: nil)))
        XCTAssertEqual(h.observer.events.first, .progress(t, written: 6, total: 10, expected: 10))
    }

    func testSerialsAreGlobalAndAcknowledgeDropsUpToSerial() throws {
        let h = CoreHarness()
        let (s1, s2) = try h.openTwoSessions()
        let a = try h.download(s1, "https://example.com/a")
        let b = try h.download(s2, "https://example.com/b")
        let c = try h.download(s1, "https://example.com/c")
        h.succeed(a)
        h.succeed(b)
        try h.sync { try $0.cancel(c) }
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s1) }.map(\.serial), [1, 3])
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s2) }.map(\.serial), [2])
        let cancelled = try h.sync { try $0.pendingEvents(session: s1) }[1]
        XCTAssertEqual(cancelled.kind, .cancelled)
        XCTAssertEqual(cancelled.errorName, "org.ferry.Ferry1.Error.Cancelled")
        try h.sync { try $0.acknowledgeEvents(session: s1, upTo: 2) }
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s1) }.map(\.serial), [3])
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s2) }.map(\.serial), [2], "other sessions untouched")
        try h.sync { try $0.acknowledgeEvents(session: s1, upTo: 3) }
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s1) }, [])
        // Removing a transfer keeps its events.
        try h.sync { try $0.remove(b) }
        XCTAssertNil(h.snapshot(b))
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s2) }.map(\.transfer), [b])
        XCTAssertTrue(h.observer.events.contains(.transferRemoved(b)))
    }

    func testChecksumVerified() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let body = Array("verified".utf8)
        let good = try h.download(s, "https://example.com/good") { $0.sha256 = CoreHarness.sha256Hex(body).uppercased() }
        XCTAssertEqual(h.engine.lastRequest(good)?.computeSHA256, true)
        h.succeed(good, body: body, computeSHA: true)
        XCTAssertEqual(h.state(good), .completed)
        XCTAssertEqual(h.snapshot(good)?.sha256, CoreHarness.sha256Hex(body))
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s) }.first?.sha256, CoreHarness.sha256Hex(body))

        // The engine did not hash: the core hashes the part file itself.
        let fallback = try h.download(s, "https://example.com/fallback") { $0.sha256 = CoreHarness.sha256Hex(body) }
        h.succeed(fallback, body: body, computeSHA: false)
        XCTAssertEqual(h.state(fallback), .completed)
    }

    func testChecksumMismatchFailsAndLeavesNoFile() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s) { $0.sha256 = String(repeating: "0", count: 64) }
        let final = h.destination(t)
        h.observer.clear()
        h.succeed(t, body: Array("tampered".utf8), computeSHA: true)
        let snap = try XCTUnwrap(h.snapshot(t))
        XCTAssertEqual(snap.state, .failed)
        XCTAssertEqual(snap.errorName, "org.ferry.Ferry1.Error.ChecksumMismatch")
        XCTAssertTrue(snap.errorMessage.contains(String(repeating: "0", count: 64)))
        XCTAssertFalse(h.exists(final))
        XCTAssertFalse(h.exists(final + ".part"))
        XCTAssertFalse(h.observer.events.contains { if case .finished = $0 { return true } else { return false } })
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s) }.first?.errorName, "org.ferry.Ferry1.Error.ChecksumMismatch")
    }

    func testFileThatAppearedMeanwhileIsNotClobbered() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        _ = FileManager.default.createFile(atPath: h.downloads + "/file.bin", contents: Data("mine".utf8))
        h.succeed(t, body: Array("theirs".utf8))
        XCTAssertEqual(try String(contentsOfFile: h.downloads + "/file.bin", encoding: .utf8), "mine")
        XCTAssertEqual(h.destination(t), h.downloads + "/file (1).bin")
        XCTAssertEqual(try String(contentsOfFile: h.downloads + "/file (1).bin", encoding: .utf8), "theirs")
        XCTAssertEqual(try h.sync { try $0.pendingEvents(session: s) }.first?.location, h.downloads + "/file (1).bin")

        let o = try h.download(s, "https://example.com/o.bin") { $0.overwrite = true }
        _ = FileManager.default.createFile(atPath: h.downloads + "/o.bin", contents: Data("old".utf8))
        h.succeed(o, body: Array("new".utf8))
        XCTAssertEqual(h.snapshot(o)?.errorMessage, "")
        XCTAssertEqual(h.destination(o), h.downloads + "/o.bin")
        XCTAssertEqual(try String(contentsOfFile: h.downloads + "/o.bin", encoding: .utf8), "new")
    }

    func testFileThatAppearsAfterTheCheckIsNotClobberedEither() throws {
        let store = InMemoryTransferStore(recordingWrites: true)
        let h = CoreHarness(store: store)
        let s = try h.openSession()
        let t = try h.download(s)
        let final = h.downloads + "/file.bin"
        // The moment the core has stored where the file goes (after its own check that
        // the name is free), another program writes a file there.
        store.willWrite = { operations in
            for case .saveTransfer(let stored) in operations where stored.finishingPath == final
                && !FileManager.default.fileExists(atPath: final) {
                _ = FileManager.default.createFile(atPath: final, contents: Data("mine".utf8))
            }
        }
        h.succeed(t, body: Array("theirs".utf8))
        store.willWrite = nil
        XCTAssertEqual(try String(contentsOfFile: final, encoding: .utf8), "mine", "never replaced")
        XCTAssertEqual(h.destination(t), h.downloads + "/file (1).bin")
        XCTAssertEqual(try String(contentsOfFile: h.downloads + "/file (1).bin", encoding: .utf8), "theirs")
        XCTAssertFalse(h.exists(h.downloads + "/file.bin.part"))
        XCTAssertEqual(h.state(t), .completed)
    }

    func testCancelDeletesPartFile() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.writePart(t, [1, 2, 3])
        h.observer.clear()
        try h.sync { try $0.cancel(t) }
        XCTAssertEqual(h.engine.stopped, [t])
        XCTAssertFalse(h.exists(h.destination(t) + ".part"))
        let snap = try XCTUnwrap(h.snapshot(t))
        XCTAssertEqual(snap.state, .cancelled)
        XCTAssertEqual(snap.errorName, "org.ferry.Ferry1.Error.Cancelled")
        XCTAssertEqual(snap.errorMessage, "Cancelled by the user")
        XCTAssertEqual(h.observer.completions.map(\.2), ["org.ferry.Ferry1.Error.Cancelled"])
        // The engine's stopped attempt may have written a last chunk: deleted too.
        h.writePart(t, [4])
        h.send(.completed(t, .stopped(bytesOnDisk: 4)))
        XCTAssertFalse(h.exists(h.destination(t) + ".part"))
        XCTAssertEqual(h.state(t), .cancelled)
        XCTAssertFerryError(try h.sync { try $0.cancel(t) }, { $0.isInvalidState })
        XCTAssertFerryError(try h.sync { try $0.pause(t) }, {
            $0 == .invalidState("transfer \(t) is cancelled; only queued, waiting or running transfers can be paused")
        })
    }

    func testFailedTransferResumesAndRemoveDeletesItsPart() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.respondResumable(t, etag: "\"e\"", total: 10)
        h.writePart(t, [1, 2, 3, 4])
        h.fail(t, .network("the connection was reset"), bytes: 4)
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertEqual(h.snapshot(t)?.bytesTransferred, 4)
        try h.sync { try $0.resume(t) }
        let snap = try XCTUnwrap(h.snapshot(t))
        XCTAssertEqual(snap.state, .running)
        XCTAssertEqual(snap.errorName, "")
        XCTAssertEqual(snap.attempts, 2)
        XCTAssertEqual(h.engine.lastRequest(t)?.offset, 4)
        XCTAssertEqual(h.engine.lastRequest(t)?.ifRange, "\"e\"")
        h.fail(t, .network("again"), bytes: 4)
        try h.sync { try $0.remove(t) }
        XCTAssertFalse(h.exists(h.downloads + "/file.bin.part"))
    }

    func testStartFalseAndStartAfter() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let paused = try h.download(s, "https://example.com/p") { $0.start = false }
        XCTAssertEqual(h.state(paused), .paused)
        let later = try h.download(s, "https://example.com/l") { $0.startAfter = h.clock.now + 60_000_000 }
        XCTAssertEqual(h.snapshot(later)?.state, .waiting)
        XCTAssertEqual(h.snapshot(later)?.waitingReason, "start-after")
        XCTAssertEqual(h.engine.started, [])
        h.advanceAndWake(seconds: 30)
        XCTAssertEqual(h.state(later), .waiting)
        h.advanceAndWake(seconds: 31)
        XCTAssertEqual(h.state(later), .running)
        XCTAssertEqual(h.snapshot(later)?.waitingReason, "")
        XCTAssertEqual(h.snapshot(later)?.started, h.clock.now)
        XCTAssertEqual(h.engine.startedIDs, [later])
        try h.sync { try $0.resume(paused) }
        XCTAssertEqual(h.state(paused), .running)
    }

    func testRetryPolicyMakesTransferWait() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 1 }
        let t = try h.download(s)
        h.fail(t, .timeout("no data for 60 seconds"))
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.snapshot(t)?.waitingReason, "retry")
        XCTAssertEqual(h.observer.completions.count, 0)
        h.advanceAndWake(seconds: 2)
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.snapshot(t)?.attempts, 2)
        h.fail(t, .timeout("no data for 60 seconds"))
        XCTAssertEqual(h.state(t), .failed, "retries used up")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Timeout")
    }

    func testRealTimerMovesStartAfterTransfer() throws {
        // The due timer itself (real time, 1 ms); waited for with a bound, not slept on.
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s) { $0.startAfter = h.clock.now + 1_000 }
        XCTAssertEqual(h.state(t), .waiting)
        let running = expectation(description: "started by its timer")
        h.sync { _ in
            h.observer.onEvent = { if $0 == .transferChanged(t, .running) { running.fulfill() } }
            h.clock.advance(seconds: 1)
        }
        wait(for: [running], timeout: 5)
        XCTAssertEqual(h.state(t), .running)
    }
}
