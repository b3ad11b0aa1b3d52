import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// Downloads over several range connections into one part file, validated.
final class SegmentedDownloadTests: EngineTestCase {
    private let size = 8 << 20

    private func segmented(_ id: TransferID, _ path: String, connections: Int, part: String? = nil,
                           segments: SegmentMap? = nil, ifRange: String? = nil, offset: Int64 = 0,
                           speedLimit: UInt64 = 0, sha: Bool = true) -> EngineRequest {
        var r = request(id, path, part: part, offset: offset, ifRange: ifRange, speedLimit: speedLimit, sha: sha)
        r.connections = connections
        r.segments = segments
        return r
    }

    private func rangeRequests(_ path: String) -> [RecordedRequest] {
        server.requests(for: path).filter { $0.header("Range") != nil }
    }

    /// "bytes=A-B" -> A..<B+1.
    private func asked(_ request: RecordedRequest) -> Range<Int64>? {
        guard let value = request.header("Range"), value.hasPrefix("bytes=") else { return nil }
        let ends = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
        guard ends.count == 2, let a = Int64(ends[0]), let b = Int64(ends[1]) else { return nil }
        return a..<(b + 1)
    }

    func testSeveralConnectionsFetchTheFileInRanges() throws {
        let body = TestData.bytes(count: size, seed: 80)
        server.add(path: "/big", body: body, etag: "\"v1\"")
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/big")

        let outcome = run(segmented(1, "/big", connections: 4), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(descriptorsOpen(under: directory.path), [], "no descriptor of the file open at its end (write-out's included)")
        assertFile(partPath("1.part"), holds: body)
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.connections, 4)
        XCTAssertNil(response.singleConnectionReason)
        let ranges = rangeRequests("/big")
        XCTAssertGreaterThanOrEqual(ranges.count, 3, "the rest of the file came over range requests")
        XCTAssertTrue(ranges.allSatisfy { $0.header("If-Range") == "\"v1\"" }, "every range request is validated")
        // Nothing fetched twice: the bytes served add up to the file (the first answer
        // is cut where the second range begins, give or take what was in flight).
        let served = server.requests(for: "/big").map(\.bodyBytesSent).reduce(0, +)
        XCTAssertLessThan(served, size + 2 << 20)
        let maps = log.events(for: 1).compactMap(\.segments)
        XCTAssertTrue(maps.last?.isComplete ?? false)
        XCTAssertEqual(maps.last?.total, Int64(size))
        assertSegmentedEvents(1)
    }

    func testDigestOfALargerFileIsRight() throws {
        // Large enough for the prefix to be hashed in steps while the rest still comes.
        let body = TestData.bytes(count: 48 << 20, seed: 100)
        server.add(path: "/large", body: body)
        server.set(.slow(bytesPerSecond: 12_000_000), on: "/large")

        XCTAssertEqual(run(segmented(1, "/large", connections: 4), timeout: 60),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
    }

    func testSmallFileUsesOneRequest() throws {
        let body = TestData.bytes(count: 300_000, seed: 81)
        server.add(path: "/small", body: body)

        XCTAssertEqual(run(segmented(1, "/small", connections: 8)),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(server.requests(for: "/small").count, 1, "no range is smaller than 1 MiB")
        assertFile(partPath("1.part"), holds: body)
    }

    func testETagChangeMidDownloadGivesTheNewFileWhole() throws {
        let old = TestData.bytes(count: size, seed: 82)
        let new = TestData.bytes(count: size + 4321, seed: 83)
        server.add(path: "/f", body: old, etag: "\"v1\"")
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")
        server.set(.replaceAfter(requests: 1, body: new, etag: "\"v2\""), on: "/f")

        let outcome = run(segmented(1, "/f", connections: 4), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        assertFile(partPath("1.part"), holds: new, "never a file stitched from two versions")
        let restart = try XCTUnwrap(responses(1).last)
        XCTAssertEqual(restart.startOffset, 0)
        XCTAssertEqual(restart.etag, "\"v2\"")
        XCTAssertEqual(restart.connections, 1)
        XCTAssertTrue(restart.singleConnectionReason?.contains("changed") ?? false, "\(String(describing: restart.singleConnectionReason))")
    }

    func testServerThatIgnoresIfRangeIsCaughtByTheValidatorCheck() throws {
        let old = TestData.bytes(count: size, seed: 84)
        let new = TestData.bytes(count: size, seed: 85)
        server.add(path: "/f", body: old, etag: "\"v1\"")
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")
        server.set(.ignoreIfRange, on: "/f") // answers 206 with the new ETag and the new bytes
        server.set(.replaceAfter(requests: 1, body: new, etag: "\"v2\""), on: "/f")

        let outcome = run(segmented(1, "/f", connections: 4), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        assertFile(partPath("1.part"), holds: new)
        let last = try XCTUnwrap(server.requests(for: "/f").last)
        XCTAssertNil(last.header("Range"), "started over with one plain request")
        XCTAssertEqual(responses(1).last?.startOffset, 0)
    }

    func testServerThatIgnoresRangesEndsOnOneConnection() throws {
        let body = TestData.bytes(count: size, seed: 86)
        server.add(path: "/f", body: body)
        server.set(.slow(bytesPerSecond: 8_000_000), on: "/f")
        server.set(.ignoreRanges, on: "/f") // says Accept-Ranges: bytes, sends 200 anyway

        let outcome = run(segmented(1, "/f", connections: 4), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("1.part"), holds: body)
        XCTAssertTrue(responses(1).last?.singleConnectionReason?.contains("ignored a range") ?? false,
                      "\(String(describing: responses(1).last?.singleConnectionReason))")
    }

    func testServerWithoutRangesUsesOneConnectionAndSaysWhy() throws {
        let body = TestData.bytes(count: 3 << 20, seed: 87)
        server.add(path: "/f", body: body, supportsRanges: false)

        XCTAssertEqual(run(segmented(1, "/f", connections: 8)),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(server.requests(for: "/f").count, 1)
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.connections, 1)
        XCTAssertTrue(response.singleConnectionReason?.contains("Accept-Ranges") ?? false)
        assertFile(partPath("1.part"), holds: body)
    }

    func testServerWithoutValidatorUsesOneConnectionAndSaysWhy() throws {
        let body = TestData.bytes(count: 3 << 20, seed: 88)
        server.add(path: "/f", body: body, etag: nil, lastModified: nil)

        XCTAssertEqual(run(segmented(1, "/f", connections: 8)),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertEqual(server.requests(for: "/f").count, 1)
        XCTAssertTrue(responses(1).first?.singleConnectionReason?.contains("validator") ?? false)
    }

    func testLastModifiedServesAsValidator() throws {
        let date = "Tue, 01 Jul 2025 10:00:00 GMT"
        let body = TestData.bytes(count: 4 << 20, seed: 89)
        server.add(path: "/f", body: body, etag: nil, lastModified: date)
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")

        XCTAssertEqual(run(segmented(1, "/f", connections: 4), timeout: 60),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertFalse(rangeRequests("/f").isEmpty)
        XCTAssertTrue(rangeRequests("/f").allSatisfy { $0.header("If-Range") == date })
    }

    func testDroppedRangeConnectionIsContinued() throws {
        let body = TestData.bytes(count: size, seed: 90)
        server.add(path: "/f", body: body)
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")
        server.set(.dropRangeAfter(bytes: 300_000, times: 1), on: "/f")

        let outcome = run(segmented(1, "/f", connections: 4), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("1.part"), holds: body)
        let dropped = try XCTUnwrap(rangeRequests("/f").first)
        let droppedRange = try XCTUnwrap(asked(dropped))
        // Someone fetched the rest of the dropped range, from where it stopped.
        let resumedAt = droppedRange.lowerBound + 300_000
        XCTAssertTrue(rangeRequests("/f").dropFirst().contains { asked($0)?.contains(resumedAt) ?? false })
    }

    /// A connection that goes silent is given up after `request-timeout` (curl's own
    /// check, an average over 5 s, took several times longer), and its range fetched
    /// by another connection from where it stopped.
    func testASilentRangeConnectionIsGivenUpOnTime() throws {
        let body = TestData.bytes(count: size, seed: 93)
        server.add(path: "/f", body: body)
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")
        server.set(.stallAfter(bytes: 300_000, times: 1), on: "/f") // the first answer goes silent
        var r = segmented(1, "/f", connections: 4)
        r.requestTimeout = 1
        let started = Date()

        let outcome = run(r, timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("1.part"), holds: body)
        XCTAssertTrue(rangeRequests("/f").contains { asked($0)?.contains(300_000) ?? false },
                      "the silent connection's bytes were asked for again")
        XCTAssertLessThan(Date().timeIntervalSince(started), 4.5)
    }

    func testRangesThatKeepFailingFailTheAttemptWithAMapToContinueFrom() throws {
        let body = TestData.bytes(count: size, seed: 101)
        server.add(path: "/f", body: body)
        server.set(.slow(bytesPerSecond: 2_000_000), on: "/f")
        server.set(.dropRangeAfter(bytes: 0, times: 1000), on: "/f") // every range connection drops at once
        let part = partPath("f.part")

        let outcome = run(segmented(1, "/f", connections: 4, part: part, sha: false), timeout: 60)

        guard case .failed(.network(let message), let prefix)? = outcome else {
            return XCTFail("expected a network failure, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("127.0.0.1:\(server.port)"), message)
        let map = try XCTUnwrap(log.events(for: 1).compactMap(\.segments).last)
        XCTAssertEqual(prefix, map.contiguousPrefix)
        XCTAssertFalse(map.isComplete)

        server.clearBehaviours(on: "/f")
        XCTAssertEqual(run(segmented(2, "/f", connections: 4, part: part, segments: map, ifRange: "\"v1\""), timeout: 60),
                       .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(part, holds: body)
    }

    func testStopThenContinueFromTheSegmentMapFetchesNothingTwice() throws {
        let body = TestData.bytes(count: size, seed: 91)
        server.add(path: "/f", body: body, etag: "\"v1\"")
        server.set(.slow(bytesPerSecond: 1_000_000), on: "/f")
        let part = partPath("f.part")
        engine.start(segmented(1, "/f", connections: 4, part: part, sha: false))
        XCTAssertTrue(log.wait(timeout: 30) { events in
            events.contains { ($0.progress?.totalOnDisk ?? 0) >= 2 << 20 }
        }, "a quarter of the file arrives")

        engine.stop(1)
        guard case .stopped(let prefix)? = log.outcome(of: 1, timeout: 20) else { return XCTFail("not stopped") }
        let events = log.events(for: 1)
        let map = try XCTUnwrap(events.compactMap(\.segments).last)
        XCTAssertTrue(events[events.count - 2].segments != nil, "the final map comes just before the completion")
        XCTAssertEqual(prefix, map.contiguousPrefix)
        let progress = events.compactMap(\.progress)
        XCTAssertEqual(map.bytesDone, progress.map(\.totalOnDisk).max(), "every byte written is in the final map")
        XCTAssertEqual(map.bytesDone, progress.map(\.bytesWritten).reduce(0, +))
        XCTAssertGreaterThan(map.done.count, 1, "several ranges were under way")
        XCTAssertFalse(map.isComplete)
        let onDisk = contents(part)
        for range in map.done {
            XCTAssertTrue(onDisk[Int(range.lowerBound)..<Int(range.upperBound)] == body[Int(range.lowerBound)..<Int(range.upperBound)],
                          "range \(range) on disk holds the file's bytes")
        }
        let before = server.requests(for: "/f").count

        // As after a pause or a restart of the daemon: the map and its validator.
        server.clearBehaviours(on: "/f")
        let outcome = run(segmented(2, "/f", connections: 4, part: part, segments: map, ifRange: "\"v1\""), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(part, holds: body)
        let second = Array(server.requests(for: "/f")[before...])
        XCTAssertFalse(second.isEmpty)
        for request in second {
            let range = try XCTUnwrap(asked(request), "every request of the continuation is a range request")
            XCTAssertEqual(request.header("If-Range"), "\"v1\"")
            XCTAssertTrue(map.missing.contains { $0.lowerBound <= range.lowerBound && range.upperBound <= $0.upperBound },
                          "\(range) lies in a missing range of \(map)")
        }
        XCTAssertEqual(second.map(\.bodyBytesSent).reduce(0, +), size - Int(map.bytesDone), "no byte fetched twice")
        XCTAssertEqual(responses(2).first?.startOffset, map.bytesDone)
    }

    func testContinuingWithAChangedFileStartsOver() throws {
        let old = TestData.bytes(count: 4 << 20, seed: 92)
        let new = TestData.bytes(count: 4 << 20, seed: 93)
        server.add(path: "/f", body: new, etag: "\"v2\"")
        let part = partPath("f.part")
        try write(Array(old[..<(1 << 20)]), to: part)
        let map = try XCTUnwrap(SegmentMap(total: Int64(old.count), done: [0..<(1 << 20)]))

        let outcome = run(segmented(1, "/f", connections: 4, part: part, segments: map, ifRange: "\"v1\""), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        assertFile(part, holds: new)
    }

    func testOffsetResumeSplitsTheRest() throws {
        let body = TestData.bytes(count: size, seed: 97)
        server.add(path: "/f", body: body, etag: "\"v1\"")
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")
        let part = partPath("f.part")
        try write(Array(body[..<(1 << 20)]) + [9, 9, 9], to: part) // a prefix, and junk after it

        let outcome = run(segmented(1, "/f", connections: 4, part: part, ifRange: "\"v1\"", offset: 1 << 20), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(part, holds: body)
        let first = try XCTUnwrap(server.requests(for: "/f").first)
        XCTAssertEqual(first.header("Range"), "bytes=\(1 << 20)-")
        XCTAssertEqual(first.header("If-Range"), "\"v1\"")
        XCTAssertEqual(responses(1).first?.startOffset, 1 << 20)
        XCTAssertEqual(responses(1).first?.connections, 4)
        XCTAssertGreaterThan(server.requests(for: "/f").count, 2)
    }

    func testBusyServerGetsFewerConnections() throws {
        let body = TestData.bytes(count: size, seed: 98)
        server.add(path: "/f", body: body)
        server.set(.slow(bytesPerSecond: 4_000_000), on: "/f")
        server.set(.failRangeRequests(2, status: 503), on: "/f")

        let outcome = run(segmented(1, "/f", connections: 4), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("1.part"), holds: body)
        XCTAssertGreaterThanOrEqual(rangeRequests("/f").count, 3, "two refused, the rest fetched by the connections left")
    }

    /// A server that sends the file to a plain request but refuses every range (403, or
    /// 500): the first connection, whose answer is the whole file, goes on to its end,
    /// as it would with one connection; the download does not fail.
    func testServerRefusingRangesEndsOnTheFirstConnection() throws {
        for (id, status) in [(TransferID(1), 403), (TransferID(2), 500)] {
            let body = TestData.bytes(count: size, seed: UInt64(90 + id))
            let path = "/refusing\(status)"
            server.add(path: path, body: body)
            server.set(.slow(bytesPerSecond: 4_000_000), on: path)
            server.set(.failRangeRequests(Int.max, status: status), on: path)

            let outcome = run(segmented(id, path, connections: 4), timeout: 60)

            XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)), "\(status)")
            assertFile(partPath("\(id).part"), holds: body)
            let plain = server.requests(for: path).filter { $0.header("Range") == nil }
            XCTAssertEqual(plain.count, 1, "one plain request brought the whole file (\(status))")
            XCTAssertGreaterThanOrEqual(rangeRequests(path).count, 1, "ranges were tried (\(status))")
            // The core is told: no map to continue, nothing to resume.
            let events = log.events(for: id)
            let word = try XCTUnwrap(events.lastIndex { $0.response?.rangesRefused == true }, "the refusal is reported (\(status))")
            XCTAssertFalse(events[word...].contains { if case .segments = $0 { return true } else { return false } },
                           "no range map after it (\(status))")
        }
    }

    /// Unthrottled, the first connection may have fetched its share before the refusals
    /// come: then the download starts over on one connection. Either way it ends whole.
    func testServerRefusingRangesAtFullSpeedStillGivesTheFile() throws {
        let body = TestData.bytes(count: size, seed: 93)
        server.add(path: "/f", body: body)
        server.set(.failRangeRequests(Int.max, status: 403), on: "/f")

        let outcome = run(segmented(1, "/f", connections: 8), timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(size), sha256: TestData.sha256Hex(body)))
        assertFile(partPath("1.part"), holds: body)
    }

    /// Stopped before its first answer, an attempt continuing a prefix reports the
    /// prefix as still on disk (nothing was cut), so it is not stored as 0 bytes.
    func testAPrefixStoppedBeforeItsFirstAnswerKeepsItsBytes() throws {
        let body = TestData.bytes(count: size, seed: 97)
        server.add(path: "/held", body: body)
        server.set(.holdAnswers, on: "/held")
        let part = partPath("held.part")
        try write(Array(body[..<(1 << 20)]), to: part)
        engine.start(segmented(1, "/held", connections: 4, part: part, ifRange: "\"v1\"", offset: 1 << 20))
        let deadline = Date().addingTimeInterval(10)
        while !server.isHoldingAnswer(for: "/held") && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertTrue(server.isHoldingAnswer(for: "/held"), "the request, its answer held")
        engine.stop(1)
        XCTAssertEqual(log.outcome(of: 1, timeout: 10), .stopped(bytesOnDisk: 1 << 20))
        XCTAssertEqual(contents(part), Array(body[..<(1 << 20)]), "the prefix is untouched")
        server.release("/held")
    }

    /// A download continued from an offset whose first request fails: the outcome
    /// keeps the prefix (it said 0 once the failed connection was gone, and the next
    /// attempt fetched the prefix again).
    func testAPrefixWhoseFirstRequestFailsIsKept() throws {
        let body = TestData.bytes(count: size, seed: 98)
        server.add(path: "/gone", body: body)
        server.set(.status(404), on: "/gone")
        let part = partPath("gone.part")
        try write(Array(body[..<(1 << 20)]), to: part)

        let outcome = run(segmented(1, "/gone", connections: 4, part: part, ifRange: "\"v1\"", offset: 1 << 20))

        guard case .failed(.http, let kept)? = outcome else { return XCTFail("an HTTP failure, got \(String(describing: outcome))") }
        XCTAssertEqual(kept, 1 << 20, "the prefix on disk is kept")
        XCTAssertEqual(contents(part), Array(body[..<(1 << 20)]), "and untouched")
    }

    /// A segmented download continued from an offset whose file shrank on the server
    /// (which ignores If-Range): the 416 makes it start over, not fail.
    func testA416FromAFileThatShrankStartsOver() throws {
        let old = TestData.bytes(count: size, seed: 95)
        let new = TestData.bytes(count: 2 << 20, seed: 96)
        server.add(path: "/f", body: new, etag: "\"v2\"")
        server.set(.ignoreIfRange, on: "/f")
        let part = partPath("f.part")
        try write(Array(old[..<(3 << 20)]), to: part)
        var r = segmented(1, "/f", connections: 4, part: part, ifRange: "\"v1\"", offset: 3 << 20)
        r.knownTotal = Int64(size)

        XCTAssertEqual(run(r, timeout: 60), .succeeded(bytesOnDisk: Int64(new.count), sha256: TestData.sha256Hex(new)))
        assertFile(part, holds: new)
        XCTAssertEqual(server.requests(for: "/f").first?.header("Range"), "bytes=\(3 << 20)-")
    }

    func testCompleteMapFinishesWithoutFetching() throws {
        let body = TestData.bytes(count: 2 << 20, seed: 99)
        server.add(path: "/f", body: body)
        let part = partPath("f.part")
        try write(body, to: part)
        let map = try XCTUnwrap(SegmentMap(total: Int64(body.count), done: [0..<Int64(body.count)]))

        XCTAssertEqual(run(segmented(1, "/f", connections: 4, part: part, segments: map, ifRange: "\"v1\"")),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertTrue(server.requests(for: "/f").isEmpty)
    }

    func testSpeedLimitAppliesToAllConnectionsTogether() throws {
        let body = TestData.bytes(count: 4 << 20, seed: 94)
        server.add(path: "/f", body: body)
        let started = Date()

        // 4 MiB at 1 MiB/s in total takes about 4 s, however many connections.
        XCTAssertEqual(run(segmented(1, "/f", connections: 4, speedLimit: 1 << 20), timeout: 60),
                       .succeeded(bytesOnDisk: Int64(body.count), sha256: TestData.sha256Hex(body)))
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 2.5)
        XCTAssertGreaterThan(server.requests(for: "/f").count, 1)
    }

    /// Compares by digest (a failed byte-array comparison would print megabytes).
    private func assertFile(_ path: String, holds bytes: [UInt8], _ message: String = "", file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(TestData.sha256Hex(contents(path)), TestData.sha256Hex(bytes), message, file: file, line: line)
    }

    /// One completion, last; no progress before the first response.
    private func assertSegmentedEvents(_ id: TransferID, file: StaticString = #filePath, line: UInt = #line) {
        let events = log.events(for: id)
        XCTAssertEqual(events.filter(\.isCompleted).count, 1, "one completion", file: file, line: line)
        XCTAssertTrue(events.last?.isCompleted ?? false, "completion is last", file: file, line: line)
        if let first = events.firstIndex(where: { $0.response != nil }) {
            XCTAssertFalse(events[..<first].contains { $0.progress != nil }, "no progress before the response", file: file, line: line)
        }
        let progress = events.compactMap(\.progress)
        XCTAssertEqual(progress.map(\.bytesWritten).reduce(0, +), progress.last?.totalOnDisk ?? 0, file: file, line: line)
    }
}
