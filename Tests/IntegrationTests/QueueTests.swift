import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

final class QueueTests: FerryTestCase {
    /// Replays the recorded State changes of `paths` and returns the largest number
    /// that were `running` at the same time.
    func maxRunningAtOnce(_ paths: [String]) -> Int {
        var state: [String: String] = [:]
        var most = 0
        for s in signals.all where s.member == "PropertiesChanged" && paths.contains(s.path) {
            guard let st = s.changed["State"]?.string else { continue }
            state[s.path] = st
            most = max(most, state.values.filter { $0 == "running" }.count)
        }
        return most
    }

    func completionOrder(_ paths: [String]) -> [String] {
        signals.all.filter { $0.member == "Completed" && paths.contains($0.path) }.map(\.path)
    }

    /// MaxConcurrentTransfers = 1: one transfer at a time holds a connection, in FIFO
    /// order (the server never answers two at once), and the manager's
    /// ActiveTransfers/QueuedTransfers say so. A download whose body is complete frees
    /// its connection while its file is synced: the next one may start then, so at most
    /// one more counts as running, for that moment.
    func testMaxConcurrentTransfersOneRunsInFIFOOrder() async throws {
        try await client.setManagerProperty("MaxConcurrentTransfers", .uint32(1))
        let value = try await managerProperty("MaxConcurrentTransfers")
        XCTAssertEqual(value?.uint32, 1)
        XCTAssertTrue(signals.signals(path: BusClient.managerPath, member: "PropertiesChanged")
            .contains { $0.changed["MaxConcurrentTransfers"]?.uint32 == 1 }, "the change is announced")

        var bodies: [[UInt8]] = []
        for i in 0..<3 {
            bodies.append(serve("/q\(i).bin", size: 96 * 1024, seed: UInt64(i)))
            // The first runs for 3 s: time enough, on a slow machine, to look at the queue.
            server.set(.slow(bytesPerSecond: (i == 0 ? 32 : 128) * 1024), on: "/q\(i).bin")
        }
        let s = try await session()
        var transfers: [FerryTransfer] = []
        for i in 0..<3 {
            transfers.append(try await s.download(server.url("/q\(i).bin"), options: ["destination": .string(work + "/q\(i).bin")]))
        }
        try await waitForState(transfers[0], "running")
        let m = try await client.managerProperties()
        XCTAssertEqual(m["ActiveTransfers"]?.uint32, 1)
        XCTAssertEqual(m["QueuedTransfers"]?.uint32, 2)
        let state1 = try await transfers[1].info().state
        let state2 = try await transfers[2].info().state
        let states = [state1, state2]
        XCTAssertEqual(states, ["queued", "queued"])

        let paths = transfers.map(\.path)
        for t in transfers { try await signals.completed(t.path, timeout: 30) }
        for i in 0..<3 { assertFile(work + "/q\(i).bin", equals: bodies[i]) }
        XCTAssertEqual(server.mostRequestsInFlight, 1, "the server never answered two at once")
        XCTAssertLessThanOrEqual(maxRunningAtOnce(paths), 2, "one downloading, at most one finishing its sync")
        XCTAssertEqual(completionOrder(paths), paths, "first in, first out")
        let activeValues = signals.signals(path: BusClient.managerPath, member: "PropertiesChanged").compactMap { $0.changed["ActiveTransfers"]?.uint32 }
        XCTAssertLessThanOrEqual(activeValues.max() ?? 0, 2, "Manager.ActiveTransfers: one downloading, at most one finishing: \(activeValues)")
        // The counters settle by the time the batch is announced as finished.
        try await signals.wait("the manager's AllFinished") { s in s.contains { $0.member == "AllFinished" && $0.path == BusClient.managerPath } }
        let after = try await client.managerProperties()
        XCTAssertEqual(after["ActiveTransfers"]?.uint32, 0)
        XCTAssertEqual(after["QueuedTransfers"]?.uint32, 0)
    }

