import XCTest
@testable import FerryCore

/// The budget of files held open for clients, alone: in all and per application.
final class HeldDescriptorsTests: XCTestCase {
    func testAnApplicationMayHoldAQuarterOfTheLimit() {
        var held = HeldDescriptors()
        for _ in 0..<2 { held.count(of: "org.example.App", by: 1) }
        XCTAssertNotNil(held.roomMissing(for: "org.example.App", limit: 8), "2 of 8 is its quarter")
        XCTAssertNil(held.roomMissing(for: "org.example.Other", limit: 8))
        XCTAssertNil(held.roomMissing(for: nil, limit: 8), "an unconfined caller has only the whole budget")
        held.count(of: "org.example.App", by: -1)
        XCTAssertNil(held.roomMissing(for: "org.example.App", limit: 8))
    }

    func testTheWholeBudgetCountsEveryCaller() {
        var held = HeldDescriptors()
        held.count(of: nil, by: 1)
        held.count(of: "org.example.App", by: 1)
        XCTAssertEqual(held.open, 2)
        XCTAssertNotNil(held.roomMissing(for: nil, limit: 2))
        held.count(of: "org.example.App", by: -1)
        XCTAssertNil(held.openByApp["org.example.App"], "an application holding none is not listed")
        XCTAssertNil(held.roomMissing(for: nil, limit: 2))
    }
}
