import Dispatch
import XCTest
@testable import FerryCore

/// Engine events reach the coordinator in order; those that arrive while it is busy
/// are handled together, as one change.
final class EngineEventInboxTests: XCTestCase {
    private static func ids(_ events: [EngineEvent]) -> [TransferID] {
        events.map { if case .completed(let id, _) = $0 { return id } else { return 0 } }
    }

    func testOnlyTheFirstEventIntoAnEmptyInboxAsksForAHop() {
        let inbox = EngineEventInbox()
        XCTAssertTrue(inbox.post(.completed(1, .stopped(bytesOnDisk: 0))))
        XCTAssertFalse(inbox.post(.completed(2, .stopped(bytesOnDisk: 0))), "a hop is already on its way")
        XCTAssertFalse(inbox.post(.completed(3, .stopped(bytesOnDisk: 0))))
        XCTAssertEqual(Self.ids(inbox.takeAll()), [1, 2, 3], "oldest first")
        XCTAssertTrue(inbox.takeAll().isEmpty)
        XCTAssertTrue(inbox.post(.completed(4, .stopped(bytesOnDisk: 0))), "empty again: the next event asks anew")
    }

    func testEventsFromManyThreadsAreAllTakenOnceInOrder() {
        // As the coordinator uses it: producers post, and each hop (on one serial
        // queue) takes what is there.
        let inbox = EngineEventInbox()
        let consumer = DispatchQueue(label: "test.consumer")
        nonisolated(unsafe) var taken: [TransferID] = [] // only touched on `consumer`, then after it drained
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for i in 0..<500 where inbox.post(.completed(TransferID(thread * 1000 + i), .stopped(bytesOnDisk: 0))) {
                consumer.async { taken += Self.ids(inbox.takeAll()) }
            }
        }
        consumer.sync {}
        XCTAssertEqual(taken.count, 2000, "no event is left without a hop to take it")
        XCTAssertEqual(Set(taken).count, 2000, "none twice")
        for thread in 0..<4 {
            let mine = taken.filter { $0 / 1000 == TransferID(thread) }
            XCTAssertEqual(mine, mine.sorted(), "each sender's events in the order it sent them")
        }
    }

    func testDownloadsEndingWhileTheCoreIsBusyAreOneChange() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let ids = try (0..<5).map { try h.download(s, "https://example.com/f\($0).bin") }
        XCTAssertEqual(h.engine.startedIDs, ids)
        let body = Array("hello".utf8)
        for id in ids {
            h.send(.response(id, EngineResponse(status: 200, expectedTotal: 5, effectiveURL: "https://example.com/f.bin")))
            h.writePart(id, body)
        }
        let writesBefore = h.store.writes.count
        h.observer.clear()

        let busy = DispatchSemaphore(value: 0)
        h.queue.async { busy.wait() }
        for id in ids.reversed() { h.engine.emit(.completed(id, .succeeded(bytesOnDisk: 5, sha256: nil))) }
        busy.signal()
        h.queue.sync {}

        XCTAssertEqual(ids.map { h.state($0) }, Array(repeating: TransferState.completed, count: ids.count))
        let completed = h.observer.events.compactMap { if case .completed(let id, _, _) = $0 { return id } else { return nil } }
        XCTAssertEqual(completed, ids.reversed(), "Completed in the order the engine reported")
        // The five final names in one write before any file moves, then the five final
        // states and events in one more: not two writes per download.
        let writes = Array(h.store.writes.dropFirst(writesBefore))
        XCTAssertEqual(writes.count, 2)
        let named = writes.first?.compactMap { op -> TransferID? in
            if case .saveTransfer(let t) = op, t.finishingPath != nil { return t.snapshot.id } else { return nil }
        }
        XCTAssertEqual(named.map(Set.init), Set(ids), "every final name stored before the moves")
        let managerCounts = h.observer.events.filter { if case .managerChanged = $0 { return true } else { return false } }
        XCTAssertEqual(managerCounts.count, 1, "the counts are announced once, for the whole burst")
    }
}
