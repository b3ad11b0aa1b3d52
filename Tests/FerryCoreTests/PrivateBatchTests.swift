import Foundation
import XCTest
@testable import FerryCore

/// Private sessions (`privateSignals`): a sandboxed caller's is private whatever it asks
/// for, and the manager's batch end says which part of its counts is theirs (the bus
/// broadcasts only the rest).
final class PrivateBatchTests: XCTestCase {
    final class Ends: @unchecked Sendable { // under lock
        let lock = NSLock()
        var ends: [BatchEnd] = []
        func add(_ e: BatchEnd) { lock.withLock { ends.append(e) } }
        var all: [BatchEnd] { lock.withLock { ends } }
    }

    func testASandboxedCallersSessionIsPrivateAndItsPartOfTheBatchIsCounted() throws {
        let h = CoreHarness()
        let ends = Ends()
        h.core.queue.sync { h.core.subscribe { if case .allFinished(let e) = $0 { ends.add(e) } } }
        let open = try h.openSession("com.example.Open")
        let quiet = try h.openSession("com.example.Quiet") { $0.privateSignals = true }
        let app = try h.sync {
            var asked = SessionConfigurationUpdate()
            asked.privateSignals = false
            return try $0.openSession(identifier: "com.example.App.Main", configuration: asked, owner: "com.example.App").id
        }
        XCTAssertEqual(h.core.queue.sync { h.core.session(app)?.configuration.privateSignals }, true,
                       "a sandboxed caller's session is private whatever it asked")
        XCTAssertEqual(h.core.queue.sync { h.core.session(open)?.configuration.privateSignals }, false)

        let a = try h.download(open, "https://example.com/a.bin")
        let b = try h.download(quiet, "https://example.com/b.bin")
        let c = try h.download(app, "https://example.com/c.bin")
        h.succeed(a)
        h.succeed(b)
        h.fail(c, .http(status: 404, "Not Found"))
        XCTAssertEqual(ends.all.map(\.counts), [BatchCounts(succeeded: 2, failed: 1)])
        XCTAssertEqual(ends.all.map(\.privateCounts), [BatchCounts(succeeded: 1, failed: 1)])

        // The next batch starts from zero.
        let d = try h.download(quiet, "https://example.com/d.bin")
        h.succeed(d)
        XCTAssertEqual(ends.all.last?.counts, BatchCounts(succeeded: 1))
        XCTAssertEqual(ends.all.last?.privateCounts, BatchCounts(succeeded: 1))
    }
}
