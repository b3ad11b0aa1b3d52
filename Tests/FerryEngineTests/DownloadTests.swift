import FerryCore
import FerryEngine
import FerryInterface
import FerryTestSupport
import Foundation
import XCTest

final class DownloadTests: EngineTestCase {
    func testFullDownloadWritesBytesHashesAndReportsHeaders() throws {
        let body = TestData.bytes(count: 16 << 20, seed: 7)
        server.add(path: "/big.bin", body: body, etag: "\"abc\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT",
                   contentDisposition: "attachment; filename=\"big.bin\"")
        let part = partPath("big.bin.part")

        let outcome = run(request(1, "/big.bin", part: part, sha: true))

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(contents(part), body)
        assertWellFormedEvents(1)
        let response = try XCTUnwrap(responses(1).first)
        var expected = EngineResponse(
            status: 200, etag: "\"abc\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT",
            expectedTotal: Int64(body.count), startOffset: 0,
            contentDisposition: "attachment; filename=\"big.bin\"", acceptsRanges: true,
            effectiveURL: server.url("/big.bin"))
        expected.spaceReserved = true // the length was announced: its space is reserved (ext4, tmpfs)
        XCTAssertEqual(response, expected)
        let progress = log.events(for: 1).compactMap(\.progress)
        XCTAssertEqual(progress.map(\.bytesWritten).reduce(0, +), Int64(body.count), "progress adds up to the size")
        XCTAssertEqual(progress.last?.totalOnDisk, Int64(body.count), "final counts are reported")
        XCTAssertTrue(progress.allSatisfy { $0.expected == Int64(body.count) })
        // 16 MiB arrives in hundreds of chunks; progress is coalesced to 250 ms.
        XCTAssertLessThan(progress.count, 40)
        XCTAssertEqual(server.requests(for: "/big.bin").first?.header("User-Agent"), "Ferry/" + FerryInterface.releaseVersion)
        XCTAssertNil(server.requests(for: "/big.bin").first?.header("Range"))
        XCTAssertNil(server.requests(for: "/big.bin").first?.header("Accept-Encoding"))
    }

    /// A large body streams to the file, with write-out started on the way; when the
    /// attempt reports success (and the coordinator may give the file its final name),
    /// no descriptor of the file is open any more, the write-out's own included.
    func testLargeBodyStreams() {
        let body = TestData.bytes(count: 64 << 20, seed: 8)
        server.add(path: "/huge", body: body)
        let part = partPath("huge.part")
        XCTAssertEqual(run(request(1, "/huge", part: part), timeout: 120), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertEqual(descriptorsOpen(under: directory.path), [], "open when the attempt reported its end")
        XCTAssertTrue(contents(part) == body)
        assertWellFormedEvents(1)
    }

    /// A partial file the engine creates carries this ferryd's mark, so a restart that
    /// finds it forgotten may remove it and no other program's `NAME.part`.
    func testANewPartFileIsMarkedAsOurs() throws {
        server.add(path: "/marked.bin", body: [1, 2, 3])
        let part = partPath("marked.bin.part")
        XCTAssertEqual(run(request(1, "/marked.bin", part: part)), .succeeded(bytesOnDisk: 3, sha256: nil))
        let probe = partPath("probe")
        XCTAssertTrue(FileManager.default.createFile(atPath: probe, contents: nil))
        guard OriginURLAttribute.set(path: probe, url: "https://example.com/") else { throw XCTSkip("no user extended attributes here") }
        XCTAssertTrue(PartFileMark.isMarked(part))
    }

    func testDownloadWithoutHashReportsNone() {
        let body = TestData.bytes(count: 100_000, seed: 3)
        server.add(path: "/a", body: body)
        XCTAssertEqual(run(request(1, "/a")), .succeeded(bytesOnDisk: 100_000, sha256: nil))
    }

    func testEmptyBody() {
        server.add(path: "/empty", body: [UInt8](), etag: nil)
        let part = partPath("empty.part")
        try? write([1, 2, 3], to: part) // a stale part file is truncated: offset 0 = start over
        XCTAssertEqual(run(request(1, "/empty", part: part, sha: true)),
                       .succeeded(bytesOnDisk: 0, sha256: TestData.sha256Hex([UInt8]())))
        XCTAssertEqual(contents(part), [])
        XCTAssertEqual(responses(1).first?.expectedTotal, 0)
    }

    func testProgressIsCoalescedTo250Milliseconds() throws {
        let body = TestData.bytes(count: 600_000, seed: 11)
        server.add(path: "/slow", body: body)
        server.set(.slow(bytesPerSecond: 600_000), on: "/slow") // ~10 slices over ~1 s

        XCTAssertEqual(run(request(1, "/slow")), .succeeded(bytesOnDisk: 600_000, sha256: nil))

        let timed = log.timedEvents(for: 1).filter { $0.event.progress != nil }
        XCTAssertGreaterThanOrEqual(timed.count, 2)
        // Every event but the final one is at least ~250 ms after the previous one.
        for i in 1..<max(1, timed.count - 1) {
            XCTAssertGreaterThan(timed[i].at.timeIntervalSince(timed[i - 1].at), 0.2)
        }
        let progress = timed.compactMap(\.event.progress)
        XCTAssertEqual(progress.map(\.bytesWritten).reduce(0, +), 600_000)
        XCTAssertEqual(progress.map(\.totalOnDisk), progress.indices.map { i in
            progress[...i].map(\.bytesWritten).reduce(0, +)
        }, "totalOnDisk is the running sum")
        XCTAssertEqual(progress.last?.totalOnDisk, 600_000)
        assertWellFormedEvents(1)
    }

    func testRedirectIsFollowedAndEffectiveURLReported() throws {
        let body = TestData.bytes(count: 50_000, seed: 5)
        server.add(path: "/real", body: body)
        server.set(.redirect(to: "/real", status: 301), on: "/old")
        server.set(.redirect(to: server.url("/old"), status: 307), on: "/older")

        XCTAssertEqual(run(request(1, "/older", sha: true)),
                       .succeeded(bytesOnDisk: 50_000, sha256: TestData.sha256Hex(body)))
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.effectiveURL, server.url("/real"))
        XCTAssertEqual(responses(1).count, 1, "redirect responses are not reported")
    }

    func testRequestHeadersAreSent() {
        server.add(path: "/h", body: [1, 2, 3])
        _ = run(request(1, "/h", headers: [("X-Test", "yes"), ("Authorization", "Bearer secret")]))
        let recorded = server.requests(for: "/h").first
        XCTAssertEqual(recorded?.header("X-Test"), "yes")
        XCTAssertEqual(recorded?.header("Authorization"), "Bearer secret")
    }

    func testManyConcurrentTransfersShareTheEngineThread() {
        let count = 20
        var bodies: [[UInt8]] = []
        for i in 0..<count {
            let body = TestData.bytes(count: 300_000 + i * 1_000, seed: UInt64(100 + i))
            bodies.append(body)
            server.add(path: "/f\(i)", body: body)
            if i % 4 == 0 { server.set(.slow(bytesPerSecond: 1_000_000), on: "/f\(i)") }
        }
        for i in 0..<count {
            engine.start(request(TransferID(i + 1), "/f\(i)", sha: true))
        }
        let done = log.wait(timeout: 60) { events in events.filter(\.isCompleted).count == count }
        XCTAssertTrue(done, "all \(count) transfers completed")
        for i in 0..<count {
            let id = TransferID(i + 1)
            XCTAssertEqual(log.outcome(of: id, timeout: 0),
                           .succeeded(bytesOnDisk: Int64(bodies[i].count), sha256: TestData.sha256Hex(bodies[i])))
            XCTAssertEqual(contents(partPath("\(id).part")), bodies[i])
            assertWellFormedEvents(id)
        }
        XCTAssertEqual(log.threadCount, 1, "every event comes from the one engine thread")
    }
}
