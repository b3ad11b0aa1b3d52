import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Download options `mirrors` and `pieces` (contract v1.2) through the real ferryd, with
/// a loopback server that serves the file on several mirror paths, one of which
/// corrupts a piece and one of which cuts a range short.
final class MirrorsTests: FerryTestCase {
    static let size = 8 * 1024 * 1024
    static let pieceLength = 256 * 1024
    let paths = ["/main/f.bin", "/m1/f.bin", "/m2/f.bin", "/m3/f.bin"]

    func bytesServed(_ paths: [String]) -> Int {
        paths.flatMap { server.requests(for: $0) }.reduce(0) { $0 + $1.bodyBytesSent }
    }

    func piecesOption(_ body: [UInt8]) -> DBusValue {
        let hex = stride(from: 0, to: body.count, by: Self.pieceLength).map { start in
            TestData.sha256Hex(Array(body[start..<min(start + Self.pieceLength, body.count)]))
        }
        return .structure([.uint64(UInt64(Self.pieceLength)), .stringArray(hex)])
    }

    /// The same file on every path.
    func serveMirrors(seed: UInt64) -> [UInt8] {
        var body: [UInt8] = []
        for path in paths { body = serve(path, size: Self.size, seed: seed) }
        return body
    }

    func options(_ body: [UInt8], name: String, connections: UInt32 = 4) -> [String: DBusValue] {
        ["destination": .string(work + "/" + name), "connections": .uint32(connections),
         "mirrors": .stringArray(paths.dropFirst().map { server.url($0) }), "pieces": piecesOption(body),
         "sha256": .string(TestData.sha256Hex(body))]
    }

    /// Every mirror path serves the file at `bytesPerSecond`; its download (mirrors,
    /// pieces, sha256) to `work/NAME` has started.
    func startSlowMirroredDownload(seed: UInt64, bytesPerSecond: Int, name: String) async throws -> ([UInt8], BusSession, FerryTransfer) {
        let body = serveMirrors(seed: seed)
        for path in paths { server.set(.slow(bytesPerSecond: bytesPerSecond), on: path) }
        let s = try await session()
        return (body, s, try await s.download(server.url(paths[0]), options: options(body, name: name)))
    }

    func testABadPieceAndAShortRangeAreFetchedAgainFromOtherMirrors() async throws {
        let body = serveMirrors(seed: 31)
        // /m1 corrupts a byte of piece 9 (in its first range); /m2 cuts its first range short.
        server.set(.corruptByte(at: 9 * Self.pieceLength + 123), on: "/m1/f.bin")
        server.set(.dropRangeAfter(bytes: 100 * 1024), on: "/m2/f.bin")
        // The URL's first range (2 MiB) is still coming when the other ranges are handed
        // out, so /m1 gets 2-4 MiB (pieces 8-15) whatever the machine's speed.
        server.set(.slow(bytesPerSecond: 4 * 1024 * 1024), on: "/main/f.bin")
        let s = try await session()
        let t = try await s.download(server.url(paths[0]), options: options(body, name: "f.bin"))
        let info = try await finish(t, timeout: 60)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/f.bin", equals: body)
        XCTAssertEqual(info.sha256, TestData.sha256Hex(body))
        XCTAssertEqual(info.mirrors, paths.dropFirst().map { server.url($0) })
        XCTAssertEqual(info.pieceLength, UInt64(Self.pieceLength))
        XCTAssertEqual(info.pieceCount, UInt32(Self.size / Self.pieceLength))
        XCTAssertFalse(server.requests(for: "/m1/f.bin").isEmpty, "the corrupting mirror was used")
        XCTAssertFalse(server.requests(for: "/m2/f.bin").isEmpty, "the cutting mirror was used")
        // Fetched again: the bad piece and the short range's bytes (under one piece).
        let again = bytesServed(paths) - body.count
        XCTAssertLessThanOrEqual(again, 2 * Self.pieceLength, "served \(bytesServed(paths)) for \(body.count)")
        // The log names both (read as ferryd's output reaches the test: it may lag the signal).
        let bad = "source \(server.url("/m1/f.bin")) dropped: piece 9 failed its SHA-256"
        let short = "source \(server.url("/m2/f.bin")) dropped"
        try await waitUntilAsync("the log to name the bad and the short mirror") {
            let log = ferryd?.log ?? ""
            return log.contains(bad) && log.contains(short)
        }
        XCTAssertFalse(exists(work + "/f.bin.part"))
    }

    func testEveryMirrorFailingAPieceIsChecksumMismatchNamingThem() async throws {
        let body = serveMirrors(seed: 32)
        for path in paths { server.set(.corruptByte(at: 3 * Self.pieceLength + 1), on: path) }
        let s = try await session()
        let t = try await s.download(server.url(paths[0]), options: options(body, name: "bad.bin"))
        let info = try await finish(t, timeout: 60)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.ChecksumMismatch", info.errorMessage)
        for path in paths { XCTAssertTrue(info.errorMessage.contains(server.url(path)), "\(info.errorMessage) names \(path)") }
        XCTAssertFalse(exists(work + "/bad.bin"), "the final name never holds an unverified file")
    }

