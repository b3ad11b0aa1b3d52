import XCTest
@testable import FerryCore

/// The outbox alone: events leave in order, once, and one round runs at a time.
final class EventOutboxTests: XCTestCase {
    func testEventsAreTakenInOrderOnce() {
        var outbox = EventOutbox()
        outbox.post(.sessionRemoved(1))
        outbox.post(.sessionRemoved(2))
        XCTAssertTrue(outbox.hasPending)
        let sent = outbox.takePending().compactMap { event -> SessionID? in
            if case .sessionRemoved(let id) = event { return id } else { return nil }
        }
        XCTAssertEqual(sent, [1, 2])
        XCTAssertFalse(outbox.hasPending)
        XCTAssertTrue(outbox.takePending().isEmpty)
    }

    func testOneRoundAtATime() {
        var outbox = EventOutbox()
        XCTAssertTrue(outbox.beginRound())
        XCTAssertFalse(outbox.beginRound(), "a delivery inside a round is left to the round's loop")
        outbox.endRound()
        XCTAssertTrue(outbox.beginRound())
    }
}
