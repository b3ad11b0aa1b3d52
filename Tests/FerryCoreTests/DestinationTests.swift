import XCTest
@testable import FerryCore

final class DestinationTests: XCTestCase {
    func testDefaultDirectoryAndSessionDirectory() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, "https://example.com/a/report%202024.pdf")
        XCTAssertEqual(h.destination(t), h.downloads + "/report 2024.pdf", "set from creation")
        let other = h.root + "/other"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        let s2 = try h.openSession("b") { $0.directory = other }
        let t2 = try h.download(s2, "https://example.com/x.iso")
        XCTAssertEqual(h.destination(t2), other + "/x.iso")
        XCTAssertEqual(h.engine.lastRequest(t2)?.partPath, other + "/x.iso.part")
    }

    func testUniqueNamesAgainstDiskAndLiveTransfers() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        _ = FileManager.default.createFile(atPath: h.downloads + "/file.bin", contents: Data("old".utf8))
        let a = try h.download(s)
        let b = try h.download(s)
        _ = FileManager.default.createFile(atPath: h.downloads + "/file (3).bin.part", contents: Data())
        let c = try h.download(s)
        XCTAssertEqual(h.destination(a), h.downloads + "/file (1).bin")
        XCTAssertEqual(h.destination(b), h.downloads + "/file (2).bin", "claimed by a live transfer before any byte")
        XCTAssertEqual(h.destination(c), h.downloads + "/file (4).bin", "a stray .part counts as taken")
        // Overwrite reuses an existing file's name, but never a live transfer's.
        let d = try h.download(s) { $0.overwrite = true }
        XCTAssertEqual(h.destination(d), h.downloads + "/file.bin")
        let e = try h.download(s) { $0.overwrite = true }
        XCTAssertNotEqual(h.destination(e), h.downloads + "/file.bin")
        // A cancelled transfer gives its name back.
        try h.sync { try $0.cancel(a) }
        let f = try h.download(s)
        XCTAssertEqual(h.destination(f), h.downloads + "/file (1).bin")
    }

    func testExplicitPathsAndDirectories() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try h.download(s) { $0.destination = h.root + "/chosen.dat" }
        XCTAssertEqual(h.destination(a), h.root + "/chosen.dat")
        let b = try h.download(s) { $0.destination = h.root + "/./sub/../chosen.dat" }
        XCTAssertEqual(h.destination(b), h.root + "/chosen (1).dat")
        let c = try h.download(s, "https://example.com/name.txt") { $0.destination = h.root + "/" }
        XCTAssertEqual(h.destination(c), h.root + "/name.txt")
    }

    /// The engine creates `t`'s part file (3 bytes), then the server's answer comes, from
    /// `url`, with `contentDisposition`.
    private func answerAfterThePartFile(_ h: CoreHarness, _ t: TransferID, contentDisposition: String, from url: String) {
        h.writePart(t, [1, 2, 3])
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: 3, contentDisposition: contentDisposition, effectiveURL: url)))
    }

    func testContentDispositionRenamesOnlyForDirectoryDestinations() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, "https://example.com/download?id=7")
        XCTAssertEqual(h.destination(t), h.downloads + "/download")
        _ = FileManager.default.createFile(atPath: h.downloads + "/passwd", contents: Data())
        answerAfterThePartFile(h, t, contentDisposition: "attachment; filename=\"../../etc/passwd\"",
                               from: "https://example.com/download?id=7")
        XCTAssertEqual(h.destination(t), h.downloads + "/passwd (1)")
        XCTAssertTrue(h.exists(h.downloads + "/passwd (1).part"))
        XCTAssertFalse(h.exists(h.downloads + "/download.part"))
        h.send(.completed(t, .succeeded(bytesOnDisk: 3, sha256: nil)))
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: h.downloads + "/passwd (1)")), Data([1, 2, 3]))

        let explicit = try h.download(s) { $0.destination = h.root + "/mine.bin" }
        h.send(.response(explicit, EngineResponse(status: 200, contentDisposition: "attachment; filename=server.bin",
                                                  effectiveURL: "https://example.com/file.bin")))
        XCTAssertEqual(h.destination(explicit), h.root + "/mine.bin", "an explicit file path wins")
    }

    /// The server names the file as the URL did: it keeps its name (its own `.part`
    /// there does not make the name taken).
    func testContentDispositionWithTheURLsOwnNameKeepsIt() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, "https://example.com/cd/report.pdf")
        XCTAssertEqual(h.destination(t), h.downloads + "/report.pdf")
        answerAfterThePartFile(h, t, contentDisposition: "attachment; filename=\"report.pdf\"", from: "https://example.com/cd/report.pdf")
        XCTAssertEqual(h.destination(t), h.downloads + "/report.pdf")
        h.send(.completed(t, .succeeded(bytesOnDisk: 3, sha256: nil)))
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: h.downloads), ["report.pdf"])
    }

    func testContentDispositionBeforeThePartFileExists() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, "https://example.com/get")
        h.send(.response(t, EngineResponse(status: 200, contentDisposition: "attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf",
                                           effectiveURL: "https://example.com/get")))
        XCTAssertEqual(h.destination(t), h.downloads + "/résumé.pdf")
        // The engine then writes where it was told: the old part path.
        h.writePart(t, [9, 9], path: h.downloads + "/get.part")
        h.send(.completed(t, .succeeded(bytesOnDisk: 2, sha256: nil)))
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertTrue(h.exists(h.downloads + "/résumé.pdf"))
        XCTAssertFalse(h.exists(h.downloads + "/get.part"))
    }
}
