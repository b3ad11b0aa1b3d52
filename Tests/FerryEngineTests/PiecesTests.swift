import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// Downloads with mirrors and pieces (contract v1.2): ranges spread over the URL and
/// its mirrors at piece boundaries, every piece checked as it completes, a bad piece
/// fetched again from another source, a source that sends bad or short pieces dropped.
final class PiecesTests: EngineTestCase {
    private let size = 4 << 20
    private let pieceLength = 256 << 10

    private func pieces(of body: [UInt8]) throws -> PieceList {
        let hex = stride(from: 0, to: body.count, by: pieceLength).map { start in
            TestData.sha256Hex(Array(body[start..<min(start + pieceLength, body.count)]))
        }
        return try PieceList(length: UInt64(pieceLength), hex: hex)
    }

    private func assertFile(_ path: String, holds bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(TestData.sha256Hex(contents(path)), TestData.sha256Hex(bytes), file: file, line: line)
    }

    private func served(_ paths: [String]) -> Int {
        paths.flatMap { server.requests(for: $0) }.map(\.bodyBytesSent).reduce(0, +)
    }

    private func mirrored(_ id: TransferID, _ paths: [String], body: [UInt8], connections: Int = 4,
                          segments: SegmentMap? = nil, ifRange: String? = nil) throws -> EngineRequest {
        var r = request(id, paths[0], ifRange: ifRange, sha: true)
        r.mirrors = paths.dropFirst().map { server.url($0) }
        r.pieces = try pieces(of: body)
        r.connections = connections
        r.segments = segments
        return r
    }

    private func serveEverywhere(_ paths: [String], _ body: [UInt8]) {
        for path in paths { server.add(path: path, body: body, etag: "\"v1\"") }
    }

    func testABadPieceAndAShortOneAreMendedFromOtherSources() throws {
        let body = TestData.bytes(count: size, seed: 91)
        let paths = ["/a", "/b", "/c"]
        serveEverywhere(paths, body)
        server.set(.corruptByte(at: 5 * pieceLength + 1000), on: "/b") // piece 5, in /b's first range
        server.set(.dropRangeAfter(bytes: 100 << 10), on: "/c")         // its first range cut short
        // /a's first range (1 MiB) is still coming when the others are handed out: /b gets 1-2 MiB.
        server.set(.slow(bytesPerSecond: 4 << 20), on: "/a")

        let outcome = run(try mirrored(1, paths, body: body), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("1.part"), holds: body)
        for path in paths { XCTAssertFalse(server.requests(for: path).isEmpty, "\(path) was asked") }
        // Fetched again: the bad piece, and what the short answer brought (less than a piece).
        XCTAssertLessThanOrEqual(served(paths) - size, 2 * pieceLength, "served \(served(paths)) for \(size)")
        let ranges = paths.flatMap { server.requests(for: $0) }.compactMap { $0.header("Range") }
        XCTAssertEqual(ranges.count, paths.flatMap { server.requests(for: $0) }.count, "every request asks for a range")
        for range in ranges {
            let first = Int(range.dropFirst(6).split(separator: "-")[0])!
            XCTAssertEqual(first % pieceLength, 0, "\(range) starts at a piece boundary")
        }
        XCTAssertTrue(server.requests(for: "/b").allSatisfy { $0.header("If-Range") == nil }, "a mirror gets no If-Range")
        let maps = log.events(for: 1).compactMap(\.segments)
        XCTAssertTrue(maps.last?.isComplete ?? false)
        for map in maps {
            XCTAssertTrue(map.done.allSatisfy { $0.lowerBound % Int64(pieceLength) == 0 }, "only whole (verified) pieces in \(map)")
        }
    }

