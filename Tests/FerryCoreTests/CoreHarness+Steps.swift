@testable import FerryCore

extension CoreHarness {
    /// The engine reports a 200 from a server that takes ranges, for example.com/file.bin
    /// (the response most core tests start a download with).
    func respondResumable(_ id: TransferID, etag: String, total: Int64) {
        send(.response(id, EngineResponse(status: 200, etag: etag, expectedTotal: total, acceptsRanges: true,
                                          effectiveURL: "https://example.com/file.bin")))
    }
}

extension CoreHarness {
    /// Sessions "one" and "two", for tests of what stays within a session.
    func openTwoSessions() throws -> (SessionID, SessionID) {
        (try openSession("one"), try openSession("two"))
    }
}

extension CoreHarness {
    /// Moves the clock on and lets the core wake whatever became due (as its timer would).
    func advanceAndWake(seconds: Double) {
        clock.advance(seconds: seconds)
        sync { $0.wakeDueTransfers() }
    }
}
