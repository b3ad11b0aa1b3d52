import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// `connections` > 1 through the real ferryd: several ranges at once, checked against
/// the validator, carried across a SIGKILL by the stored range map.
final class SegmentedDownloadTests: FerryTestCase {
    static let size = 8 * 1024 * 1024

    /// Body bytes the server sent for `path`, over every request.
    func bytesServed(_ path: String) -> Int {
        server.requests(for: path).reduce(0) { $0 + $1.bodyBytesSent }
    }

    func rangeRequests(_ path: String) -> Int {
        server.requests(for: path).filter { $0.header("Range") != nil }.count
    }

    /// Starts a download of `path` to `work + path` on four connections, in `s` (else
    /// the default session).
    func downloadOnFourConnections(_ path: String, in s: BusSession? = nil) async throws -> FerryTransfer {
        let opened: BusSession
        if let s { opened = s } else { opened = try await session() }
        return try await opened.download(server.url(path), options: ["destination": .string(work + path), "connections": .uint32(4)])
    }

    func testRangesInParallelMakeTheRightFile() async throws {
        let body = serve("/par.bin", size: Self.size)
        // Slices of 200 KiB every 100 ms: a connection cut when its range is split
        // may have had one slice in flight, far less than a range (1 MiB at least).
        server.set(.slow(bytesPerSecond: 2 * 1024 * 1024), on: "/par.bin")
        let t = try await downloadOnFourConnections("/par.bin")
        try await finishCompleted(t, at: work + "/par.bin", equals: body, timeout: 30)
        XCTAssertGreaterThanOrEqual(rangeRequests("/par.bin"), 2, "several ranges were asked for")
        XCTAssertTrue(server.requests(for: "/par.bin").filter { $0.header("Range") != nil }.allSatisfy { $0.header("If-Range") == "\"v1\"" },
                      "every range request carries If-Range")
        let slack = (rangeRequests("/par.bin") - 1) * 200 * 1024
        XCTAssertLessThanOrEqual(bytesServed("/par.bin"), body.count + slack, "no range fetched twice")
    }

    func testETagChangingMidDownloadGivesTheNewFileWhole() async throws {
        serve("/chg.bin", size: Self.size, seed: 1, etag: "\"v1\"")
        let newBody = TestData.bytes(count: Self.size, seed: 2)
        server.set(.slow(bytesPerSecond: 2 * 1024 * 1024), on: "/chg.bin")
        server.set(.replaceAfter(requests: 2, body: newBody, etag: "\"v2\""), on: "/chg.bin")
        let t = try await downloadOnFourConnections("/chg.bin")
        try await finishCompleted(t, at: work + "/chg.bin", equals: newBody, timeout: 60)
        XCTAssertTrue(ferryd?.log.contains("one connection instead of 4") ?? false, "the log says why")
    }

    func testServerIgnoringRangesFallsBackToOneConnection() async throws {
        let body = serve("/ign.bin", size: 3 * 1024 * 1024)
        server.set(.ignoreRanges, on: "/ign.bin")
        let t = try await downloadOnFourConnections("/ign.bin")
        try await finishCompleted(t, at: work + "/ign.bin", equals: body, timeout: 30)
        XCTAssertTrue(ferryd?.log.contains("one connection instead of 4") ?? false, "the log says why")
    }

    func testSIGKILLDuringSegmentedDownloadResumesEveryRange() async throws {
        let body = serve("/kill.bin", size: Self.size)
        server.set(.slow(bytesPerSecond: 512 * 1024), on: "/kill.bin")
        let t = try await downloadOnFourConnections("/kill.bin")
        // Past a stored range map (stored at most once a second) and well before the end.
        try await waitForBytesTransferred(t, atLeast: Int64(Self.size / 2))
        XCTAssertGreaterThanOrEqual(rangeRequests("/kill.bin"), 2)
        try await killFerryd()
        // Counted once the server has seen the killed connections close: a slice it sends
        // meanwhile counts as served before the kill.
        try await waitUntilAsync("the server to see the killed connections close") { server.openConnections == 0 }
        let servedBeforeKill = bytesServed("/kill.bin")
        let requestsBeforeKill = server.requests(for: "/kill.bin").count
        try await startFerryd()
        try await finishCompleted(t, at: work + "/kill.bin", equals: body, timeout: 60)
        let kept = bytesKeptByTheRestart()
        XCTAssertGreaterThan(kept, 0, "the ranges on disk were kept across the kill")
        let after = server.requests(for: "/kill.bin").dropFirst(requestsBeforeKill)
        XCTAssertTrue(after.allSatisfy { $0.header("Range") != nil && $0.header("If-Range") == "\"v1\"" },
                      "after the restart only validated ranges were asked for")
        // Fetched twice: at most what was sent before the kill but not in the stored map.
        let refetched = bytesServed("/kill.bin") - body.count
        XCTAssertLessThanOrEqual(refetched, servedBeforeKill - Int(kept),
                                 "served \(bytesServed("/kill.bin")) for \(body.count); \(servedBeforeKill) before the kill, \(kept) kept")
    }

