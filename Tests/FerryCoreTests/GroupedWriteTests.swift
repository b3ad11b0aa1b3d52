import FerryCore
import Foundation
import XCTest

/// Work that arrives together is written together: downloads asked for in one go are
/// one store transaction and one change, and a small file's response waits for the
/// transfer's next write. Each still behaves as if it had come alone.
final class GroupedWriteTests: XCTestCase {
    func saved(_ writes: ArraySlice<[StoreOperation]>) -> [[TransferID]] {
        writes.map { ops in ops.compactMap { if case .saveTransfer(let t) = $0 { return t.snapshot.id } else { return nil } } }
    }

    func testDownloadsPreparedTogetherAreOneWriteAndOneChangeWithTheirOwnNames() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let writesBefore = h.store.writes.count
        h.observer.clear()
        var separate = DownloadOptions()
        separate.dedupe = false // three fetches of one URL (dedupe would make it one: DedupeTests)
        let ids = try h.sync { core -> [TransferID] in
            let ids = try (0..<3).map { _ in try core.prepareDownload(session: s, url: "https://example.com/file.bin", options: separate) }
            XCTAssertEqual(try core.transferIDs(), [], "nothing is added before addPreparedDownloads")
            XCTAssertEqual(core.preparedCount(session: s), 3)
            try core.addPreparedDownloads()
            return ids
        }
        XCTAssertEqual(ids, [1, 2, 3])
        XCTAssertEqual(ids.map { h.destination($0) }, ["file.bin", "file (1).bin", "file (2).bin"].map { h.downloads + "/" + $0 },
                       "each took a name the others had not")
        let writes = h.store.writes.dropFirst(writesBefore)
        XCTAssertEqual(saved(writes).first, ids, "the three are written in one transaction, before anything else")
        let added = h.observer.events.compactMap { if case .transferAdded(let id, _) = $0 { return id } else { return nil } }
        XCTAssertEqual(added, ids, "announced in the order asked")
        XCTAssertEqual(h.engine.startedIDs, ids)
        XCTAssertEqual(h.sync { $0.preparedCount(session: s) }, 0)
    }

    /// A batch of downloads into one folder checks the folder once, and only that batch
    /// counts on it: a download asked for after the batch was added, into the folder
    /// removed since, is refused as if the others had never been.
    func testAFolderCheckedForABatchIsCheckedAgainForTheNext() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let folder = h.downloads + "/batch"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        var into = DownloadOptions()
        into.destination = folder
        into.dedupe = false
        let ids = try h.sync { core -> [TransferID] in
            let ids = try ["a", "b", "a"].map { try core.prepareDownload(session: s, url: "https://example.com/\($0).bin", options: into) }
            try core.addPreparedDownloads()
            return ids
        }
        XCTAssertEqual(ids.map { h.destination($0) }, ["a.bin", "b.bin", "a (1).bin"].map { folder + "/" + $0 })
        try FileManager.default.removeItem(atPath: folder)
        var again = into
        again.destination = folder + "/"
        XCTAssertFerryError(try h.sync { try $0.download(session: s, url: "https://example.com/c.bin", options: again) },
                            \.isInvalidDestination, "the folder is gone")
        var file = into
        file.destination = folder + "/c.bin"
        XCTAssertFerryError(try h.sync { try $0.download(session: s, url: "https://example.com/c.bin", options: file) },
                            \.isInvalidDestination, "the folder of the file is gone")
    }

    func testAGroupTheStoreRefusesAddsNothingAndFreesItsIdsAndNames() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        h.store.failure = StoreError("disk full")
        XCTAssertThrowsError(try h.sync { core in
            for _ in 0..<2 { _ = try core.prepareDownload(session: s, url: "https://example.com/file.bin", options: DownloadOptions()) }
            try core.addPreparedDownloads()
        }) { XCTAssertTrue($0 is StoreError, "\($0)") }
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
        XCTAssertEqual(h.engine.started, [])
        h.store.failure = nil
        let t = try h.download(s)
        XCTAssertEqual(t, 1, "the refused group used up no id")
        XCTAssertEqual(h.destination(t), h.downloads + "/file.bin", "nor a name")
    }

    func testARefusedDownloadInAGroupLeavesTheOthersAlone() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let (first, second) = try h.sync { core -> (TransferID, TransferID) in
            let a = try core.prepareDownload(session: s, url: "https://example.com/a.bin", options: DownloadOptions())
            XCTAssertThrowsError(try core.prepareDownload(session: s, url: "gopher://example.com/b.bin", options: DownloadOptions()))
            let c = try core.prepareDownload(session: s, url: "https://example.com/c.bin", options: DownloadOptions())
            try core.addPreparedDownloads()
            return (a, c)
        }
        XCTAssertEqual([first, second], [1, 2], "the refused one took no id")
        XCTAssertEqual([h.state(first), h.state(second)], [.running, .running])
    }

    func testASmallNewFilesResponseWaitsForItsNextWrite() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        let writesBefore = h.store.writes.count
        h.respondResumable(t, etag: "\"v1\"", total: 5)
        XCTAssertEqual(h.store.writes.count, writesBefore, "no write for a 5-byte file's response")
        XCTAssertEqual(h.snapshot(t)?.bytesExpected, 5, "announced all the same")
        h.writePart(t, Array("hello".utf8))
        h.send(.completed(t, .succeeded(bytesOnDisk: 5, sha256: nil)))
        let rows = h.savedRows(of: t, since: writesBefore)
        XCTAssertEqual(rows.first?.etag, "\"v1\"", "its validator goes with the next write (the final name's)")
        XCTAssertEqual(rows.last?.snapshot.state, .completed)
    }

    func testALargeFilesValidatorsAreWrittenAtOnce() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        let writesBefore = h.store.writes.count
        h.send(.response(t, EngineResponse(status: 200, etag: "\"big\"", expectedTotal: 64 << 20, acceptsRanges: true,
                                           effectiveURL: "https://example.com/file.bin")))
        let rows = h.savedRows(of: t, since: writesBefore)
        XCTAssertEqual(rows.last?.etag, "\"big\"", "a crash now resumes the 64 MiB with If-Range instead of starting over")
    }

    func testASmallFileRenamedByTheServerIsWrittenAtOnce() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.writePart(t, Array("he".utf8))
        let writesBefore = h.store.writes.count
        h.send(.response(t, EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 5,
                                           contentDisposition: "attachment; filename=\"report.pdf\"", acceptsRanges: true,
                                           effectiveURL: "https://example.com/file.bin")))
        XCTAssertEqual(h.destination(t), h.downloads + "/report.pdf")
        let rows = h.savedRows(of: t, since: writesBefore)
        XCTAssertEqual(rows.last?.snapshot.destination, h.downloads + "/report.pdf",
                       "where its .part now is must survive a crash")
        XCTAssertTrue(h.exists(h.downloads + "/report.pdf.part"))
    }
}

extension GroupedWriteTests {
    func testACleanStopWritesWhatASmallFileLearnt() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.respondResumable(t, etag: "\"v1\"", total: 100_000)
        h.writePart(t, Array(repeating: 1, count: 30_000))
        let h2 = h.restarted()
        let request = try XCTUnwrap(h2.engine.lastRequest(t))
        XCTAssertEqual(request.offset, 30_000, "it carries on from its partial file after a clean stop")
        XCTAssertEqual(request.ifRange, "\"v1\"")
    }
}
