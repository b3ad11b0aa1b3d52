import Dispatch
import XCTest
@testable import FerryCore

/// Engine events reach the coordinator in order; those that arrive while it is busy
/// are handled together, as one change (the inbox itself: FerryConcurrencyTests).
final class EngineEventInboxTests: XCTestCase {
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
