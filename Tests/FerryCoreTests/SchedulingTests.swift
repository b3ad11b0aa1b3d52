import XCTest
@testable import FerryCore

final class SchedulingTests: XCTestCase {
    func testMaxConcurrentAndFIFO() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let ids = try (0..<8).map { try h.download(s, "https://host\($0).example/f") }
        XCTAssertEqual(h.engine.startedIDs, Array(ids.prefix(6)), "default limit 6, oldest first")
        XCTAssertEqual(h.sync { $0.manager.activeTransfers }, 6)
        XCTAssertEqual(h.sync { $0.manager.queuedTransfers }, 2)
        h.succeed(ids[2])
        XCTAssertEqual(h.engine.startedIDs, Array(ids.prefix(7)), "a freed slot goes to the oldest queued")
    }

    /// A download whose body is complete frees its connection while its file is flushed:
    /// the next queued transfer starts then, not after the sync; the first still counts
    /// as running until its attempt ends, and then completes as before.
    func testTheNextTransferStartsWhenTheConnectionIsFreedNotAfterTheFlush() throws {
        let h = CoreHarness()
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        let s = try h.openSession()
        let first = try h.download(s, "https://example.com/1")
        let second = try h.download(s, "https://example.com/2")
        XCTAssertEqual(h.engine.startedIDs, [first])
        h.answerAndWrite(first, Array("hello".utf8), total: 5)
        h.send(.connectionsFreed(first))
        XCTAssertEqual(h.engine.startedIDs, [first, second], "the second starts while the first is flushed")
        XCTAssertEqual(h.state(first), .running, "the first is not done until its flush is")
        XCTAssertEqual(h.sync { $0.manager.activeTransfers }, 2)
        h.send(.completed(first, .succeeded(bytesOnDisk: 5, sha256: nil)))
        XCTAssertEqual(h.state(first), .completed)
        XCTAssertEqual(h.engine.startedIDs, [first, second], "nothing starts twice")

        // The event of a transfer that is not running frees nothing.
        let third = try h.download(s, "https://example.com/3")
        let fourth = try h.download(s, "https://example.com/4")
        h.send(.connectionsFreed(third))
        XCTAssertEqual(h.engine.startedIDs, [first, second], "the second still holds the one connection")
        XCTAssertEqual(h.state(fourth), .queued)
    }

    func testTransfersStartedByOneChangeAreStoredAndAnnouncedWithIt() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let ids = try (0..<6).map { try h.download(s, "https://host\($0).example/f") { $0.start = false } }
        XCTAssertEqual(h.engine.startedIDs, [])
        let writesBefore = h.store.writes.count
        h.observer.clear()

        try h.sync { try $0.resumeAll(session: s) }

        XCTAssertEqual(h.engine.startedIDs, ids)
        XCTAssertEqual(h.store.writes.count - writesBefore, 1, "six transfers resumed and started: one transaction")
        let running = h.observer.events.compactMap { event -> TransferID? in
            if case .transferChanged(let id, .running) = event { return id } else { return nil }
        }
        XCTAssertEqual(running, ids, "each announced running, in start order")
        XCTAssertEqual(try h.store.load().transfers.filter { $0.snapshot.state == .running }.map(\.snapshot.id), ids,
                       "and stored running")
    }

    func testPerHostLimitWithinSession() throws {
        let h = CoreHarness()
        let s = try h.openSession { $0.maxConnectionsPerHost = 2 }
        let a = try h.download(s, "https://same.example/1")
        let b = try h.download(s, "https://SAME.example/2")
        let c = try h.download(s, "https://same.example/3")
        let d = try h.download(s, "https://other.example/4")
        XCTAssertEqual(h.engine.startedIDs, [a, b, d])
        XCTAssertEqual(h.state(c), .queued)
        let s2 = try h.openSession("two") { $0.maxConnectionsPerHost = 1 }
        let e = try h.download(s2, "https://same.example/5")
        XCTAssertEqual(h.state(e), .running, "limits are per session")
        h.fail(a, .network("reset"))
        XCTAssertEqual(h.state(c), .running)
    }

    /// A download on several connections asks for HTTP/1.1 on each: even from an origin
    /// that answers over HTTP/2 it is no stream, and counts against the limits as on an
    /// HTTP/1.1 origin, beside the origin's shared connection; single-connection
    /// downloads still join that connection as streams.
    func testDownloadsOnSeveralConnectionsAreNoStreamsOnAMultiplexingOrigin() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let small = try h.download(s, "https://example.com/small")
        var answer = EngineResponse(status: 200, expectedTotal: 100, effectiveURL: "https://example.com/small")
        answer.multiplexed = true
        h.send(.response(small, answer))
        let segmented = try (0..<10).map { try h.download(s, "https://example.com/big\($0)") { $0.connections = 4 } }
        XCTAssertEqual(segmented.filter { h.state($0) == .running }.count, 5,
                       "six connections to the host at most: the shared one and five downloads of their own")
        let streams = try (0..<10).map { try h.download(s, "https://example.com/s\($0)") }
        XCTAssertEqual(streams.filter { h.state($0) == .running }.count, 10, "streams of the shared connection")
        h.fail(segmented[0], .network("reset"))
        XCTAssertEqual(segmented.filter { h.state($0) == .running }.count, 5, "the next one takes the freed place")
    }

    /// On an HTTP/1.1 origin, downloads on one connection and on several share the
    /// per-host limit, one each.
    func testDownloadsOnOneAndSeveralConnectionsShareAnHTTP1OriginsLimit() throws {
        let h = CoreHarness()
        let s = try h.openSession { $0.maxConnectionsPerHost = 4 }
        let segmented = try (0..<3).map { try h.download(s, "https://example.com/big\($0)") { $0.connections = 4 } }
        let single = try (0..<3).map { try h.download(s, "https://example.com/s\($0)") }
        XCTAssertEqual((segmented + single).filter { h.state($0) == .running }.count, 4)
        XCTAssertEqual(single.filter { h.state($0) == .running }.count, 1, "started in order, oldest first")
    }

    func testPriorityOrder() throws {
        let h = CoreHarness()
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        let s = try h.openSession()
        let first = try h.download(s, "https://example.com/0")
        let low = try h.download(s, "https://example.com/1") { $0.priority = -1 }
        let normal1 = try h.download(s, "https://example.com/2")
        let high = try h.download(s, "https://example.com/3") { $0.priority = 1 }
        let normal2 = try h.download(s, "https://example.com/4")
        h.succeed(first)
        h.succeed(high)
        try h.sync { try $0.setPriority(low, 1) }
        h.succeed(normal1)
        h.succeed(low)
        h.succeed(normal2)
        XCTAssertEqual(h.engine.startedIDs, [first, high, normal1, low, normal2])
    }

    func testSetMaxConcurrentTransfersReschedules() throws {
        let h = CoreHarness()
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        let s = try h.openSession()
        let ids = try (0..<4).map { try h.download(s, "https://example.com/\($0)") }
        XCTAssertEqual(h.engine.startedIDs, [ids[0]])
        h.observer.clear()
        try h.sync { try $0.setMaxConcurrentTransfers(3) }
        XCTAssertEqual(h.engine.startedIDs, Array(ids.prefix(3)))
        XCTAssertEqual(h.observer.managerSnapshots.last?.maxConcurrentTransfers, 3)
        XCTAssertEqual(h.observer.managerSnapshots.last?.activeTransfers, 3)
        XCTAssertEqual(h.observer.managerSnapshots.count, 1, "one change, one signal")
        // Lowering it lets running transfers finish; nothing new starts until below.
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        XCTAssertEqual(h.engine.stopped, [])
        h.succeed(ids[0])
        h.succeed(ids[1])
        XCTAssertEqual(h.state(ids[3]), .queued)
        h.succeed(ids[2])
        XCTAssertEqual(h.state(ids[3]), .running)
    }

    func testStartWaitsForCoordinatorStart() throws {
        let h = CoreHarness(start: false)
        let s = try h.openSession()
        let t = try h.download(s)
        XCTAssertEqual(h.state(t), .queued)
        XCTAssertEqual(h.engine.started, [])
        h.sync { $0.start() }
        XCTAssertEqual(h.state(t), .running)
    }

    func testEngineRequestCarriesSessionSettings() throws {
        let h = CoreHarness()
        let s = try h.openSession {
            $0.headers = ["Authorization": "Bearer x", "Accept": "*/*"]
            $0.requestTimeout = 12.5
            $0.proxy = "socks5h://localhost:1080"
        }
        let t = try h.download(s) { $0.headers = ["accept": "application/octet-stream"] }
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(request.headers.map(\.name), ["Authorization", "accept"])
        XCTAssertEqual(request.headers.map(\.value), ["Bearer x", "application/octet-stream"])
        XCTAssertEqual(request.requestTimeout, 12.5)
        XCTAssertEqual(request.proxy, "socks5h://localhost:1080")
    }

    func testSpeedLimitsAreSharedAndUpdated() throws {
        let h = CoreHarness()
        h.sync { $0.setSpeedLimit(1000) }
        let s = try h.openSession()
        let a = try h.download(s, "https://example.com/a")
        XCTAssertEqual(h.engine.lastRequest(a)?.speedLimit, 1000)
        let b = try h.download(s, "https://example.com/b")
        XCTAssertEqual(h.engine.lastRequest(b)?.speedLimit, 500)
        XCTAssertEqual(h.engine.limits.last?.id, a)
        XCTAssertEqual(h.engine.limits.last?.bps, 500)
        try h.sync { try $0.setTransferSpeedLimit(b, 100) }
        XCTAssertEqual(h.engine.limits.last?.id, b)
        XCTAssertEqual(h.engine.limits.last?.bps, 100)
        XCTAssertEqual(h.snapshot(b)?.speedLimit, 100)
        h.succeed(b)
        XCTAssertEqual(h.engine.limits.last?.id, a)
        XCTAssertEqual(h.engine.limits.last?.bps, 1000)
        h.sync { $0.setSpeedLimit(0) }
        XCTAssertEqual(h.engine.limits.last?.bps, 0)
        XCTAssertEqual(h.sync { $0.manager.speedLimit }, 0)
    }

    func testProgressUpdatesRateAndExpectedEnd() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: 10_000, effectiveURL: "https://example.com/file.bin")))
        h.clock.advance(seconds: 1)
        h.observer.clear()
        h.send(.progress(t, bytesWritten: 1000, totalOnDisk: 1000, expected: 10_000))
        // Progress fields travel by Progress alone, not by transferChanged.
        XCTAssertEqual(h.observer.events, [.progress(t, written: 1000, total: 1000, expected: 10_000)])
        let snap = try XCTUnwrap(h.snapshot(t))
        XCTAssertEqual(snap.bytesTransferred, 1000)
        XCTAssertEqual(snap.rate, 1000)
        XCTAssertEqual(snap.expectedEnd, h.clock.now + 9_000_000)
        XCTAssertEqual(h.sync { $0.manager.downloadRate }, 1000)
    }
}
