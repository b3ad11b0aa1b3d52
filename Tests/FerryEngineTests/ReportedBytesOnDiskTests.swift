import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// The engine gathers a body into larger writes (`BodyBuffer`), so some bytes it took
/// in are in memory for a while. What it reports must not run ahead of the file: the
/// core stores a `Progress` count and a range map, and after a crash continues from
/// them. Each event is checked against the part file at the moment it is delivered
/// (on the engine thread, before the engine writes anything more).
final class ReportedBytesOnDiskTests: EngineTestCase {
    /// What each event claimed that the file did not hold when it came.
    private final class Checker: @unchecked Sendable {
        // @unchecked Sendable: used only on the engine thread, then read after the
        // outcome (the log's lock orders the two).
        let body: [UInt8]
        let path: String
        /// A single connection's Progress counts a prefix; a segmented one's the sum of
        /// its ranges, which its maps show.
        let progressIsPrefix: Bool
        var problems: [String] = []
        var progressChecked = 0
        /// Maps reported while part of the file was still to come.
        var partialMaps = 0
        var lastMap: SegmentMap?
        /// `.durable` events: what was synced, each checked against the file.
        var durableMarks = 0

        init(body: [UInt8], path: String, progressIsPrefix: Bool = true) {
            self.body = body; self.path = path; self.progressIsPrefix = progressIsPrefix
        }

        func check(_ event: EngineEvent) {
            switch event {
            case .progress(_, _, let total, _) where total > 0:
                progressChecked += 1
                if progressIsPrefix {
                    expectOnDisk(0..<total, "Progress of \(total) bytes")
                } else if let lastMap, total != lastMap.bytesDone {
                    // A segmented Progress counts the ranges of the map sent before it.
                    problems.append("Progress of \(total) bytes after a map of \(lastMap.bytesDone)")
                }
            case .segments(_, let map):
                if map.bytesDone < map.total { partialMaps += 1 }
                lastMap = map
                for range in map.done { expectOnDisk(range, "range \(range) of a map") }
            case .durable(_, .prefix(let n)):
                durableMarks += 1
                expectOnDisk(0..<n, "synced prefix of \(n) bytes")
            case .durable(_, .ranges(let map)):
                durableMarks += 1
                for range in map.done { expectOnDisk(range, "synced range \(range)") }
            default:
                break
            }
        }

        private func expectOnDisk(_ range: Range<Int64>, _ what: String) {
            guard let handle = FileHandle(forReadingAtPath: path) else { return problems.append("\(what): no part file") }
            defer { try? handle.close() }
            try? handle.seek(toOffset: UInt64(range.lowerBound))
            let read = [UInt8](handle.readData(ofLength: range.count))
            if read != Array(body[Int(range.lowerBound)..<Int(range.upperBound)]) {
                problems.append("\(what): the file holds \(read.count) of its bytes, not all of them right")
            }
        }
    }

    private func follow(_ checker: Checker) {
        engine.setEventHandler { [log] event in
            checker.check(event)
            log!.append(event)
        }
    }

