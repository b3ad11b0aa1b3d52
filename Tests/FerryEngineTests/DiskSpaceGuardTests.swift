import FerryTestSupport
import Foundation
import XCTest
@testable import FerryEngine

/// What `DiskSpaceGuard.reserve` does with a known length: a small body is measured and
/// not reserved (its writes allocate their own blocks, which a flush of reserved,
/// "unwritten" extents costs more than); a large one has its blocks reserved at once.
/// Either way the response tells the core the fit was checked.
final class DiskSpaceGuardTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws { folder = try makeShortTemporaryDirectory(prefix: "ferry-space") }
    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: folder) }

    private func allocatedBytes(_ path: String) -> Int64 {
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        return Int64(info.st_blocks) * 512
    }

    func testASmallBodyIsMeasuredNotReserved() throws {
        let path = folder + "/small.part"
        let part = try PartFile.open(path).get()
        defer { part.close() }
        var space = DiskSpaceGuard()
        let size: Int64 = 100 * 1024
        XCTAssertNil(space.reserve(part, from: 0, to: size))
        XCTAssertTrue(space.covers(upTo: size), "the core need not measure it again")
        XCTAssertFalse(space.covers(upTo: size + 1))
        XCTAssertEqual(allocatedBytes(path), 0, "no blocks taken before the data comes")
        for offset in stride(from: Int64(0), to: size, by: 16 * 1024) {
            XCTAssertNil(space.check(part, writing: 16 * 1024, at: offset), "measured: its writes pass")
        }
    }

    func testALargeBodyIsReserved() throws {
        let path = folder + "/large.part"
        let part = try PartFile.open(path).get()
        defer { part.close() }
        var space = DiskSpaceGuard()
        let size = DiskSpaceGuard.smallestReserved * 4
        XCTAssertNil(space.reserve(part, from: 0, to: size))
        XCTAssertTrue(space.covers(upTo: size))
        guard space.reservedEnd == size else { throw XCTSkip("this file system cannot reserve (fallocate)") }
        XCTAssertGreaterThanOrEqual(allocatedBytes(path), size, "its blocks are taken at once")
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        XCTAssertEqual(info.st_size, 0, "the size stays what was written")
    }
}
