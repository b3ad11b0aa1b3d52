import FerryCore
import XCTest

/// A session's completion events are capped (`CoreEnvironment.pendingEventsPerSession`):
/// the room counts the events held unacknowledged, one for each transfer not ended yet
/// and one for each failed one, so what is refused is what would start a new run, and
/// everything else (pausing, resuming a paused transfer, cancelling) goes on.
final class EventCapTests: XCTestCase {
    func pending(_ h: CoreHarness, _ s: SessionID) -> Int { h.sync { $0.pendingEventCount(session: s) } }

    func testTheRoomCountsWhatMayStillEnd() throws {
        let h = CoreHarness(pendingEventsPerSession: 4)
        let s = try h.openSession()
        let a = try h.download(s)
        let b = try h.download(s)
        try h.sync { try $0.checkRoomForEvents(session: s, starting: 1) }
        XCTAssertFerryError(try h.sync { try $0.checkRoomForEvents(session: s, starting: 2) }, \.isLimitExceeded,
                            "two transfers not ended and two prepared fill a room of 4")
        h.succeed(a)
        h.fail(b, .http(status: 404, "HTTP 404 Not Found"))
        XCTAssertEqual(h.state(b), .failed)
        // Held: 2 events, and b may end once more. One more transfer fits.
        let c = try h.download(s) { $0.start = false }
        XCTAssertFerryError(try h.sync { try $0.checkRoomForEvents(session: s) }, \.isLimitExceeded)
        XCTAssertFerryError(try h.sync { try $0.resume(b) }, \.isLimitExceeded, "a failed transfer's new run")
        XCTAssertEqual(h.state(b), .failed, "a refused resume changes nothing")

        // ResumeAll resumes the paused one and leaves the failed one, without an error.
        try h.sync { try $0.resumeAll(session: s) }
        XCTAssertEqual(h.state(b), .failed)
        XCTAssertNotEqual(h.state(c), .paused)
        h.succeed(c)
        XCTAssertEqual(pending(h, s), 3)

        // Cancelling the failed one adds its event and takes its place: still no room.
        try h.sync { try $0.cancel(b) }
        XCTAssertEqual(pending(h, s), 4)
        XCTAssertFerryError(try h.sync { try $0.checkRoomForEvents(session: s) }, \.isLimitExceeded)
        // Acknowledging makes room; another session's room is its own.
        let other = try h.openSession("com.example.Other")
        try h.sync { try $0.checkRoomForEvents(session: other) }
        let serials = try h.sync { try $0.pendingEvents(session: s) }.map(\.serial)
        try h.sync { try $0.acknowledgeEvents(session: s, upTo: serials[1]) }
        try h.sync { try $0.checkRoomForEvents(session: s, starting: 1) }
    }

    /// Runs that fail and are resumed while the room allows never take a session's
    /// held events past its cap, however they end.
    func testResumedFailuresStayUnderTheCap() throws {
        let h = CoreHarness(pendingEventsPerSession: 5)
        let s = try h.openSession()
        var ids: [TransferID] = []
        while (try? h.sync({ try $0.checkRoomForEvents(session: s) })) != nil { ids.append(try h.download(s)) }
        XCTAssertEqual(ids.count, 5)
        for id in ids { h.fail(id, .network("reset")) }
        for _ in 0..<20 {
            try h.sync { try $0.resumeAll(session: s) }
            for id in ids where h.state(id) != .failed { h.fail(id, .network("reset")) }
            for id in ids where h.state(id) == .failed { try? h.sync { try $0.resume(id) } }
            for id in ids where h.state(id) != .failed { try h.sync { try $0.cancel(id) } }
            XCTAssertLessThanOrEqual(pending(h, s), 5 + ids.count, "at most one event more per transfer than the cap")
        }
        let held = pending(h, s)
        XCTAssertLessThanOrEqual(held, 10)
        for id in ids where h.state(id) == .failed { try h.sync { try $0.cancel(id) } }
        XCTAssertLessThanOrEqual(pending(h, s), 10)
    }

    /// Resuming failed transfers one by one keeps to the room as ResumeAll does: each
    /// resumed run holds room for the event it adds, so the next resume sees it.
    func testSingleResumesKeepToTheRoomAsResumeAllDoes() throws {
        for all in [false, true] {
            let h = CoreHarness(pendingEventsPerSession: 5)
            let s = try h.openSession()
            var ids: [TransferID] = []
            for _ in 0..<4 { ids.append(try h.download(s)) }
            for id in ids { h.fail(id, .http(status: 404, "HTTP 404 Not Found")) }
            let last = try h.sync { try $0.pendingEvents(session: s) }.last!.serial
            try h.sync { try $0.acknowledgeEvents(session: s, upTo: last) }
            // Held: 4 failed transfers, room 1.
            if all {
                try h.sync { try $0.resumeAll(session: s) }
            } else {
                for id in ids { try? h.sync { try $0.resume(id) } }
            }
            let resumed = ids.filter { h.state($0) != .failed }
            XCTAssertEqual(resumed.count, 1, all ? "ResumeAll" : "one by one")
            for id in resumed { h.fail(id, .http(status: 404, "HTTP 404 Not Found")) }
            XCTAssertLessThanOrEqual(pending(h, s) + ids.filter { h.state($0) == .failed }.count, 5,
                                     "events held and failed transfers within the cap")
        }
    }
}