    /// Pause hands out the range map in the resume data; ResumeDownload continues every
    /// range (validated) instead of starting over.
    func testPauseAndResumeDownloadCarryTheRanges() async throws {
        let body = serve("/pr.bin", size: Self.size)
        server.set(.slow(bytesPerSecond: 512 * 1024), on: "/pr.bin")
        let s = try await session()
        let t = try await downloadOnFourConnections("/pr.bin", in: s)
        try await waitForBytesTransferred(t, atLeast: Int64(Self.size / 3))
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty, "a segmented download can be resumed")
        try await waitForState(t, "paused")
        try await waitUntilPauseSettled(t)
        let requestsBefore = server.requests(for: "/pr.bin").count
        server.clearBehaviours(on: "/pr.bin")
        // Created paused: it counts the ranges the data names (made at the pause, so
        // perhaps fewer than the file got before the attempt stopped), not the part
        // file's size; what it fetches is what that count leaves.
        let next = try await s.resumeDownload(data, options: ["start": .boolean(false)])
        let shown = try await next.info().bytesTransferred
        try await next.resume()
        try await finishCompleted(next, at: work + "/pr.bin", equals: body, timeout: 30)
        let after = server.requests(for: "/pr.bin").dropFirst(requestsBefore)
        XCTAssertFalse(after.isEmpty)
        XCTAssertTrue(after.allSatisfy { $0.header("Range") != nil && $0.header("If-Range") == "\"v1\"" },
                      "only validated ranges after the pause: \(after.map { $0.header("Range") ?? "whole" })")
        let afterBytes = after.reduce(0) { $0 + $1.bodyBytesSent }
        XCTAssertLessThan(afterBytes, body.count - Self.size / 4, "the ranges on disk were not fetched again")
        XCTAssertEqual(afterBytes, body.count - Int(shown), "BytesTransferred counted what it did not fetch again")
    }

    /// A paused download on several connections counts every range it keeps (not only
    /// the unbroken start of the first), in its last Progress and in BytesTransferred,
    /// and the same after a restart; Resume continues from there.
    func testAPausedSegmentedDownloadCountsEveryRangeItKeeps() async throws {
        let body = serve("/counted.bin", size: Self.size)
        server.set(.slow(bytesPerSecond: 512 * 1024), on: "/counted.bin")
        let t = try await downloadOnFourConnections("/counted.bin")
        try await waitForBytesTransferred(t, atLeast: Int64(Self.size / 4))
        XCTAssertGreaterThanOrEqual(rangeRequests("/counted.bin"), 2, "several ranges under way")
        _ = try await t.pause()
        let kept = try await waitUntilPauseSettled(t)
        XCTAssertGreaterThanOrEqual(kept, Int64(Self.size / 4), "every range's bytes count, not the first range's alone")
        let shown = try await t.info().bytesTransferred
        XCTAssertEqual(shown, kept, "BytesTransferred says what the last Progress said")
        try await killAndRestart()
        let restored = try await t.info().bytesTransferred
        XCTAssertEqual(restored, kept, "the same count after a restart")
        let seen = server.requests(for: "/counted.bin").count
        server.clearBehaviours(on: "/counted.bin")
        try await t.resume()
        try await finishCompleted(t, at: work + "/counted.bin", equals: body, timeout: 30)
        let after = server.requests(for: "/counted.bin").dropFirst(seen)
        XCTAssertEqual(after.reduce(0) { $0 + $1.bodyBytesSent }, body.count - Int(kept), "only what was not kept was fetched again")
    }

    /// A download asked to use several connections that ran on one (its session allows
    /// one connection per host) wrote a plain prefix: Pause hands out resume data for
    /// it, and both ResumeDownload and Resume continue after the bytes on disk rather
    /// than fetch them again.
    func testADownloadThatRanOnOneConnectionContinuesWhereItStopped() async throws {
        let (s, first, data, body) = try await pausedOneConnectionPrefix("/one.bin")
        XCTAssertFalse(data.isEmpty, "its bytes can be continued")
        let keptFirst = try XCTUnwrap(fileSize(work + "/one.bin.part"))
        let seen = server.requests(for: "/one.bin").count

        // The continuation stops at half the file, and is paused there.
        server.set(.stallAfter(bytes: Self.size / 2 - keptFirst, times: 1), on: "/one.bin")
        let second = try await s.resumeDownload(data, options: ["connections": .uint32(4)])
        try await waitForFileSize(work + "/one.bin.part", atLeast: Self.size / 2)
        _ = try await second.pause()
        try await waitForState(second, "paused")
        let keptSecond = try XCTUnwrap(fileSize(work + "/one.bin.part"))
        let resumed = server.requests(for: "/one.bin").dropFirst(seen)
        XCTAssertEqual(resumed.map { $0.header("Range") }, ["bytes=\(keptFirst)-"], "ResumeDownload continued the prefix")
        XCTAssertEqual(resumed.first?.header("If-Range"), "\"v1\"")

        try await resumeServedNormally(second, "/one.bin", continuingAfter: keptSecond, equals: body, "Resume continued the prefix")
    }

    /// The same prefix, paused, survives ferryd's kill -9: `Resume` afterwards continues
    /// after the bytes on disk.
    func testAOneConnectionPrefixIsContinuedAfterACrash() async throws {
        let (_, t, _, body) = try await pausedOneConnectionPrefix("/crash.bin")
        // The stopped attempt's byte count is what is stored with the prefix: killed
        // before that, ferryd would rightly start over. The pause's last Progress says
        // it is stored.
        let kept = Int(try await waitUntilPauseSettled(t))
        XCTAssertEqual(kept, fileSize(work + "/crash.bin.part"), "the paused download's last Progress counts the bytes on disk")
        try await killAndRestart()
        try await resumeServedNormally(t, "/crash.bin", continuingAfter: kept, equals: body, "Resume after the crash continued the prefix")
    }

    /// Lets the server serve `path` normally again and resumes `t`: it completes as
    /// `body` (at `work + path`), its one new request asking for the bytes after `kept`.
    private func resumeServedNormally(_ t: FerryTransfer, _ path: String, continuingAfter kept: Int, equals body: [UInt8],
                                      _ what: String) async throws {
        let seen = server.requests(for: path).count
        server.clearBehaviours(on: path)
        try await t.resume()
        try await finishCompleted(t, at: work + path, equals: body, timeout: 30)
        XCTAssertEqual(server.requests(for: path).dropFirst(seen).map { $0.header("Range") }, ["bytes=\(kept)-"], what)
    }

    /// A download of `path` asked for four connections in a session allowing one per
    /// host, paused after a quarter of the file: its session, the transfer, its resume
    /// data and the file's bytes.
    private func pausedOneConnectionPrefix(_ path: String) async throws -> (BusSession, FerryTransfer, [UInt8], [UInt8]) {
        let body = serve(path, size: Self.size)
        // The server stops sending at a quarter: no byte can land after the pause, however
        // late the attempt stops on a busy machine.
        server.set(.stallAfter(bytes: Self.size / 4, times: 1), on: path)
        let s = try await session("com.example.OnePerHost", ["max-connections-per-host": .uint32(1)])
        let t = try await downloadOnFourConnections(path, in: s)
        try await waitForFileSize(work + path + ".part", atLeast: Self.size / 4)
        let data = try await t.pause()
        try await waitForState(t, "paused")
        return (s, t, data, body)
    }

    /// Paused once the server has refused its range requests, the download is like one
    /// from a server without ranges: no resume data, `Resumable` false, and `Resume`
    /// starts it over and completes (continuing its range map would only be refused).
    func testAServerRefusingRangesCanBePausedAndResumed() async throws {
        let body = serve("/refuses.bin", size: Self.size)
        server.set(.slow(bytesPerSecond: 1024 * 1024), on: "/refuses.bin")
        server.set(.failRangeRequests(Int.max, status: 403), on: "/refuses.bin")
        let t = try await downloadOnFourConnections("/refuses.bin")
        // Answered (a status), then refused: Resumable, true with the first answer, is false.
        let deadline = Date().addingTimeInterval(20)
        while true {
            let info = try await t.info()
            if info.httpStatus != 0, !info.resumable, rangeRequests("/refuses.bin") >= 1 { break }
            if Date() > deadline { return XCTFail("the refused ranges did not make it unresumable: \(info)") }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        let data = try await t.pause()
        XCTAssertEqual(data, [], "nothing to resume from")
        try await waitForState(t, "paused")
        server.clearBehaviours(on: "/refuses.bin")
        server.set(.failRangeRequests(Int.max, status: 403), on: "/refuses.bin")
        try await t.resume()
        try await finishCompleted(t, at: work + "/refuses.bin", equals: body, timeout: 30)
    }

    /// A server that sends the file to a plain request but refuses every range request
    /// (403): the download takes one connection, as with `connections` 1, and completes
    /// in its first attempt.
    func testAServerRefusingRangesStillGivesTheFile() async throws {
        let body = serve("/norange.bin", size: Self.size)
        server.set(.slow(bytesPerSecond: 4 * 1024 * 1024), on: "/norange.bin")
        server.set(.failRangeRequests(Int.max, status: 403), on: "/norange.bin")
        let t = try await downloadOnFourConnections("/norange.bin")
        let info = try await finishCompleted(t, at: work + "/norange.bin", equals: body, timeout: 30)
        XCTAssertEqual(info.attempts, 1)
        XCTAssertGreaterThanOrEqual(rangeRequests("/norange.bin"), 1, "ranges were tried")
    }
}
