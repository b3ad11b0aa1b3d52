import FerryCore
@testable import FerryEngine
import XCTest

/// The segment map (core type) and the range planner (engine), without a network.
final class SegmentMapTests: XCTestCase {
    func testInsertMergesOverlappingAndAdjacentRanges() throws {
        var map = SegmentMap(total: 100)
        map.insert(10..<20)
        map.insert(30..<40)
        map.insert(20..<25)
        map.insert(35..<50)
        XCTAssertEqual(map.done, [10..<25, 30..<50])
        XCTAssertEqual(map.missing, [0..<10, 25..<30, 50..<100])
        XCTAssertEqual(map.bytesDone, 35)
        XCTAssertEqual(map.contiguousPrefix, 0)
        map.insert(0..<100)
        XCTAssertTrue(map.isComplete)
        XCTAssertEqual(map.contiguousPrefix, 100)
    }

    func testEncodingRoundTripsAndRejectsNonsense() throws {
        let map = try XCTUnwrap(SegmentMap(total: 5000, done: [0..<1000, 2000..<2500]))
        XCTAssertEqual(map.encoded, "5000:0-1000,2000-2500")
        XCTAssertEqual(SegmentMap(encoded: map.encoded), map)
        XCTAssertEqual(SegmentMap(encoded: "7:"), SegmentMap(total: 7))
        for bad in ["", ":", "x:", "-1:", "10:0-11", "10:5-5", "10:6-2", "10:0-1,", "10:a-b", "10:0-1-2"] {
            XCTAssertNil(SegmentMap(encoded: bad), bad)
        }
        let tooMany = (0..<5000).map { "\($0 * 2)-\($0 * 2 + 1)" }.joined(separator: ",")
        XCTAssertNil(SegmentMap(encoded: "100000:" + tooMany))
    }

    func testPlannerSplitsAnUnclaimedRangeAmongIdleConnections() {
        let planner = RangePlanner(minimum: 10)
        let map = SegmentMap(total: 1000)
        // The first connection holds 0..<250; three idle connections share the rest.
        var claims = [RangePlanner.Claim(start: 0, position: 0, end: 250)]
        var ranges: [Range<Int64>] = []
        for idle in (1...3).reversed() {
            guard case .unclaimed(let range)? = planner.next(done: map, claims: claims, idle: idle) else {
                return XCTFail("expected an unclaimed range")
            }
            ranges.append(range)
            claims.append(.init(start: range.lowerBound, position: range.lowerBound, end: range.upperBound))
        }
        XCTAssertEqual(ranges, [250..<500, 500..<750, 750..<1000])
        XCTAssertNil(planner.next(done: map, claims: claims.map { .init(start: $0.start, position: $0.end - 15, end: $0.end) }, idle: 1),
                     "nothing left worth splitting (under twice the minimum)")
    }

    func testPlannerStealsHalfOfTheLargestRemainder() {
        let planner = RangePlanner(minimum: 10)
        var map = SegmentMap(total: 1000)
        map.insert(0..<500)
        let claims = [RangePlanner.Claim(start: 500, position: 600, end: 700),
                      RangePlanner.Claim(start: 700, position: 720, end: 1000)]
        XCTAssertEqual(planner.next(done: map, claims: claims, idle: 1), .steal(victim: 1, at: 860))
    }

    /// With pieces: ranges start and end at piece boundaries (or the file's end), are
    /// no longer than the maximum, and nothing is stolen from a busy connection.
    func testPlannerAlignsRangesToPiecesAndDoesNotSteal() {
        var planner = RangePlanner(minimum: 100)
        planner.alignment = 64
        planner.maximum = 256
        let empty = SegmentMap(total: 1000)
        XCTAssertEqual(planner.next(done: empty, claims: [], idle: 3), .unclaimed(0..<256), "capped, on a boundary")
        XCTAssertEqual(planner.next(done: empty, claims: [.init(start: 0, position: 0, end: 256)], idle: 3), .unclaimed(256..<448),
                       "744 bytes over 3 is 248, down to 192 at a boundary (448)")
        let tail = SegmentMap(total: 1000, done: [0..<960])!
        XCTAssertEqual(planner.next(done: tail, claims: [], idle: 1), .unclaimed(960..<1000), "the short last piece whole")
        let claimed = [RangePlanner.Claim(start: 0, position: 10, end: 1000)]
        XCTAssertNil(planner.next(done: empty, claims: claimed, idle: 3), "no stealing with pieces")
    }

    func testRemoveAndContains() {
        var map = SegmentMap(total: 100, done: [0..<40, 60..<100])!
        map.remove(30..<70)
        XCTAssertEqual(map.done, [0..<30, 70..<100])
        XCTAssertTrue(map.contains(70..<100))
        XCTAssertFalse(map.contains(20..<40))
        map.remove(0..<30)
        XCTAssertEqual(map.done, [70..<100])
        XCTAssertEqual(map.missing, [0..<70])
    }
}
