import XCTest
@testable import FerryCore

final class PauseResumeTests: XCTestCase {
    /// A running transfer that got a resumable response and wrote `bytes`.
    private func resumableTransfer(_ h: CoreHarness, _ s: SessionID, bytes: [UInt8] = [1, 2, 3, 4, 5, 6]) throws -> TransferID {
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 200, etag: "\"abc\"", lastModified: "Tue, 01 Oct 2024 10:00:00 GMT",
                                           expectedTotal: 100, acceptsRanges: true, effectiveURL: "https://example.com/file.bin")))
        h.writePart(t, bytes)
        h.send(.progress(t, bytesWritten: Int64(bytes.count), totalOnDisk: Int64(bytes.count), expected: 100))
        return t
    }

    func testPauseAndResumeUseIfRangeWithOffset() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try resumableTransfer(h, s)
        let data = try h.sync { try $0.pause(t) }
        XCTAssertEqual(Array(data.prefix(4)), Array("FRD2".utf8))
        XCTAssertEqual(h.state(t), .paused)
        XCTAssertEqual(h.engine.stopped, [t])
        XCTAssertEqual(h.snapshot(t)?.rate, 0)
        // Resumed before the engine confirmed the stop: it waits for the old attempt to end.
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.state(t), .queued)
        XCTAssertEqual(h.engine.started.count, 1)
        h.send(.progress(t, bytesWritten: 0, totalOnDisk: 6, expected: 100), .completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertEqual(h.state(t), .running)
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(request.offset, 6)
        XCTAssertEqual(request.ifRange, "\"abc\"", "the ETag is preferred over Last-Modified")
        XCTAssertEqual(request.knownTotal, 100, "the length announced with the bytes on disk, to check a 416 against")
        XCTAssertEqual(h.snapshot(t)?.attempts, 2)
        h.observer.clear()
        h.send(.response(t, EngineResponse(status: 206, etag: "\"abc\"", expectedTotal: 100, startOffset: 6, acceptsRanges: true,
                                           effectiveURL: "https://example.com/file.bin")))
        XCTAssertEqual(h.observer.events.filter { if case .resumedAtOffset = $0 { return true } else { return false } },
                       [.resumedAtOffset(t, offset: 6, expected: 100)])
    }

    /// A weak ETag is never an `If-Range` validator: the Last-Modified date is, and
    /// with a weak ETag alone the transfer is not resumable and starts over.
    func testAWeakETagIsNotARangeValidator() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let dated = try h.download(s, "https://example.com/dated")
        h.send(.response(dated, EngineResponse(status: 200, etag: "W/\"abc\"", lastModified: "Tue, 01 Oct 2024 10:00:00 GMT",
                                               expectedTotal: 100, acceptsRanges: true, effectiveURL: "https://example.com/dated")))
        h.writePart(dated, [1, 2, 3])
        h.send(.progress(dated, bytesWritten: 3, totalOnDisk: 3, expected: 100))
        XCTAssertEqual(h.snapshot(dated)?.resumable, true)
        XCTAssertFalse(try h.sync { try $0.pause(dated) }.isEmpty, "resume data under the date")
        h.send(.completed(dated, .stopped(bytesOnDisk: 3)))
        try h.sync { try $0.resume(dated) }
        XCTAssertEqual(h.engine.lastRequest(dated)?.offset, 3)
        XCTAssertEqual(h.engine.lastRequest(dated)?.ifRange, "Tue, 01 Oct 2024 10:00:00 GMT")

        let weak = try h.download(s, "https://example.com/weak")
        h.send(.response(weak, EngineResponse(status: 200, etag: "W/\"abc\"", expectedTotal: 100, acceptsRanges: true,
                                              effectiveURL: "https://example.com/weak")))
        h.writePart(weak, [1, 2, 3])
        XCTAssertEqual(h.snapshot(weak)?.resumable, false)
        XCTAssertEqual(try h.sync { try $0.pause(weak) }, [], "no resume data under a weak ETag")
        h.send(.completed(weak, .stopped(bytesOnDisk: 3)))
        try h.sync { try $0.resume(weak) }
        XCTAssertEqual(h.engine.lastRequest(weak)?.offset, 0)
        XCTAssertNil(h.engine.lastRequest(weak)?.ifRange)
    }

    func testResumeWithoutValidatorStartsOver() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: 100, acceptsRanges: true, effectiveURL: "https://example.com/file.bin")))
        h.writePart(t, [1, 2, 3])
        let data = try h.sync { try $0.pause(t) }
        XCTAssertEqual(data, [], "no validator: not resumable")
        XCTAssertEqual(h.snapshot(t)?.resumable, false)
        h.send(.completed(t, .stopped(bytesOnDisk: 3)))
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.engine.lastRequest(t)?.offset, 0)
        XCTAssertNil(h.engine.lastRequest(t)?.ifRange)
        h.observer.clear()
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: 100, effectiveURL: "https://example.com/file.bin")))
        XCTAssertFalse(h.observer.events.contains { if case .resumedAtOffset = $0 { return true } else { return false } })
    }

    func testPauseQueuedAndWaiting() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        _ = try h.download(s, "https://example.com/a")
        let queued = try h.download(s, "https://example.com/b")
        let waiting = try h.download(s, "https://example.com/c") { $0.startAfter = h.clock.now + 1_000_000_000 }
        XCTAssertEqual(try h.sync { try $0.pause(queued) }, [])
        XCTAssertEqual(try h.sync { try $0.pause(waiting) }, [])
        XCTAssertEqual(h.state(queued), .paused)
        XCTAssertEqual(h.state(waiting), .paused)
        XCTAssertEqual(h.engine.stopped, [], "nothing to stop")
        try h.sync { try $0.resume(waiting) }
        XCTAssertEqual(h.state(waiting), .waiting, "start-after still applies")
    }

    func testResumeDataRoundTrip() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try resumableTransfer(h, s)
        let data = try h.sync { try $0.pause(t) }
        XCTAssertThrowsError(try ResumeData.decode(data, seal: .ephemeral()), "another daemon's key does not open it")
        let decoded = try h.sync { try $0.openResumeData(data) }
        XCTAssertEqual(decoded.url, "https://example.com/file.bin")
        XCTAssertEqual(decoded.destination, h.downloads + "/file.bin")
        XCTAssertEqual(decoded.partPath, h.downloads + "/file.bin.part")
        XCTAssertEqual(decoded.offset, 6)
        XCTAssertEqual(decoded.etag, "\"abc\"")
        XCTAssertEqual(decoded.expected, 100)
        XCTAssertEqual(decoded.session, "com.example.Test")
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))

        h.observer.clear()
        let n = try h.sync { try $0.resumeDownload(session: s, resumeData: data, options: DownloadOptions()) }
        XCTAssertNotEqual(n, t)
        // The new transfer took over the partial file; the paused one was cancelled, keeping it.
        XCTAssertEqual(h.state(t), .cancelled)
        XCTAssertTrue(h.snapshot(t)!.errorMessage.contains("transfer \(n)"))
        XCTAssertTrue(h.exists(h.downloads + "/file.bin.part"))
        XCTAssertFalse(h.observer.events.contains { if case .allFinished = $0 { return true } else { return false } },
                       "the takeover is not the end of a batch")
        let snap = try XCTUnwrap(h.snapshot(n))
        XCTAssertEqual(snap.destination, h.downloads + "/file.bin")
        XCTAssertEqual(snap.state, .running)
        let request = try XCTUnwrap(h.engine.lastRequest(n))
        XCTAssertEqual(request.offset, 6)
        XCTAssertEqual(request.ifRange, "\"abc\"")
        XCTAssertEqual(request.partPath, h.downloads + "/file.bin.part")
        h.send(.response(n, EngineResponse(status: 206, etag: "\"abc\"", expectedTotal: 100, startOffset: 6, acceptsRanges: true,
                                           effectiveURL: "https://example.com/file.bin")))
        XCTAssertTrue(h.observer.events.contains(.resumedAtOffset(n, offset: 6, expected: 100)))
    }

    /// Resume data older than the part file: after it was made the transfer went on
    /// (here with ranges, holes between) and was paused again. ResumeDownload with the
    /// old data keeps only the prefix the data stands for; the engine cuts the file
    /// there at its response, and later attempts go on from the file's size.
    func testResumeDownloadWithOlderDataKeepsOnlyItsPrefix() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let old = try olderDataThanThePartFile(h, s)

        let n = try h.sync { try $0.resumeDownload(session: s, resumeData: old, options: DownloadOptions()) }
        XCTAssertEqual(h.engine.lastRequest(n)?.offset, 6, "from the data's 6 bytes, not the file's 60")
        XCTAssertEqual(h.snapshot(n)?.bytesTransferred, 6)
        h.send(.response(n, EngineResponse(status: 206, etag: "\"abc\"", expectedTotal: 100, startOffset: 6, acceptsRanges: true,
                                           effectiveURL: "https://example.com/file.bin")))
        h.writePart(n, Array(repeating: 1, count: 30))
        _ = try h.sync { try $0.pause(n) }
        h.send(.completed(n, .stopped(bytesOnDisk: 30)))
        try h.sync { try $0.resume(n) }
        XCTAssertEqual(h.engine.lastRequest(n)?.offset, 30, "once cut there, the file is the prefix again")
    }

    /// The same limit holds for what the new transfer hands out and across a restart,
    /// until a response has cut the file: `Pause` before its first answer gives resume
    /// data for the old prefix only, and after a crash its attempt still starts there.
    func testTheLimitOfOlderDataHoldsInItsResumeDataAndAcrossARestart() throws {
        let h = CoreHarness()
        let (n, again) = try pausedTakeoverOfOlderData(h, try h.openSession())
        XCTAssertEqual(try h.sync { try $0.openResumeData(again) }.offset, 6, "not the file's 60 bytes")
        XCTAssertEqual(h.snapshot(n)?.bytesTransferred, 6)

        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.snapshot(n)?.bytesTransferred, 6, "after a restart too")
        try h2.sync { try $0.resume(n) }
        XCTAssertEqual(h2.engine.lastRequest(n)?.offset, 6)
    }

    /// The same on several connections: after a restart the old prefix (6 bytes) is
    /// still continued, not fetched again from byte 0.
    func testTheLimitOfOlderDataKeepsItsPrefixOnSeveralConnectionsAcrossARestart() throws {
        let h = CoreHarness()
        let (n, _) = try pausedTakeoverOfOlderData(h, try h.openSession(), connections: 4)

        let h2 = h.restarted(crashed: true)
        try h2.sync { try $0.resume(n) }
        XCTAssertEqual(h2.engine.lastRequest(n)?.offset, 6, "the old prefix, not from zero")
    }

    /// The engine's word that the server refuses range requests counts even when it
    /// comes from an attempt being paused: the range map and `Resumable` go, and
    /// `Resume` starts over rather than continue ranges the server would refuse.
    func testRefusedRangesCountEvenFromAnAttemptBeingPaused() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try segmentedTransferWithAMap(h, s)
        _ = try h.sync { try $0.pause(t) }
        var word = EngineResponse(status: 200, expectedTotal: 100, startOffset: 20, effectiveURL: "https://example.com/file.bin")
        word.rangesRefused = true
        h.send(.response(t, word), .completed(t, .stopped(bytesOnDisk: 20)))
        XCTAssertEqual(h.snapshot(t)?.resumable, false)
        try h.sync { try $0.resume(t) }
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertNil(request.segments, "no map to continue")
        XCTAssertEqual(request.offset, 0, "it starts over")
    }

    /// Resume data handed out before the refusal came carries the range map: given to
    /// ResumeDownload once the download it came from knows better, the map is void and
    /// the new transfer starts over.
    func testResumeDataFromBeforeARefusalStartsOver() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try segmentedTransferWithAMap(h, s)
        let data = try h.sync { try $0.pause(t) }
        XCTAssertFalse(data.isEmpty)
        var word = EngineResponse(status: 200, expectedTotal: 100, startOffset: 20, effectiveURL: "https://example.com/file.bin")
        word.rangesRefused = true
        h.send(.response(t, word), .completed(t, .stopped(bytesOnDisk: 20)))

        let n = try h.sync { try $0.resumeDownload(session: s, resumeData: data, options: DownloadOptions()) }
        let request = try XCTUnwrap(h.engine.lastRequest(n))
        XCTAssertNil(request.segments, "the map is void")
        XCTAssertEqual(request.offset, 0, "it starts over")
    }

    /// A download on four connections with ranges 0..<20 and 50..<60 of 100 on disk.
    private func segmentedTransferWithAMap(_ h: CoreHarness, _ s: SessionID) throws -> TransferID {
        let t = try h.download(s) { $0.connections = 4 }
        var first = EngineResponse(status: 200, etag: "\"abc\"", expectedTotal: 100, acceptsRanges: true,
                                   effectiveURL: "https://example.com/file.bin")
        first.connections = 4
        h.send(.response(t, first))
        h.writePart(t, Array(repeating: 1, count: 60))
        h.send(.segments(t, try XCTUnwrap(SegmentMap(total: 100, done: [0..<20, 50..<60]))))
        return t
    }

    /// A transfer made by ResumeDownload (on `connections`) from resume data older than
    /// its part file (`olderDataThanThePartFile`), paused before its first answer: the
    /// transfer and the resume data that Pause gave.
    private func pausedTakeoverOfOlderData(_ h: CoreHarness, _ s: SessionID,
                                           connections: UInt32 = 1) throws -> (TransferID, [UInt8]) {
        let old = try olderDataThanThePartFile(h, s)
        var options = DownloadOptions()
        options.connections = connections
        let n = try h.sync { try $0.resumeDownload(session: s, resumeData: old, options: options) }
        let again = try h.sync { try $0.pause(n) }
        h.send(.completed(n, .stopped(bytesOnDisk: 6)))
        return (n, again)
    }

    /// Resume data (offset 6) of a transfer that then went on with ranges (holes
    /// between, the part file 60 bytes) and was paused again.
    private func olderDataThanThePartFile(_ h: CoreHarness, _ s: SessionID) throws -> [UInt8] {
        let t = try resumableTransfer(h, s)
        let old = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        try h.sync { try $0.resume(t) }
        h.send(.response(t, EngineResponse(status: 206, etag: "\"abc\"", lastModified: "Tue, 01 Oct 2024 10:00:00 GMT", expectedTotal: 100,
                                           startOffset: 6, acceptsRanges: true, effectiveURL: "https://example.com/file.bin")))
        h.writePart(t, Array(repeating: 1, count: 60))
        h.send(.segments(t, try XCTUnwrap(SegmentMap(total: 100, done: [0..<10, 50..<60]))))
        _ = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 10)))
        return old
    }

    /// ResumeDownload can arrive before the paused transfer's attempt has reported its
    /// end: that end must not delete the partial file the new transfer took over.
    func testTakeoverBeforeTheOldAttemptEndedKeepsThePartialFile() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try resumableTransfer(h, s)
        let data = try h.sync { try $0.pause(t) }
        let n = try h.sync { try $0.resumeDownload(session: s, resumeData: data, options: DownloadOptions()) }
        XCTAssertEqual(h.state(t), .cancelled)
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertTrue(h.exists(h.downloads + "/file.bin.part"), "the old attempt's end left the new transfer's bytes alone")
        try h.sync { try $0.remove(t) }
        XCTAssertTrue(h.exists(h.downloads + "/file.bin.part"), "removing the cancelled one leaves them too")
        XCTAssertEqual(h.engine.lastRequest(n)?.offset, 6)
    }

    func testResumeDownloadRefusesWhileTheOwnerStillRuns() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try resumableTransfer(h, s)
        let data = try h.sync { try $0.pause(t) }
        try h.sync { try $0.resume(t) }
        XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: data, options: DownloadOptions()) },
                            { $0.isInvalidState && $0.message.contains("transfer \(t)") })
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [t])
    }

    func testDamagedOrStaleResumeDataIsRefused() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try resumableTransfer(h, s)
        let good = try h.sync { try $0.pause(t) }
        let part = h.downloads + "/file.bin.part"
        var flipped = good; flipped[10] ^= 0x20
        var badMagic = good; badMagic[0] = UInt8(ascii: "X")
        func forged(_ change: (inout ResumeData) -> Void) throws -> [UInt8] {
            var d = try h.sync { try $0.openResumeData(good) }
            change(&d)
            // Re-signs with a correct checksum: the contents must still be checked.
            let encoder = JSONEncoder(); encoder.outputFormatting = [.sortedKeys]
            let json = Array(try encoder.encode(d))
            return Array("FRD1".utf8) + json + Array(SHA256Digest(json))
        }
        let cases: [(String, [UInt8], (CoreError) -> Bool)] = [
            ("empty", [], { $0.isInvalidResumeData }),
            ("truncated", Array(good.prefix(good.count - 5)), { $0.isInvalidResumeData }),
            ("magic", badMagic, { $0.isInvalidResumeData }),
            ("flipped byte", flipped, { $0.isInvalidResumeData && $0.message.contains("damaged") }),
            ("relative path", try forged { $0.destination = "file.bin"; $0.partPath = "file.bin.part" }, { $0.isInvalidResumeData }),
            ("foreign part", try forged { $0.partPath = "/etc/shadow" }, { $0.isInvalidResumeData }),
            ("dotdot", try forged { $0.destination = h.downloads + "/../x"; $0.partPath = h.downloads + "/../x.part" }, { $0.isInvalidResumeData }),
            ("bad url", try forged { $0.url = "file:///etc/passwd" }, { $0.isInvalidResumeData && $0.message.contains("URL") }),
            ("offset too big", try forged { $0.offset = 1000 }, { $0.isInvalidResumeData && $0.message.contains("fewer") }),
            ("negative offset", try forged { $0.offset = -1 }, { $0.isInvalidResumeData }),
        ]
        h.observer.clear()
        for (name, bytes, matches) in cases {
            XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: bytes, options: DownloadOptions()) }, matches, name)
        }
        try FileManager.default.removeItem(atPath: part)
        XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: good, options: DownloadOptions()) },
                            { $0.isInvalidResumeData && $0.message.contains("no longer exists") })
        var options = DownloadOptions(); options.destination = h.root + "/elsewhere.bin"
        h.writePart(t, [1, 2, 3, 4, 5, 6])
        XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: good, options: options) }, { $0.isInvalidDestination })
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [t])
        XCTAssertEqual(h.state(t), .paused)
        XCTAssertEqual(h.observer.events, [])
    }

    /// Resume data of a download whose partial file another download has taken since
    /// (the first cancelled, a new one into the same path) is refused: its range would
    /// join the two files. Nothing changes.
    func testResumeDataIsRefusedOnceAnotherDownloadHoldsThePartialFile() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let first = try resumableTransfer(h, s)
        let stale = try h.sync { try $0.pause(first) }
        h.send(.completed(first, .stopped(bytesOnDisk: 6)))
        try h.sync { try $0.cancel(first) }
        XCTAssertFalse(h.exists(h.downloads + "/file.bin.part"))
        h.clock.advance(seconds: 1)
        let second = try h.download(s, "https://example.com/other.bin") { $0.destination = h.downloads + "/file.bin" }
        h.send(.response(second, EngineResponse(status: 200, etag: "\"other\"", expectedTotal: 100, acceptsRanges: true,
                                                effectiveURL: "https://example.com/other.bin")))
        h.writePart(second, [9, 9, 9, 9, 9, 9, 9, 9])
        let older = try h.sync { try $0.pause(second) }
        XCTAssertFalse(older.isEmpty)
        h.send(.completed(second, .stopped(bytesOnDisk: 8)))
        h.observer.clear()

        XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: stale, options: DownloadOptions()) },
                            { $0.isInvalidResumeData && $0.message.contains("transfer \(second)") })
        XCTAssertEqual(h.state(second), .paused, "the download that holds the file is left alone")
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [first, second])
        XCTAssertEqual(h.observer.events, [])

        // The same download after it fetched a changed file: its old resume data is stale too.
        try h.sync { try $0.resume(second) }
        h.send(.response(second, EngineResponse(status: 200, etag: "\"other-2\"", expectedTotal: 100, acceptsRanges: true,
                                                effectiveURL: "https://example.com/other.bin")))
        let before = try h.sync { try $0.pause(second) }
        XCTAssertFalse(before.isEmpty)
        h.send(.completed(second, .stopped(bytesOnDisk: 8)))
        XCTAssertFerryError(try h.sync { try $0.resumeDownload(session: s, resumeData: older, options: DownloadOptions()) },
                            { $0.isInvalidResumeData && $0.message.contains("transfer \(second)") }, "made before the file changed")
        XCTAssertNoThrow(try h.sync { try $0.resumeDownload(session: s, resumeData: before, options: DownloadOptions()) },
                         "the data of the file it holds now is taken")
    }

    func testPauseAllResumeAllCancelAllAreScoped() throws {
        let h = CoreHarness()
        let (s1, s2) = try h.openTwoSessions()
        let a = try h.download(s1, "https://example.com/a")
        let b = try h.download(s1, "https://example.com/b")
        let c = try h.download(s2, "https://example.com/c")
        h.succeed(b)
        try h.sync { try $0.pauseAll(session: s1) }
        XCTAssertEqual([h.state(a), h.state(b), h.state(c)], [.paused, .completed, .running])
        try h.sync { try $0.pauseAll() }
        XCTAssertEqual(h.state(c), .paused)
        try h.sync { try $0.resumeAll(session: s2) }
        XCTAssertEqual([h.state(a), h.state(c)], [.paused, .queued])
        h.send(.completed(a, .stopped(bytesOnDisk: 0)), .completed(c, .stopped(bytesOnDisk: 0)))
        XCTAssertEqual(h.state(c), .running)
        try h.sync { try $0.cancelAll() }
        XCTAssertEqual([h.state(a), h.state(b), h.state(c)], [.cancelled, .completed, .cancelled])
        XCTAssertFerryError(try h.sync { try $0.pauseAll(session: 77) }, { $0.isNoSuchSession })
    }
}

import Crypto
private func SHA256Digest(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }
