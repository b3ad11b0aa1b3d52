import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

final class ResumeTests: EngineTestCase {
    private let size = 1_000_000
    private let offset = 300_000

    func testResumeWithMatchingValidatorContinuesAtOffset() throws {
        let body = TestData.bytes(count: size, seed: 21)
        server.add(path: "/f", body: body, etag: "\"v1\"")
        let part = partPath("f.part")
        // The prefix, plus junk past the offset that must not survive.
        try write(Array(body[..<offset]) + [UInt8](repeating: 0xEE, count: 5_000), to: part)

        let outcome = run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "\"v1\"", sha: true))

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(contents(part), body)
        let sent = try XCTUnwrap(server.requests(for: "/f").first)
        XCTAssertEqual(sent.header("Range"), "bytes=\(offset)-")
        XCTAssertEqual(sent.header("If-Range"), "\"v1\"")
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.status, 206)
        XCTAssertEqual(response.startOffset, Int64(offset))
        XCTAssertEqual(response.expectedTotal, Int64(size))
        XCTAssertTrue(response.acceptsRanges)
        let progress = log.events(for: 1).compactMap(\.progress)
        XCTAssertEqual(progress.map(\.bytesWritten).reduce(0, +), Int64(size - offset))
        XCTAssertEqual(progress.last?.totalOnDisk, Int64(size))
        assertWellFormedEvents(1)
    }

    func testResumeWithLastModifiedValidator() throws {
        let date = "Tue, 01 Jul 2025 10:00:00 GMT"
        let body = TestData.bytes(count: size, seed: 22)
        server.add(path: "/f", body: body, etag: nil, lastModified: date)
        let part = partPath("f.part")
        try write(Array(body[..<offset]), to: part)

        XCTAssertEqual(run(request(1, "/f", part: part, offset: Int64(offset), ifRange: date)),
                       .succeeded(bytesOnDisk: Int64(size), sha256: nil))
        XCTAssertEqual(contents(part), body)
        XCTAssertEqual(responses(1).first?.status, 206)
        XCTAssertEqual(server.requests(for: "/f").first?.header("If-Range"), date)
    }

    func testChangedETagRestartsFromZero() throws {
        let old = TestData.bytes(count: size, seed: 23)
        let new = TestData.bytes(count: size + 123, seed: 24)
        server.add(path: "/f", body: new, etag: "\"v2\"")
        let part = partPath("f.part")
        try write(Array(old[..<offset]), to: part)

        let outcome = run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "\"v1\"", sha: true))

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        XCTAssertEqual(contents(part), new)
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.startOffset, 0)
        XCTAssertEqual(response.etag, "\"v2\"")
        XCTAssertEqual(log.events(for: 1).compactMap(\.progress).last?.totalOnDisk, Int64(new.count))
    }

    /// A server that ignores `If-Range` sends the asked-for range of the changed file
    /// (206, new ETag): none of it is written after the old bytes; the whole new file
    /// is fetched again in the same attempt.
    func testRangeOfAChangedFileFromAServerIgnoringIfRangeStartsOverFromZero() throws {
        let old = TestData.bytes(count: size, seed: 31)
        let new = TestData.bytes(count: size + 77, seed: 32)
        server.add(path: "/f", body: new, etag: "\"v2\"")
        server.set(.ignoreIfRange, on: "/f")
        let part = partPath("f.part")
        try write(Array(old[..<offset]), to: part)

        let outcome = run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "\"v1\"", sha: true))

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        XCTAssertTrue(contents(part) == new, "the new file, not the old prefix with the new file's tail")
        let sent = server.requests(for: "/f")
        XCTAssertEqual(sent.map { $0.header("Range") }, ["bytes=\(offset)-", nil], "the range, then the whole file")
        XCTAssertEqual(sent.last?.header("If-Range"), nil)
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(responses(1).count, 1, "the core hears only of the answer that is used")
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.startOffset, 0)
        XCTAssertEqual(response.etag, "\"v2\"")
        XCTAssertEqual(log.events(for: 1).compactMap(\.progress).map(\.bytesWritten).reduce(0, +), Int64(new.count))
        assertWellFormedEvents(1)
    }

    /// A range without the kind of validator that was sent (a mirror after SetUrl, or a
    /// file replaced by one served without an ETag) cannot show it is the same file:
    /// the download starts over rather than join the old bytes to the new file's tail.
    func testRangeWithoutTheValidatorSentStartsOverFromZero() throws {
        let old = TestData.bytes(count: size, seed: 35)
        let new = TestData.bytes(count: size + 500, seed: 36)
        server.add(path: "/f", body: new, etag: nil)
        server.add(path: "/d", body: new, etag: nil, lastModified: nil)
        server.set(.ignoreIfRange, on: "/f") // it sends the range asked for, with no validator
        server.set(.ignoreIfRange, on: "/d")
        for (path, validator) in [("/f", "\"v1\""), ("/d", "Tue, 01 Jul 2025 10:00:00 GMT")] {
            let part = partPath("\(path.dropFirst()).part")
            try write(Array(old[..<offset]), to: part)
            let id = TransferID(path == "/f" ? 1 : 2)
            XCTAssertEqual(run(request(id, path, part: part, offset: Int64(offset), ifRange: validator, sha: true)),
                           .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)), path)
            XCTAssertTrue(contents(part) == new, "\(path): the new file, not the old prefix with the new file's tail")
            XCTAssertEqual(server.requests(for: path).map { $0.header("Range") }, ["bytes=\(offset)-", nil], path)
        }
    }

    /// The same with a Last-Modified date as the validator.
    func testRangeOfAFileWithANewDateFromAServerIgnoringIfRangeStartsOverFromZero() throws {
        let old = TestData.bytes(count: size, seed: 33)
        let new = TestData.bytes(count: size - 99, seed: 34)
        server.add(path: "/f", body: new, etag: nil, lastModified: "Wed, 02 Jul 2025 10:00:00 GMT")
        server.set(.ignoreIfRange, on: "/f")
        let part = partPath("f.part")
        try write(Array(old[..<offset]), to: part)

        XCTAssertEqual(run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "Tue, 01 Jul 2025 10:00:00 GMT")),
                       .succeeded(bytesOnDisk: Int64(new.count), sha256: nil))
        XCTAssertTrue(contents(part) == new, "the new file, not the old prefix with the new file's tail")
        XCTAssertEqual(server.requests(for: "/f").map { $0.header("Range") }, ["bytes=\(offset)-", nil])
    }

    func testServerWithoutRangeSupportSendsWholeFile() throws {
        let body = TestData.bytes(count: size, seed: 25)
        server.add(path: "/f", body: body, supportsRanges: false)
        let part = partPath("f.part")
        try write(Array(body[..<offset]), to: part)

        XCTAssertEqual(run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "\"v1\"", sha: true)),
                       .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(contents(part), body)
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.startOffset, 0)
        XCTAssertFalse(response.acceptsRanges)
    }

    func testOffsetWithoutValidatorStartsOverWithoutRange() throws {
        let body = TestData.bytes(count: size, seed: 26)
        server.add(path: "/f", body: body)
        let part = partPath("f.part")
        try write([UInt8](repeating: 9, count: offset), to: part)

        XCTAssertEqual(run(request(1, "/f", part: part, offset: Int64(offset), ifRange: nil)),
                       .succeeded(bytesOnDisk: Int64(size), sha256: nil))
        XCTAssertEqual(contents(part), body)
        XCTAssertNil(server.requests(for: "/f").first?.header("Range"))
        XCTAssertNil(server.requests(for: "/f").first?.header("If-Range"))
        XCTAssertEqual(responses(1).first?.startOffset, 0)
    }

    func testPartFileShorterThanOffsetStartsOver() throws {
        let body = TestData.bytes(count: size, seed: 27)
        server.add(path: "/f", body: body)
        let part = partPath("f.part")
        try write(Array(body[..<1_000]), to: part)

        XCTAssertEqual(run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "\"v1\"")),
                       .succeeded(bytesOnDisk: Int64(size), sha256: nil))
        XCTAssertEqual(contents(part), body)
        XCTAssertNil(server.requests(for: "/f").first?.header("Range"))
    }

    func testCompletePartFileIsRecognisedBy416() throws {
        let body = TestData.bytes(count: size, seed: 28)
        server.add(path: "/f", body: body)
        let part = partPath("f.part")
        try write(body, to: part)
        var r = request(1, "/f", part: part, offset: Int64(size), ifRange: "\"v1\"", sha: true)
        r.knownTotal = Int64(size)

        XCTAssertEqual(run(r), .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(server.requests(for: "/f").count, 1, "nothing fetched again")
        XCTAssertEqual(contents(part), body)
        XCTAssertEqual(responses(1).first?.startOffset, Int64(size))
        XCTAssertEqual(responses(1).first?.expectedTotal, Int64(size))
    }

    /// The file shrank on the server while the download was paused past the new end,
    /// and the server ignores If-Range: its 416 ("bytes */NEW") is no reason to fail, nor
    /// proof of a complete file. The download starts over and gets the new file.
    func testA416FromAFileThatShrankStartsOverFromZero() throws {
        let old = TestData.bytes(count: size, seed: 37)
        let new = TestData.bytes(count: 500_000, seed: 38)
        server.add(path: "/f", body: new, etag: "\"v2\"")
        server.set(.ignoreIfRange, on: "/f")
        let part = partPath("f.part")
        try write(Array(old[..<900_000]), to: part)
        var r = request(1, "/f", part: part, offset: 900_000, ifRange: "\"v1\"", sha: true)
        r.knownTotal = Int64(size)

        XCTAssertEqual(run(r), .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        XCTAssertTrue(contents(part) == new, "the new file, not the old prefix")
        XCTAssertEqual(server.requests(for: "/f").map { $0.header("Range") }, ["bytes=900000-", nil],
                       "the range (416), then the whole file")
        XCTAssertEqual(responses(1).map(\.startOffset), [0], "the core hears only of the answer used: no resume at 900,000")
        assertWellFormedEvents(1)
    }

    /// A 416 saying the file ends where the part file does, from a server that said
    /// before (under the same ETag) that it was longer: the bytes on disk were cut short
    /// (the server closed early, then fibs about its length); they never become the file.
    func testA416AtTheEndOfAFileCutShortIsNotTakenAsComplete() throws {
        let body = TestData.bytes(count: 300_000, seed: 39)
        server.add(path: "/f", body: body, etag: "\"v1\"")
        let part = partPath("f.part")
        try write(body, to: part)
        var r = request(1, "/f", part: part, offset: Int64(body.count), ifRange: "\"v1\"")
        r.knownTotal = 400_000 // what the first answer announced

        XCTAssertEqual(run(r), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertEqual(server.requests(for: "/f").map { $0.header("Range") }, ["bytes=300000-", nil],
                       "the 416 did not end the download: the whole file was fetched again")
        XCTAssertEqual(responses(1).map(\.status), [200])
    }

    /// A 416 at the part file's end that carries another ETag is of another file.
    func testA416WithAnotherETagIsNotTakenAsComplete() throws {
        let old = TestData.bytes(count: size, seed: 40)
        let new = TestData.bytes(count: size, seed: 41)
        server.add(path: "/f", body: new, etag: "\"v2\"")
        server.set(.ignoreIfRange, on: "/f")
        let part = partPath("f.part")
        try write(old, to: part)
        var r = request(1, "/f", part: part, offset: Int64(size), ifRange: "\"v1\"", sha: true)
        r.knownTotal = Int64(size)

        XCTAssertEqual(run(r), .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(new)))
        XCTAssertTrue(contents(part) == new)
    }

    func testDroppedConnectionThenResumeCompletesTheFile() throws {
        let body = TestData.bytes(count: size, seed: 29)
        server.add(path: "/f", body: body)
        server.set(.dropAfter(bytes: 200_000, times: 1), on: "/f")
        let part = partPath("f.part")

        let first = run(request(1, "/f", part: part, sha: true))
        guard case .failed(.network(let message), let onDisk)? = first else {
            return XCTFail("expected a network failure, got \(String(describing: first))")
        }
        XCTAssertEqual(onDisk, 200_000)
        XCTAssertEqual(contents(part), Array(body[..<200_000]))
        XCTAssertTrue(message.contains("127.0.0.1:\(server.port)"), message)

        let second = run(request(2, "/f", part: part, offset: onDisk, ifRange: "\"v1\"", sha: true))
        XCTAssertEqual(second, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(contents(part), body)
        XCTAssertEqual(responses(2).first?.status, 206)
    }

    func testUnexpectedContentRangeFails() throws {
        let body = TestData.bytes(count: size, seed: 30)
        server.add(path: "/f", body: body)
        server.set(.shiftRanges(by: 1_000), on: "/f") // answers bytes 299000- when asked for 300000-
        let part = partPath("f.part")
        try write(Array(body[..<offset]), to: part)

        let outcome = run(request(1, "/f", part: part, offset: Int64(offset), ifRange: "\"v1\""))

        guard case .failed(.network(let message), let onDisk)? = outcome else {
            return XCTFail("expected a network failure, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("unexpected range"), message)
        XCTAssertEqual(onDisk, Int64(offset), "the part file is kept")
        XCTAssertEqual(contents(part), Array(body[..<offset]))
        XCTAssertTrue(responses(1).isEmpty)
    }
}
