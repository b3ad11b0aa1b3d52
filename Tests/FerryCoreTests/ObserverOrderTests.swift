import XCTest
@testable import FerryCore

final class ObserverOrderTests: XCTestCase {
    func testOneTransfersSignalsInContractOrder() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        h.observer.clear()
        let t = try h.download(s)
        h.answerAndWrite(t, [1, 2, 3, 4], total: 8)
        _ = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 4)))
        try h.sync { try $0.resume(t) }
        h.send(.response(t, EngineResponse(status: 206, etag: "\"x\"", expectedTotal: 8, startOffset: 4, acceptsRanges: true,
                                           effectiveURL: "https://example.com/file.bin")))
        h.writePart(t, [1, 2, 3, 4, 5, 6, 7, 8])
        h.send(.progress(t, bytesWritten: 2, totalOnDisk: 6, expected: 8),
               .completed(t, .succeeded(bytesOnDisk: 8, sha256: nil)))
        let mine = h.observer.events.filter {
            switch $0 {
            case .transferAdded, .transferChanged, .progress, .resumedAtOffset, .finished, .completed: return true
            default: return false
            }
        }
        XCTAssertEqual(mine, [
            .transferAdded(t, .queued),
            .transferChanged(t, .running),
            .transferChanged(t, .running),  // response: HttpStatus, Resumable, BytesExpected
            .progress(t, written: 4, total: 4, expected: 8),
            .transferChanged(t, .paused),
            .progress(t, written: 0, total: 4, expected: 8),  // the stop has settled: the bytes kept
            .transferChanged(t, .queued),
            .transferChanged(t, .running),
            .transferChanged(t, .running),  // response: HttpStatus 206
            .resumedAtOffset(t, offset: 4, expected: 8),
            .progress(t, written: 2, total: 6, expected: 8),
            .progress(t, written: 2, total: 8, expected: 8),
            .transferChanged(t, .completed),
            .finished(t, location: h.downloads + "/file.bin"),
            .completed(t, serial: 1, errorName: ""),
        ])
        XCTAssertEqual(h.observer.events.suffix(4), [
            .sessionChanged(s, active: 0), .managerChanged(active: 0, queued: 0), .sessionAllFinished(s, BatchCounts(succeeded: 1)), .allFinished(BatchCounts(succeeded: 1)),
        ])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: h.downloads + "/file.bin")).count, 8)
    }

    func testSetURLKeepsBytesAndClosingSessionRefusesResumeData() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.respondResumable(t, etag: "\"x\"", total: 8)
        h.writePart(t, [1, 2, 3])
        let data = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 3)))
        try h.sync { try $0.setURL(t, url: "https://cdn.example.net/file.bin?sig=new") }
        try h.sync { try $0.resume(t) }
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(request.url, "https://cdn.example.net/file.bin?sig=new")
        XCTAssertEqual(request.offset, 3)
        XCTAssertEqual(request.ifRange, "\"x\"")
        try h.sync { try $0.closeSession(s, cancelTransfers: false) }
        XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: data, options: DownloadOptions()) },
                            { $0.isInvalidState })
    }
}