    func testEverySourceFailingAPieceIsChecksumMismatchNamingThem() throws {
        let body = TestData.bytes(count: size, seed: 92)
        let paths = ["/x", "/y", "/z"]
        serveEverywhere(paths, body)
        for path in paths { server.set(.corruptByte(at: 2 * pieceLength + 7), on: path) }

        let outcome = run(try mirrored(2, paths, body: body), timeout: 60)

        guard case .failed(.checksumMismatch(let message), _)? = outcome else {
            return XCTFail("expected ChecksumMismatch, got \(String(describing: outcome))")
        }
        for path in paths { XCTAssertTrue(message.contains(server.url(path)), "\(message) names \(path)") }
        XCTAssertTrue(message.contains("piece 2 failed its SHA-256"), message)
    }

    func testAFileOfAnotherLengthThanThePiecesFails() throws {
        let body = TestData.bytes(count: size, seed: 93)
        server.add(path: "/long", body: body + [1, 2, 3], etag: "\"v1\"")
        let outcome = run(try mirrored(3, ["/long"], body: body), timeout: 30)
        guard case .failed(.checksumMismatch(let message), _)? = outcome else {
            return XCTFail("expected ChecksumMismatch, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("\(size + 3) bytes"), message)
    }

    func testAResumedMapIsCheckedFromDiskAndOnlyTheRestFetched() throws {
        let body = TestData.bytes(count: size, seed: 94)
        serveEverywhere(["/r", "/r2"], body)
        // Half the file on disk, mapped as verified pieces; piece 3 went bad on disk.
        var onDisk = Array(body[0..<(size / 2)])
        onDisk[3 * pieceLength + 5] ^= 0xFF
        try write(onDisk + [UInt8](repeating: 0, count: size / 2), to: partPath("4.part"))
        let map = SegmentMap(total: Int64(size), done: [0..<Int64(size / 2)])

        let outcome = run(try mirrored(4, ["/r", "/r2"], body: body, segments: map, ifRange: "\"v1\""), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("4.part"), holds: body)
        XCTAssertEqual(served(["/r", "/r2"]), size / 2 + pieceLength, "the missing half and the piece that failed on disk, nothing more")
    }

    func testAMirrorThatRefusesIsDroppedWithoutPieces() throws {
        let body = TestData.bytes(count: size, seed: 95)
        serveEverywhere(["/m1", "/m2"], body)
        server.set(.status(404), on: "/m2")
        var r = request(5, "/m1", sha: true)
        r.mirrors = [server.url("/m2")]
        r.connections = 4
        let outcome = run(r, timeout: 60)
        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("5.part"), holds: body)
        XCTAssertFalse(server.requests(for: "/m2").isEmpty, "the mirror was asked")
    }

    func testAURLThatIsDownOrRefusesLeavesTheFileToItsMirrors() throws {
        let body = TestData.bytes(count: size, seed: 96)
        serveEverywhere(["/gone", "/up"], body)
        server.set(.status(404), on: "/gone")
        let refused = try mirrored(6, ["/gone", "/up"], body: body)
        let unreachable = "http://127.0.0.1:1/x" // nothing listens on port 1
        var down = request(7, "/up", sha: true)
        down.url = unreachable
        down.mirrors = [server.url("/up")]
        down.connections = 2

        for (r, id) in [(refused, TransferID(6)), (down, TransferID(7))] {
            let outcome = run(r, timeout: 60)
            XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)), "transfer \(id)")
            assertFile(partPath("\(id).part"), holds: body)
        }
        XCTAssertEqual(server.requests(for: "/gone").count, 1, "a URL that refused is not asked again in the attempt")
    }

    func testWhenTheLastSourceFailsTheErrorNamesTheOnesDroppedBefore() throws {
        server.add(path: "/404", body: [1, 2, 3], etag: "\"v1\"")
        server.set(.status(404), on: "/404")
        var r = request(8, "/404")
        r.mirrors = ["http://127.0.0.1:1/mirror"] // nothing listens on port 1
        r.connections = 2
        guard case .failed(let error, _)? = run(r, timeout: 30) else { return XCTFail("expected a failure") }
        XCTAssertTrue(error.message.contains("sources dropped before: \(server.url("/404")) (it answered HTTP 404"), error.message)
    }
}
