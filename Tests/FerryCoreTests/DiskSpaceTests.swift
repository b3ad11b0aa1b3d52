import XCTest
@testable import FerryCore

/// A full disk fails the transfer with Disk, keeps its partial file, retries nothing,
/// and leaves the other transfers alone; Resume continues once there is space.
final class DiskSpaceTests: XCTestCase {
    private let url = "https://example.com/big.iso"

    func testEngineDiskFailureFailsKeepsPartAndResumeContinues() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 1, cap: 1))
        let s = try h.openSession()
        let t = try h.download(s, url)
        let other = try h.download(s, "https://example.com/small.bin")
        h.send(.response(t, EngineResponse(status: 200, etag: "\"iso\"", expectedTotal: 1000, acceptsRanges: true, effectiveURL: url)))
        h.writePart(t, Array(repeating: 9, count: 300))
        h.send(.progress(t, bytesWritten: 300, totalOnDisk: 300, expected: 1000))
        h.fail(t, .disk("Could not write /x/big.iso.part: No space left on device"), bytes: 300)
        XCTAssertEqual(h.state(t), .failed, "no retry: space does not come back by itself")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Disk")
        XCTAssertEqual(h.snapshot(t)?.bytesTransferred, 300)
        XCTAssertTrue(h.exists(h.destination(t) + ".part"), "the partial file is kept")
        XCTAssertEqual(h.state(other), .running, "other transfers go on")
        h.succeed(other)
        XCTAssertEqual(h.state(other), .completed)

        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.state(t), .running)
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(request.offset, 300, "Resume continues from the partial file")
        XCTAssertEqual(request.ifRange, "\"iso\"")
    }

    func testPrecheckRefusesToStartWhatCannotFit() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, url)
        h.send(.response(t, EngineResponse(status: 200, etag: "\"iso\"", expectedTotal: 1000, acceptsRanges: true, effectiveURL: url)))
        h.writePart(t, Array(repeating: 9, count: 400))
        _ = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 400)))
        let startsBefore = h.engine.started.count

        h.disk.set(free: 599)
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.state(t), .failed, "600 more bytes needed, 599 free")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Disk")
        let message = try XCTUnwrap(h.snapshot(t)?.errorMessage)
        XCTAssertTrue(message.contains("600 bytes more are needed") && message.contains("599 bytes are free"), message)
        XCTAssertEqual(h.engine.started.count, startsBefore, "the engine was not asked")
        XCTAssertTrue(h.exists(h.destination(t) + ".part"))
        XCTAssertEqual(h.disk.asked.last, h.downloads, "asked about the directory of the partial file")

        h.disk.set(free: 600)
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.engine.lastRequest(t)?.offset, 400)
    }

    func testRefusedStartFreesThePlaceForTheNext() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        try h.sync { try $0.setMaxConcurrentTransfers(1) }
        let big = try h.download(s, url)
        h.send(.response(big, EngineResponse(status: 200, etag: "\"iso\"", expectedTotal: 1_000_000, acceptsRanges: true, effectiveURL: url)))
        _ = try h.sync { try $0.pause(big) }
        h.send(.completed(big, .stopped(bytesOnDisk: 0)))
        let small = try h.download(s, "https://example.com/small.bin")
        _ = try h.sync { try $0.pause(small) }
        h.send(.completed(small, .stopped(bytesOnDisk: 0)))
        h.disk.set(free: 10_000)
        try h.sync { try $0.resumeAll(session: s) }
        XCTAssertEqual(h.state(big), .failed)
        XCTAssertEqual(h.state(small), .running, "the size of small.bin is unknown: it starts in big's place")
    }

    func testResponseLargerThanTheFreeSpaceStopsTheAttempt() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 1, cap: 1))
        let s = try h.openSession()
        let t = try h.download(s, url)
        h.writePart(t, Array(repeating: 9, count: 100))
        h.disk.set(free: 5_000)
        // A resumed attempt: 100 bytes on disk, 9 900 to come, 5 000 free.
        h.send(.response(t, EngineResponse(status: 206, etag: "\"iso\"", expectedTotal: 10_000, startOffset: 100,
                                           acceptsRanges: true, effectiveURL: url)))
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Disk")
        XCTAssertEqual(h.engine.stopped, [t], "stopped before it fills the disk")
        XCTAssertEqual(h.snapshot(t)?.resumable, true, "its validator is kept for Resume")
        h.send(.completed(t, .stopped(bytesOnDisk: 100)))
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertTrue(h.exists(h.destination(t) + ".part"))
        XCTAssertEqual(h.observer.completions.map(\.2), ["org.ferry.Ferry1.Error.Disk"])

        h.disk.set(free: 9_900)
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.engine.lastRequest(t)?.offset, 100)
        h.send(.response(t, EngineResponse(status: 206, etag: "\"iso\"", expectedTotal: 10_000, startOffset: 100,
                                           acceptsRanges: true, effectiveURL: url)))
        XCTAssertEqual(h.state(t), .running, "it fits now")
    }

    /// The engine reserved the file's space when the response came (and checked that it
    /// fits): the free space read afterwards no longer counts those bytes, so the core
    /// does not measure again (it would find "10 kB needed, 5 kB free" for a file that fits).
    func testAResponseWhoseSpaceTheEngineReservedIsNotMeasuredAgain() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, url)
        h.disk.set(free: 5_000)
        var response = EngineResponse(status: 200, etag: "\"iso\"", expectedTotal: 10_000, acceptsRanges: true, effectiveURL: url)
        response.spaceReserved = true
        h.send(.response(t, response))
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.engine.stopped, [])
        h.succeed(t)
        XCTAssertEqual(h.state(t), .completed)
    }

    /// After ferryd was killed mid-download, the part file still holds the blocks
    /// reserved for the rest of it: starting again needs only what they do not cover.
    func testBlocksReservedPastThePartFilesEndCountAsItsOwn() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, url)
        h.send(.response(t, EngineResponse(status: 200, etag: "\"iso\"", expectedTotal: 4 << 20, acceptsRanges: true, effectiveURL: url)))
        h.writePart(t, Array(repeating: 9, count: 1 << 20))
        _ = try h.sync { try $0.pause(t) }
        h.send(.completed(t, .stopped(bytesOnDisk: 1 << 20)))
        let part = h.destination(t) + ".part"
        let fd = open(part, O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        guard let symbol = dlsym(nil, "fallocate64") ?? dlsym(nil, "fallocate") else { throw XCTSkip("no fallocate") }
        let fallocate = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
        guard fallocate(fd, 0x01 /* KEEP_SIZE */, 0, 4 << 20) == 0 else { throw XCTSkip("the file system cannot reserve") }

        h.disk.set(free: 1_000)
        try h.sync { try $0.resume(t) }
        XCTAssertEqual(h.state(t), .running, "the 3 MiB still to come have their blocks already")
        XCTAssertEqual(h.engine.lastRequest(t)?.offset, 1 << 20)
    }

    func testUnknownFreeSpaceRefusesNothing() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, url)
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: Int64.max / 2, effectiveURL: url)))
        XCTAssertEqual(h.state(t), .running)
    }
}
