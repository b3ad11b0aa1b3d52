import XCTest
@testable import FerryCore

final class PolicyTests: XCTestCase {
    private func facts(session: SessionID = 1, host: String = "a", priority: Int32 = 0,
                       state: TransferState = .queued) -> TransferIndex.Facts {
        TransferIndex.Facts(session: session, state: state, key: HostKey(session: session, host: host), priority: priority,
                            startable: state == .queued, holdsConnections: state == .running, waitingForNetwork: false,
                            claim: nil, extraClaim: nil)
    }

    /// Starts what the index offers, in order, as the coordinator does.
    private func picks(_ index: inout TransferIndex, max: Int, perHost: Int) -> [TransferID] {
        var picked: [TransferID] = []
        while let id = index.nextToStart(maxConnections: max, perHostLimit: { _ in perHost }) {
            picked.append(id)
            let queued = facts(session: sessionOf[id] ?? 1, host: hostOf[id] ?? "a", priority: priorityOf[id] ?? 0)
            var running = queued
            running.state = .running
            running.startable = false
            running.holdsConnections = true
            index.update(id, from: queued, to: running)
        }
        return picked
    }

    private var sessionOf: [TransferID: SessionID] = [:]
    private var hostOf: [TransferID: String] = [:]
    private var priorityOf: [TransferID: Int32] = [:]

    private func add(_ index: inout TransferIndex, _ id: TransferID, session: SessionID = 1, host: String = "a",
                     priority: Int32 = 0, state: TransferState = .queued) {
        sessionOf[id] = session; hostOf[id] = host; priorityOf[id] = priority
        index.update(id, from: nil, to: facts(session: session, host: host, priority: priority, state: state))
    }

    func testQueueOrdersByPriorityThenAge() {
        var index = TransferIndex()
        add(&index, 4, priority: 0); add(&index, 2, priority: -1); add(&index, 5, priority: 1); add(&index, 3, priority: 0)
        XCTAssertEqual(picks(&index, max: 10, perHost: 10), [5, 3, 4, 2])
    }

    func testQueueLimits() {
        var index = TransferIndex()
        add(&index, 1, state: .running); add(&index, 2, state: .running); add(&index, 3); add(&index, 4)
        XCTAssertEqual(picks(&index, max: 3, perHost: 10), [3])
        XCTAssertEqual(picks(&index, max: 3, perHost: 10), [], "three run: nothing more starts")

        // Per host within a session: host "a" is full, "b" still runs; another session's "a" is separate.
        var hosts = TransferIndex()
        add(&hosts, 1, host: "a", state: .running); add(&hosts, 2, host: "a"); add(&hosts, 3, host: "b")
        add(&hosts, 4, session: 2, host: "a")
        XCTAssertEqual(picks(&hosts, max: 3, perHost: 1), [3, 4])
    }

    /// Over HTTP/2 the limits count connections: an origin's running transfers share one
    /// as up to `Limits.streamsPerConnection` streams, so 100 run there, and the next
    /// waits for one of them; a host on HTTP/1.1 beside it still takes a connection per
    /// transfer from the same global limit.
    func testAMultiplexingOriginCountsConnectionsNotTransfers() {
        var index = TransferIndex()
        let streams = Limits.streamsPerConnection
        for id in 1...(streams + 1) { add(&index, TransferID(id), host: "h2") }
        for id in 1001...1005 { add(&index, TransferID(id), host: "h1") }
        index.setMultiplexing(HostKey(session: 1, host: "h2"), true)
        let started = picks(&index, max: 4, perHost: 2)
        XCTAssertEqual(started.filter { $0 <= 1000 }.count, streams, "one connection's worth of streams on the h2 origin")
        XCTAssertEqual(started.filter { $0 > 1000 }.count, 2, "the h1 origin gets its 2 connections from the global 4")
        XCTAssertEqual(index.connectionsInUse, 3)

        // The origin turns out to answer over HTTP/1.1 after all: every transfer is a
        // connection again, and nothing more starts until they end.
        index.setMultiplexing(HostKey(session: 1, host: "h2"), false)
        XCTAssertEqual(index.connectionsInUse, streams + 2)
        XCTAssertEqual(picks(&index, max: 4, perHost: 2), [])
    }

    func testQueueFollowsPriorityChangesAndRemovals() {
        var index = TransferIndex()
        for id in 1...5 { add(&index, TransferID(id)) }
        // 4 becomes high priority; 2 is paused (leaves the queue).
        index.update(4, from: facts(), to: facts(priority: 1))
        priorityOf[4] = 1
        index.update(2, from: facts(), to: facts(state: .paused))
        XCTAssertEqual(picks(&index, max: 10, perHost: 10), [4, 1, 3, 5])
        XCTAssertEqual(index.activeTotal, 4)
        XCTAssertEqual(index.unfinishedCount(session: 1), 5, "a paused transfer is unfinished")
    }

    func testClaimsAreFoundByPath() {
        var index = TransferIndex()
        var f = facts()
        f.claim = "/d/a.bin"
        index.update(7, from: nil, to: f)
        XCTAssertEqual(index.owners(of: "/d/a.bin.part"), [7])
        XCTAssertEqual(index.owners(of: "/d/a.bin", except: 7), [])
        var done = f
        done.state = .completed
        done.startable = false
        done.claim = nil
        index.update(7, from: f, to: done)
        XCTAssertEqual(index.owners(of: "/d/a.bin"), [], "a completed transfer claims nothing")
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