    /// A session's max-connections-per-host = 1 keeps its downloads from one host in line.
    func testPerHostLimitOfSession() async throws {
        var bodies: [[UInt8]] = []
        for i in 0..<3 {
            bodies.append(serve("/h\(i).bin", size: 64 * 1024, seed: UInt64(10 + i)))
            // The first runs for 2 s: time enough, on a slow machine, to look at the second.
            server.set(.slow(bytesPerSecond: (i == 0 ? 32 : 128) * 1024), on: "/h\(i).bin")
        }
        let s = try await session("com.example.PerHost", ["max-connections-per-host": .uint32(1)])
        var transfers: [FerryTransfer] = []
        for i in 0..<3 {
            transfers.append(try await s.download(server.url("/h\(i).bin"), options: ["destination": .string(work + "/h\(i).bin")]))
        }
        try await waitForState(transfers[0], "running")
        let second = try await transfers[1].info().state
        XCTAssertEqual(second, "queued", "the second waits for the host's one connection")
        for t in transfers { try await signals.completed(t.path, timeout: 30) }
        for i in 0..<3 { assertFile(work + "/h\(i).bin", equals: bodies[i]) }
        let paths = transfers.map(\.path)
        XCTAssertEqual(server.mostRequestsInFlight, 1, "the server never answered two at once")
        XCTAssertLessThanOrEqual(maxRunningAtOnce(paths), 2, "one downloading, at most one finishing its sync")
        XCTAssertEqual(completionOrder(paths), paths)
    }

    /// Without limits, downloads run side by side (the default of 6).
    func testDefaultLimitRunsTransfersInParallel() async throws {
        for i in 0..<3 {
            serve("/p\(i).bin", size: 64 * 1024, seed: UInt64(20 + i))
            server.set(.stallAfter(bytes: 1000, times: 1), on: "/p\(i).bin")
        }
        let s = try await session()
        var transfers: [FerryTransfer] = []
        for i in 0..<3 {
            transfers.append(try await s.download(server.url("/p\(i).bin"), options: ["destination": .string(work + "/p\(i).bin")]))
        }
        for t in transfers { try await waitForState(t, "running") }
        let m = try await client.managerProperties()
        XCTAssertEqual(m["ActiveTransfers"]?.uint32, 3)
        XCTAssertEqual(m["QueuedTransfers"]?.uint32, 0)
        let sessionActive = try await s.properties()["ActiveTransfers"]?.uint32
        XCTAssertEqual(sessionActive, 3)
        try await client.cancelAll()
        for t in transfers { try await signals.completed(t.path) }
    }

    /// Starts a download that stays running (the server stalls it) in `session`.
    func stalled(_ s: BusSession, _ name: String) async throws -> FerryTransfer {
        serve("/\(name)", size: 256 * 1024)
        server.set(.stallAfter(bytes: 4096, times: 100), on: "/\(name)")
        let t = try await s.download(server.url("/\(name)"), options: ["destination": .string(work + "/\(name)")])
        try await waitForState(t, "running")
        return t
    }

    func state(_ t: FerryTransfer) async throws -> String { try await t.info().state }

    /// PauseAll/ResumeAll/CancelAll: the session's affect only that session, the
    /// manager's every session.
    func testPauseResumeCancelAllOnSessionAndManager() async throws {
        let a = try await session("com.example.A")
        let b = try await session("com.example.B")
        let ta = try await stalled(a, "a.bin")
        let tb = try await stalled(b, "b.bin")

        try await a.pauseAll()
        try await waitForState(ta, "paused")
        var sb = try await state(tb)
        XCTAssertEqual(sb, "running", "Session.PauseAll leaves other sessions alone")

        try await client.pauseAll()
        try await waitForState(tb, "paused")
        var sa = try await state(ta)
        XCTAssertEqual(sa, "paused")

        var mark = signals.mark
        try await a.resumeAll()
        try await waitForState(ta, ["queued", "running"], since: mark)
        sb = try await state(tb)
        XCTAssertEqual(sb, "paused", "Session.ResumeAll leaves other sessions paused")

        mark = signals.mark
        try await client.resumeAll()
        try await waitForState(tb, ["running"], since: mark)

        try await a.cancelAll()
        let (_, errA, _) = try await signals.completed(ta.path)
        XCTAssertEqual(errA, "org.ferry.Ferry1.Error.Cancelled")
        sb = try await state(tb)
        XCTAssertEqual(sb, "running", "Session.CancelAll leaves other sessions alone")

        try await client.cancelAll()
        let (_, errB, _) = try await signals.completed(tb.path)
        XCTAssertEqual(errB, "org.ferry.Ferry1.Error.Cancelled")
        sa = try await state(ta)
        sb = try await state(tb)
        XCTAssertEqual([sa, sb], ["cancelled", "cancelled"])
        XCTAssertEqual(partFiles(in: work), [], "cancelled transfers leave no partial files")
    }

