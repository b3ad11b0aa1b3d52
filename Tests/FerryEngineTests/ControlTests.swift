import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// stop, speed limits and shutdown.
final class ControlTests: EngineTestCase {
    func testStopMidTransferKeepsThePartFile() throws {
        let body = TestData.bytes(count: 2_000_000, seed: 50)
        server.add(path: "/slow", body: body)
        server.set(.slow(bytesPerSecond: 200_000), on: "/slow")
        let part = partPath("slow.part")
        engine.start(request(1, "/slow", part: part))
        XCTAssertTrue(log.wait(timeout: 20) { events in events.contains { $0.progress != nil } }, "some bytes arrive")

        engine.stop(1)

        let outcome = log.outcome(of: 1, timeout: 20)
        guard case .stopped(let onDisk)? = outcome else {
            return XCTFail("expected stopped, got \(String(describing: outcome))")
        }
        XCTAssertGreaterThan(onDisk, 0)
        XCTAssertLessThan(onDisk, Int64(body.count))
        XCTAssertEqual(contents(part), Array(body[..<Int(onDisk)]), "the part file keeps exactly what was written")
        XCTAssertEqual(log.events(for: 1).compactMap(\.progress).last?.totalOnDisk, onDisk)
        assertWellFormedEvents(1)
    }

    /// A start and its stop that reach the engine together (its thread was busy) end in
    /// `stopped` without touching the disk: no `.part` appears after the transfer was
    /// stopped (a cancelled download's file would otherwise come back for a moment).
    func testStartStoppedBeforeTheEngineTookItCreatesNoFile() throws {
        server.add(path: "/busy", body: TestData.bytes(count: 1_000, seed: 51))
        server.add(path: "/never", body: TestData.bytes(count: 1_000, seed: 52))
        // The engine thread delivers events to this handler: holding it on transfer 1's
        // first event keeps the thread away from its inbox while 2's start and stop arrive.
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let once = FirstTime()
        engine.setEventHandler { [log] event in
            if event.transferID == 1 && once.take() {
                held.signal()
                _ = release.wait(timeout: .now() + 20)
            }
            log!.append(event)
        }
        engine.start(request(1, "/busy"))
        XCTAssertEqual(held.wait(timeout: .now() + 20), .success, "transfer 1 reports")
        let part = partPath("never.part")
        engine.start(request(2, "/never", part: part, offset: 0))
        engine.stop(2)
        release.signal()

        XCTAssertEqual(log.outcome(of: 2, timeout: 20), .stopped(bytesOnDisk: 0))
        XCTAssertFalse(FileManager.default.fileExists(atPath: part), "the stopped start created its part file")
        XCTAssertTrue(server.requests(for: "/never").isEmpty, "nothing was asked of the server")
        XCTAssertEqual(log.outcome(of: 1, timeout: 20), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        // The engine takes the same transfer up again afterwards.
        engine.start(request(2, "/never", part: part))
        XCTAssertTrue(log.wait(timeout: 20) { events in events.filter { $0.transferID == 2 && $0.isCompleted }.count == 2 })
        XCTAssertEqual(log.events(for: 2).last, .completed(2, .succeeded(bytesOnDisk: 1_000, sha256: nil)))
    }

    /// A part file is opened off the engine thread, so a stop can come before, while
    /// or after it is opened, or as the transfer ends. Stops at scattered moments (the
    /// test thread spins a random while between start and stop): each transfer ends
    /// exactly once, stopped with the prefix it wrote or succeeded with the whole file;
    /// afterwards no descriptor is open on any of their files; each starts again.
    func testStopsAtAnyMomentOfAStartEndEachTransferOnceAndLeaveNoDescriptorOpen() throws {
        try stopsAtAnyMomentOfAStart(connections: 1)
    }

    /// The same for downloads allowed several connections, whose part file a file job
    /// opens too (a stop may come before, while or after it does).
    func testStopsAtAnyMomentOfASegmentedStartEndEachOnceAndLeaveNoDescriptorOpen() throws {
        try stopsAtAnyMomentOfAStart(connections: 4)
    }

    private func stopsAtAnyMomentOfAStart(connections: Int) throws {
        let body = TestData.bytes(count: 64 * 1024, seed: 53)
        server.add(path: "/f", body: body)
        var random = SeededRandom(state: 53)
        let ids = (1...150).map { TransferID($0) }
        func start(_ id: TransferID) {
            var r = request(id, "/f")
            r.connections = connections
            engine.start(r)
        }
        for id in ids {
            start(id)
            let until = DispatchTime.now().uptimeNanoseconds + UInt64.random(in: 0..<3_000_000, using: &random)
            while DispatchTime.now().uptimeNanoseconds < until {} // a scattered moment, not a wait for anything
            engine.stop(id)
        }
        XCTAssertTrue(log.wait(timeout: 60) { events in Set(events.filter(\.isCompleted).map(\.transferID)).count == ids.count },
                      "every transfer ends")
        var stopped = 0
        for id in ids {
            assertWellFormedEvents(id)
            let part = partPath("\(id).part")
            switch log.events(for: id).last {
            case .completed(_, .stopped(let onDisk))?:
                stopped += 1
                XCTAssertEqual(contents(part), Array(body[..<Int(onDisk)]), "transfer \(id) keeps exactly what it wrote")
            case .completed(_, .succeeded(let onDisk, _))?:
                XCTAssertEqual(onDisk, Int64(body.count))
                XCTAssertEqual(contents(part), body)
            case let other:
                XCTFail("transfer \(id) ended \(String(describing: other))")
            }
        }
        XCTAssertGreaterThan(stopped, 0, "some stops came in time")
        XCTAssertEqual(descriptorsOpen(under: directory.path), [], "descriptors left open on part files")

        for id in ids.prefix(10) {
            start(id)
            XCTAssertTrue(log.wait(timeout: 20) { events in events.filter { $0.transferID == id && $0.isCompleted }.count == 2 },
                          "transfer \(id) runs again")
            XCTAssertEqual(log.events(for: id).last, .completed(id, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil)))
            XCTAssertEqual(contents(partPath("\(id).part")), body)
        }
    }