    /// A running download's part file is synced every `syncInterval` and what it then
    /// held is reported (`.durable`): after a power cut it is trusted that far. Each mark
    /// names bytes the file holds, on one connection and on several.
    func testSyncedMarksNameBytesThePartFileHolds() throws {
        CurlEngine.setPartSyncInterval(milliseconds: 100)
        defer { CurlEngine.setPartSyncInterval(milliseconds: 5_000) }
        let body = TestData.bytes(count: 2 << 20, seed: 35)
        server.add(path: "/synced", body: body, etag: "\"y\"")
        server.set(.slow(bytesPerSecond: 2_000_000), on: "/synced")
        let checker = Checker(body: body, path: partPath("5.part"))
        follow(checker)
        XCTAssertEqual(run(request(5, "/synced"), timeout: 30), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertGreaterThanOrEqual(checker.durableMarks, 3, "a second's download is synced every 100 ms")
        XCTAssertEqual(checker.problems, [])

        let ranged = TestData.bytes(count: 4 << 20, seed: 36)
        let (r, segmentedChecker) = segmented(6, "/synced-ranges", ranged, bytesPerSecond: 500_000) // each connection
        XCTAssertEqual(run(r, timeout: 60), .succeeded(bytesOnDisk: Int64(ranged.count), sha256: nil))
        XCTAssertGreaterThanOrEqual(segmentedChecker.durableMarks, 3)
        XCTAssertTrue(log.events(for: 6).contains { if case .durable(_, .ranges) = $0 { return true } else { return false } },
                      "a segmented download's mark is its range map")
        XCTAssertEqual(segmentedChecker.problems, [])
    }

    func testEveryProgressCountsBytesThePartFileHolds() throws {
        // Slow enough for several Progress events, in pieces that seldom end on a boundary.
        let body = TestData.bytes(count: 3 << 20 + 12_345, seed: 31)
        server.add(path: "/slow", body: body, etag: "\"s\"")
        server.set(.slow(bytesPerSecond: 3_000_000), on: "/slow")
        let checker = Checker(body: body, path: partPath("1.part"))
        follow(checker)

        let outcome = run(request(1, "/slow"), timeout: 30)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertEqual(contents(partPath("1.part")), body)
        XCTAssertGreaterThanOrEqual(checker.progressChecked, 3, "a slow body is reported several times")
        XCTAssertEqual(checker.problems, [])
    }

    /// A body that stops coming is in the file by its next Progress (at most 250 ms
    /// on), not held in memory until more comes.
    func testAStalledBodyIsWrittenByItsNextProgress() throws {
        let body = TestData.bytes(count: 1 << 20, seed: 32)
        server.add(path: "/stall", body: body, etag: "\"t\"")
        server.set(.stallAfter(bytes: 100_000, times: 1), on: "/stall")
        let checker = Checker(body: body, path: partPath("2.part"))
        follow(checker)
        engine.start(request(2, "/stall", requestTimeout: 60))

        XCTAssertTrue(log.wait(timeout: 10) { events in
            events.contains { if case .progress(2, _, let total, _) = $0 { return total >= 100_000 } else { return false } }
        }, "the stalled body's bytes are reported")
        XCTAssertEqual(contents(partPath("2.part")), Array(body[..<100_000]), "and they are in the part file")
        engine.stop(2)
        XCTAssertEqual(log.outcome(of: 2, timeout: 10), .stopped(bytesOnDisk: 100_000))
        XCTAssertEqual(checker.problems, [])
    }

    /// Serves `body` slowly at `path`; the request for it on 4 connections, and a
    /// checker following its events.
    private func segmented(_ id: TransferID, _ path: String, _ body: [UInt8], bytesPerSecond: Int) -> (EngineRequest, Checker) {
        server.add(path: path, body: body, etag: "\"\(id)\"")
        server.set(.slow(bytesPerSecond: bytesPerSecond), on: path)
        let checker = Checker(body: body, path: partPath("\(id).part"), progressIsPrefix: false)
        follow(checker)
        var r = request(id, path)
        r.connections = 4
        return (r, checker)
    }

    func testEveryRangeMapNamesBytesThePartFileHolds() throws {
        let body = TestData.bytes(count: 6 << 20 + 777, seed: 33)
        let (r, checker) = segmented(3, "/ranges", body, bytesPerSecond: 2_000_000)

        let outcome = run(r, timeout: 60)

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertEqual(contents(partPath("3.part")), body)
        XCTAssertGreaterThanOrEqual(checker.partialMaps, 1, "maps were reported while the ranges came")
        XCTAssertGreaterThanOrEqual(checker.progressChecked, 2)
        XCTAssertEqual(checker.problems, [])
    }

    /// Stopped while its connections hold bytes: the last map (what the core keeps, and
    /// what a resume continues from) names only bytes in the file.
    func testAStoppedSegmentedDownloadsLastMapIsOnDisk() throws {
        let body = TestData.bytes(count: 6 << 20, seed: 34)
        let (r, checker) = segmented(4, "/stop", body, bytesPerSecond: 1_500_000)
        engine.start(r)
        XCTAssertTrue(log.wait(timeout: 20) { events in
            events.contains { if case .segments(4, let map) = $0 { return map.done.count >= 2 } else { return false } }
        }, "several ranges under way")
        engine.stop(4)

        guard case .stopped? = log.outcome(of: 4, timeout: 10) else { return XCTFail("stopped") }
        let last = try XCTUnwrap(log.events(for: 4).compactMap(\.segments).last)
        XCTAssertLessThan(last.bytesDone, last.total)
        XCTAssertGreaterThan(last.bytesDone, 0)
        let taken = log.events(for: 4).reduce(Int64(0)) { sum, event in
            if case .progress(_, let written, _, _) = event { return sum + written } else { return sum }
        }
        XCTAssertEqual(last.bytesDone, taken, "every byte taken in was written before the end, none dropped")
        XCTAssertEqual(checker.problems, [])
    }
}
