import XCTest
@testable import FerryCore

/// The v1.2 options `mirrors` and `pieces`: malformed values are refused with
/// `InvalidArgument` before anything is queued; good ones are kept with the transfer,
/// shown in its snapshot and handed to the engine.
final class PiecesOptionTests: XCTestCase {
    private let digest = String(repeating: "ab", count: 32)

    func testMalformedMirrorsAndPiecesAreRefusedAndQueueNothing() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        h.observer.clear()
        let cases: [(String, (inout DownloadOptions) -> Void, String)] = [
            ("ftp mirror", { $0.mirrors = ["ftp://example.com/x"] }, "mirror 0"),
            ("relative mirror", { $0.mirrors = ["https://example.com/a", "example.com/x"] }, "mirror 1"),
            ("empty mirror", { $0.mirrors = [""] }, "mirror 0"),
            ("17 mirrors", { $0.mirrors = (0..<17).map { "https://m\($0).example.com/x" } }, "at most 16"),
        ]
        for (name, configure, words) in cases {
            XCTAssertFerryError(try h.download(s, "https://example.com/x", configure), { $0.isInvalidArgument && $0.message.contains(words) }, name)
        }
        XCTAssertEqual(h.sync { try? $0.transferIDs() }, [], "nothing was queued")
        XCTAssertEqual(h.observer.events, [])
    }

    func testPieceListRefusesBadValues() {
        let cases: [(UInt64, [String], String)] = [
            (0, [digest], "piece length is 0"),
            (1024, [digest], "between"),
            ((1 << 30) + 1, [digest], "between"),
            (65536, [], "no SHA-256"),
            (65536, [String(repeating: "g", count: 64)], "piece 0"),
            (65536, [digest, String(repeating: "a", count: 63)], "piece 1"),
            (65536, Array(repeating: digest, count: PieceList.maximumCount + 1), "at most 32768"),
        ]
        for (length, hex, words) in cases {
            XCTAssertThrowsError(try PieceList(length: length, hex: hex), "\(length) \(hex.count)") { error in
                let e = error as? CoreError
                XCTAssertTrue(e?.isInvalidArgument ?? false, "\(error)")
                XCTAssertTrue(e?.message.contains(words) ?? false, "\(e?.message ?? "") lacks \(words)")
            }
        }
    }

    func testPieceGeometry() throws {
        let p = try PieceList(length: 100 * 1024, hex: Array(repeating: digest, count: 3))
        let len = Int64(100 * 1024)
        XCTAssertTrue(p.fits(total: 2 * len + 1))
        XCTAssertTrue(p.fits(total: 3 * len))
        XCTAssertFalse(p.fits(total: 2 * len), "two pieces' worth needs two pieces")
        XCTAssertFalse(p.fits(total: 3 * len + 1))
        let total = 2 * len + 10
        XCTAssertEqual(p.range(of: 2, total: total), 2 * len..<total, "the last piece holds what is left")
        XCTAssertEqual(p.pieces(within: 0..<total, total: total), 0..<3)
        XCTAssertEqual(p.pieces(within: 1..<(2 * len), total: total), 1..<2, "only whole pieces")
        XCTAssertEqual(p.pieces(within: len..<(len + 5), total: total), 1..<1)
        XCTAssertEqual(p.hex, Array(repeating: digest, count: 3))
    }

    func testGoodOptionsAreKeptShownAndHandedToTheEngine() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let pieces = try PieceList(length: 65536, hex: [digest, digest.uppercased()])
        let id = try h.download(s, "https://example.com/x") {
            $0.mirrors = ["https://user:secret@mirror.example.org/x", "http://other.example.net/x"]
            $0.pieces = pieces
        }
        let snapshot = try XCTUnwrap(h.snapshot(id))
        XCTAssertEqual(snapshot.mirrors, ["https://mirror.example.org/x", "http://other.example.net/x"], "shown without credentials")
        XCTAssertEqual(snapshot.pieceLength, 65536)
        XCTAssertEqual(snapshot.pieceCount, 2)
        _ = h.sync { $0.sessionIDs } // the core has had its turn to start it
        let request = try XCTUnwrap(h.engine.started.last)
        XCTAssertEqual(request.mirrors, ["https://user:secret@mirror.example.org/x", "http://other.example.net/x"], "the engine gets the real URLs")
        XCTAssertEqual(request.pieces, pieces)
        XCTAssertEqual(request.pieces?.hex, [digest, digest], "stored lowercase")
    }
}