    func testSIGKILLWithMirrorsAndPiecesKeepsTheVerifiedPieces() async throws {
        let (body, _, t) = try await startSlowMirroredDownload(seed: 33, bytesPerSecond: 256 * 1024, name: "k.bin")
        // Past a stored map of verified pieces (stored at most once a second), well before the end.
        try await waitForProgress(t, atLeast: Int64(Self.size / 2))
        try await killFerryd()
        try await waitUntilAsync("the server to see the killed connections close") { server.openConnections == 0 }
        let servedBeforeKill = bytesServed(paths)
        try await startFerryd()
        try await finishCompleted(t, at: work + "/k.bin", equals: body, timeout: 90)
        let kept = Int(bytesKeptByTheRestart())
        XCTAssertGreaterThan(kept, 0, "verified pieces were kept across the kill")
        XCTAssertEqual(kept % Self.pieceLength, 0, "whole pieces only")
        XCTAssertTrue(ferryd?.log.contains("pieces kept on disk") ?? false, "the kept pieces are checked again from the disk")
        // Fetched twice: at most what was sent before the kill but not kept as verified.
        let refetched = bytesServed(paths) - body.count
        XCTAssertLessThanOrEqual(refetched, servedBeforeKill - kept,
                                 "served \(bytesServed(paths)) for \(body.count); \(servedBeforeKill) before the kill, \(kept) kept")
    }

    /// Pause hands out resume data whose range map holds verified pieces only;
    /// ResumeDownload with the same mirrors and pieces fetches exactly the rest.
    func testResumeDataCarriesTheVerifiedPieces() async throws {
        let (body, s, t) = try await startSlowMirroredDownload(seed: 35, bytesPerSecond: 512 * 1024, name: "rd.bin")
        try await waitForProgress(t, atLeast: Int64(Self.size / 3))
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty, "a download with pieces can be resumed")
        try await waitForState(t, "paused")
        try await waitUntilPauseSettled(t)
        try await waitUntilAsync("the server to see the paused connections close") { server.openConnections == 0 }
        let servedBefore = bytesServed(paths)
        for path in paths { server.clearBehaviours(on: path) }
        var again = options(body, name: "rd.bin")
        again["destination"] = nil
        again["start"] = .boolean(false)
        let next = try await s.resumeDownload(data, options: again)
        let kept = try await next.info().bytesTransferred
        XCTAssertGreaterThan(kept, 0)
        XCTAssertEqual(kept % Int64(Self.pieceLength), 0, "whole verified pieces only")
        try await next.resume()
        let info = try await finish(next, timeout: 60)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/rd.bin", equals: body)
        XCTAssertEqual(bytesServed(paths) - servedBefore, body.count - Int(kept), "exactly the pieces not kept were fetched")
    }

    func testMalformedMirrorsAndPiecesAreInvalidArgumentAndQueueNothing() async throws {
        let s = try await session()
        let url = server.url("/nothing")
        let digest = String(repeating: "0", count: 64)
        let cases: [(String, [String: DBusValue])] = [
            ("ftp mirror", ["mirrors": .stringArray(["ftp://example.com/x"])]),
            ("no scheme", ["mirrors": .stringArray(["example.com/x"])]),
            ("17 mirrors", ["mirrors": .stringArray((0..<17).map { "http://m\($0).example.com/x" })]),
            ("mirrors type", ["mirrors": .string("http://example.com/x")]),
            ("piece length 0", ["pieces": .structure([.uint64(0), .stringArray([digest])])]),
            ("piece length huge", ["pieces": .structure([.uint64(UInt64.max), .stringArray([digest])])]),
            ("bad hex", ["pieces": .structure([.uint64(65536), .stringArray(["xyz"])])]),
            ("no pieces", ["pieces": .structure([.uint64(65536), .stringArray([])])]),
            ("too many pieces", ["pieces": .structure([.uint64(65536), .stringArray(Array(repeating: digest, count: 32_769))])]),
            ("pieces type", ["pieces": .stringArray([digest])]),
        ]
        for (name, options) in cases {
            await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", name) { try await s.download(url, options: options) }
        }
        let listed = try await s.listTransfers()
        XCTAssertEqual(listed.count, 0, "nothing was queued")
        await assertDaemonAlive()
    }

    func testCLIGetWithMirrorsAndPiecesFile() async throws {
        let body = serveMirrors(seed: 34)
        server.set(.corruptByte(at: 1), on: "/main/f.bin") // piece 0 of the URL is bad
        let list = work + "/pieces.txt"
        let hex = stride(from: 0, to: body.count, by: Self.pieceLength).map { start in
            TestData.sha256Hex(Array(body[start..<min(start + Self.pieceLength, body.count)]))
        }
        try ("# pieces\n" + hex.joined(separator: "\n") + "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let r = try ferry(["get", "--wait", "-o", work + "/cli.bin", "--mirror", server.url("/m1/f.bin"),
                            "--mirror", server.url("/m2/f.bin"), "--pieces", "\(Self.pieceLength):@\(list)",
                            server.url("/main/f.bin")], timeout: 60)
        XCTAssertEqual(r.status, 0, r.stderr)
        assertFile(work + "/cli.bin", equals: body)
        let listed = try await client.listTransfers()
        let id = try XCTUnwrap(listed.first?.id)
        let shown = try ferry(["show", "\(id)"]).stdout
        XCTAssertTrue(shown.contains("Mirror:       \(server.url("/m1/f.bin"))"), shown)
        XCTAssertTrue(shown.contains("Pieces:       32 of 262144 bytes"), shown)
        let json = try ferry(["show", "--json", "\(id)"]).stdout
        XCTAssertTrue(json.contains("\"piece_count\" : 32") || json.contains("\"piece_count\":32"), json)
    }
}