    func testStopOfUnknownOrFinishedTransferDoesNothing() throws {
        server.add(path: "/a", body: [1, 2, 3])
        XCTAssertEqual(run(request(1, "/a")), .succeeded(bytesOnDisk: 3, sha256: nil))
        engine.stop(1)
        engine.stop(99)
        // A later transfer's completion proves the engine handled both stops first.
        XCTAssertEqual(run(request(2, "/a")), .succeeded(bytesOnDisk: 3, sha256: nil))
        XCTAssertEqual(log.events(for: 1).filter(\.isCompleted).count, 1)
        XCTAssertTrue(log.events(for: 99).isEmpty)
    }

    func testSpeedLimitIsRoughlyHonoured() throws {
        let body = TestData.bytes(count: 1 << 20, seed: 51)
        server.add(path: "/f", body: body)
        let started = Date()

        let outcome = run(request(1, "/f", speedLimit: 200 * 1024), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        // 1 MiB at 200 KiB/s takes ~5 s; loopback unlimited takes milliseconds.
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 3)
    }

    func testSpeedLimitCanBeLiftedWhileRunning() throws {
        let body = TestData.bytes(count: 4 << 20, seed: 52)
        server.add(path: "/f", body: body)
        engine.start(request(1, "/f", speedLimit: 64 * 1024)) // would take ~64 s
        XCTAssertTrue(log.wait(timeout: 20) { events in events.contains { $0.response != nil } })

        engine.setSpeedLimit(1, bytesPerSecond: 0)

        XCTAssertEqual(log.outcome(of: 1, timeout: 30), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertEqual(contents(partPath("1.part")), body)
    }

    func testShutdownStopsEverythingWithoutEvents() throws {
        server.add(path: "/slow", body: TestData.bytes(count: 1_000_000))
        server.set(.slow(bytesPerSecond: 100_000), on: "/slow")
        engine.start(request(1, "/slow"))
        XCTAssertTrue(log.wait(timeout: 20) { events in events.contains { $0.response != nil } })

        engine.shutdown()
        let countAtShutdown = log.all.count

        engine.start(request(2, "/slow")) // ignored after shutdown
        engine.stop(1)
        XCTAssertFalse(log.wait(timeout: 0.5) { $0.count > countAtShutdown }, "no events after shutdown")
        XCTAssertTrue(FileManager.default.fileExists(atPath: partPath("1.part")))
        engine.shutdown() // idempotent
    }

    func testShutdownFromTheEventHandler() throws {
        server.add(path: "/a", body: [1, 2, 3])
        let engine = CurlEngine()
        let log = EventLog()
        engine.setEventHandler { [unowned engine] event in
            log.append(event)
            if case .completed = event { engine.shutdown() }
        }
        engine.start(request(1, "/a"))
        XCTAssertEqual(log.outcome(of: 1, timeout: 20), .succeeded(bytesOnDisk: 3, sha256: nil))
        engine.shutdown() // joins the thread that ended itself
    }
}

/// The engine thread sleeps in curl_multi_poll when there is nothing to do.
final class IdleTests: EngineTestCase {
    func testIdleEngineThreadDoesNotWakeUp() throws {
        // One transfer first: the thread is surely running, and curl has a cached connection.
        server.add(path: "/a", body: [1, 2, 3])
        XCTAssertEqual(run(request(1, "/a")), .succeeded(bytesOnDisk: 3, sha256: nil))
        let engineThread = try XCTUnwrap(Self.threadIDs(named: "ferry-engine").last, "the engine thread is named")
        let before = try Self.contextSwitches(of: engineThread)
        // A measuring window, not synchronisation: nothing is expected to happen in it.
        let window = NSCondition()
        window.lock()
        _ = window.wait(until: Date().addingTimeInterval(1))
        window.unlock()
        let after = try Self.contextSwitches(of: engineThread)
        XCTAssertLessThanOrEqual(after - before, 2, "an idle engine does not poll in a busy loop")
    }

    private static func threadIDs(named name: String) -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { tid in
            (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == name
        }.sorted { Int($0)! < Int($1)! }
    }

    private static func contextSwitches(of tid: String) throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8)
        return status.split(separator: "\n").filter { $0.contains("ctxt_switches") }
            .compactMap { Int($0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) }
            .reduce(0, +)
    }
}

/// True the first time `take()` is called, from any thread; false after.
private final class FirstTime: @unchecked Sendable {
    // @unchecked Sendable: `taken` is read and written under `lock`.
    private let lock = NSLock()
    private var taken = false

    func take() -> Bool {
        lock.withLock {
            defer { taken = true }
            return !taken
        }
    }
}