    /// AllFinished on the session and on the manager counts the batch: 2 ok, 1 failed, 1 cancelled.
    func testAllFinishedCountsTheBatch() async throws {
        let s = try await session()
        let stuck = try await stalled(s, "stuck.bin")
        serve("/ok1.bin", size: 1000, seed: 1)
        serve("/ok2.bin", size: 2000, seed: 2)
        let ok1 = try await s.download(server.url("/ok1.bin"), options: ["destination": .string(work + "/ok1.bin")])
        let ok2 = try await s.download(server.url("/ok2.bin"), options: ["destination": .string(work + "/ok2.bin")])
        let missing = try await s.download(server.url("/nothing-here"), options: ["destination": .string(work + "/nothing")])
        for t in [ok1, ok2, missing] { try await signals.completed(t.path) }
        XCTAssertEqual(signals.signals(member: "AllFinished").count, 0, "no AllFinished while a transfer still runs")

        try await stuck.cancel()
        let sessionPath = s.path
        try await signals.wait("AllFinished on the session and the manager") { sig in
            sig.contains { $0.member == "AllFinished" && $0.path == BusClient.managerPath }
                && sig.contains { $0.member == "AllFinished" && $0.path == sessionPath }
        }
        let onSession = signals.signals(path: s.path, member: "AllFinished")
        let onManager = signals.signals(path: BusClient.managerPath, member: "AllFinished")
        XCTAssertEqual(onSession.count, 1)
        XCTAssertEqual(onManager.count, 1)
        XCTAssertEqual(onSession.first?.args.compactMap(\.uint32), [2, 1, 1], "session (succeeded, failed, cancelled)")
        XCTAssertEqual(onManager.first?.args.compactMap(\.uint32), [2, 1, 1], "manager (succeeded, failed, cancelled)")
        // It comes after the last Completed.
        let all = signals.all
        let lastCompleted = all.lastIndex { $0.member == "Completed" } ?? -1
        let firstAllFinished = all.firstIndex { $0.member == "AllFinished" } ?? -1
        XCTAssertGreaterThan(firstAllFinished, lastCompleted)

        // The next batch starts counting from zero.
        let again = try await s.download(server.url("/ok1.bin"), options: ["destination": .string(work + "/again.bin")])
        try await signals.completed(again.path)
        try await signals.wait("a second AllFinished on the manager") { s in
            s.filter { $0.member == "AllFinished" && $0.path == BusClient.managerPath }.count == 2
        }
        XCTAssertEqual(signals.signals(path: BusClient.managerPath, member: "AllFinished").last?.args.compactMap(\.uint32), [1, 0, 0])
    }

    /// Close(true) cancels the session's transfers and removes the session object.
    func testCloseWithCancelCancelsTransfers() async throws {
        let s = try await session("com.example.Closing")
        let running = try await stalled(s, "c1.bin")
        serve("/c2.bin", size: 1000)
        let paused = try await s.download(server.url("/c2.bin"), options: ["destination": .string(work + "/c2.bin"), "start": .boolean(false)])
        let other = try await session("com.example.Other")
        let keep = try await stalled(other, "keep.bin")

        try await s.close(cancelTransfers: true)
        let (_, e1, _) = try await signals.completed(running.path)
        let (_, e2, _) = try await signals.completed(paused.path)
        XCTAssertEqual(e1, "org.ferry.Ferry1.Error.Cancelled")
        XCTAssertEqual(e2, "org.ferry.Ferry1.Error.Cancelled")
        try await signals.wait("InterfacesRemoved for \(s.path)") { sig in
            sig.contains { $0.member == "InterfacesRemoved" && $0.args.first?.string == s.path }
        }
        let sessions = try await client.listSessions().map(\.path)
        XCTAssertEqual(sessions, [other.path])
        XCTAssertFalse(exists(work + "/c1.bin.part"), "the cancelled transfer's partial file is gone")
        let keepState = try await keep.info().state
        XCTAssertEqual(keepState, "running", "other sessions go on")
    }

    /// Close(false) lets the transfers finish, then the session goes away.
    func testCloseWithoutCancelLetsTransfersFinish() async throws {
        let body = serve("/slowclose.bin", size: 128 * 1024)
        server.set(.slow(bytesPerSecond: 256 * 1024), on: "/slowclose.bin")
        let s = try await session("com.example.Closing")
        let t = try await s.download(server.url("/slowclose.bin"), options: ["destination": .string(work + "/slowclose.bin")])
        try await waitForState(t, "running")
        try await s.close(cancelTransfers: false)
        let (_, errorName, errorMessage) = try await signals.completed(t.path)
        XCTAssertEqual(errorName, "", errorMessage)
        assertFile(work + "/slowclose.bin", equals: body)
        try await signals.wait("InterfacesRemoved for \(s.path)") { sig in
            sig.contains { $0.member == "InterfacesRemoved" && $0.args.first?.string == s.path }
        }
        let sessions = try await client.listSessions().map(\.path)
        XCTAssertFalse(sessions.contains(s.path))
    }
}
