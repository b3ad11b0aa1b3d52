import FerryTestSupport
import Foundation
import XCTest
@testable import FerryEngine

/// A download's body gathered into aligned writes: every byte lands once, in order,
/// and every write but the last ends on a boundary of the file.
final class BodyBufferTests: XCTestCase {
    /// What a writer was asked to write: the file offset and length of each call.
    private struct Recorder {
        var file: [UInt8]
        var writes: [(offset: Int, length: Int)] = []
        /// Takes at most this much per call (a short write), nil for all.
        var shortWrites: Int?
        /// The call (0-based) that fails with `failWith`.
        var failAt: Int?
        var failWith: Int32 = ENOSPC

        init(prefix: Int) { file = [UInt8](repeating: 0xEE, count: prefix) }

        mutating func write(_ data: UnsafeRawPointer, _ length: Int, _ offset: Int64) -> Int {
            if writes.count == failAt { errno = failWith; return -1 }
            XCTAssertEqual(Int(offset), file.count, "each write continues where the file ends")
            let n = min(length, shortWrites ?? length)
            writes.append((file.count, n))
            file.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n))
            return n
        }
    }

    /// The body in libcurl's pieces: the first short (the rest of the read that held the
    /// headers), then up to 16 KiB each, of varying sizes.
    private func pieces(of body: [UInt8], first: Int, seed: UInt64) -> [ArraySlice<UInt8>] {
        var random = SeededRandom(state: seed)
        var out: [ArraySlice<UInt8>] = []
        var at = 0
        var size = min(first, body.count)
        while at < body.count {
            out.append(body[at..<min(at + size, body.count)])
            at += size
            size = Int.random(in: 1...16_384, using: &random)
        }
        return out
    }

    private func feed(_ pieces: [ArraySlice<UInt8>], into buffer: inout BodyBuffer, _ recorder: inout Recorder) -> Int32? {
        for piece in pieces {
            let failed = piece.withUnsafeBytes { bytes in
                buffer.append(bytes.baseAddress!, bytes.count, write: { recorder.write($0, $1, $2) })
            }
            if let failed { return failed }
        }
        return buffer.flush(write: { recorder.write($0, $1, $2) })
    }

    func testEveryByteLandsInOrderInWritesThatEndOnBoundaries() {
        let capacity = BodyBuffer.capacity
        for (start, seed) in [(0, UInt64(1)), (7_944, 2), (capacity - 1, 3), (3 * capacity + 5, 4)] {
            let body = TestData.bytes(count: 5 * capacity + 12_345, seed: seed)
            var recorder = Recorder(prefix: start)
            var buffer = BodyBuffer(startingAt: Int64(start))
            XCTAssertNil(feed(pieces(of: body, first: 7_944, seed: seed), into: &buffer, &recorder))

            XCTAssertEqual(Array(recorder.file[start...]), body, "start \(start): the body, once, in order")
            XCTAssertEqual(buffer.count, 0)
            XCTAssertEqual(buffer.writtenEnd, Int64(start + body.count))
            for write in recorder.writes.dropLast() {
                XCTAssertEqual((write.offset + write.length) % capacity, 0, "start \(start): a write ends on a boundary")
                XCTAssertLessThanOrEqual(write.length, capacity)
            }
            XCTAssertLessThanOrEqual(recorder.writes.count, body.count / capacity + 2,
                                     "start \(start): one write per boundary crossed, and the rest at the end")
        }
    }

    func testASmallBodyIsOneWrite() {
        let body = TestData.bytes(count: 100 * 1024, seed: 9)
        var recorder = Recorder(prefix: 0)
        var buffer = BodyBuffer(startingAt: 0)
        XCTAssertNil(feed(pieces(of: body, first: 16_384, seed: 9), into: &buffer, &recorder))
        XCTAssertEqual(recorder.writes.count, 1)
        XCTAssertEqual(recorder.file, body)
    }

    func testShortWritesAreContinued() {
        let body = TestData.bytes(count: 3 * BodyBuffer.capacity + 1_000, seed: 5)
        var recorder = Recorder(prefix: 100)
        recorder.shortWrites = 10_000
        var buffer = BodyBuffer(startingAt: 100)
        XCTAssertNil(feed(pieces(of: body, first: 500, seed: 5), into: &buffer, &recorder))
        XCTAssertEqual(Array(recorder.file[100...]), body)
        XCTAssertEqual(buffer.writtenEnd, Int64(100 + body.count))
    }

    /// A failed write says why, and `writtenEnd` is where the file really ends: the
    /// count an attempt reports is what a resume can continue from.
    func testAFailedWriteLeavesWhatWasWrittenCounted() {
        let body = TestData.bytes(count: 4 * BodyBuffer.capacity, seed: 6)
        var recorder = Recorder(prefix: 0)
        recorder.shortWrites = 50_000
        recorder.failAt = 4
        var buffer = BodyBuffer(startingAt: 0)
        XCTAssertEqual(feed(pieces(of: body, first: 16_384, seed: 6), into: &buffer, &recorder), ENOSPC)
        XCTAssertEqual(buffer.writtenEnd, Int64(recorder.file.count), "what the file holds")
        XCTAssertEqual(recorder.file, Array(body[..<recorder.file.count]), "a prefix of the body, nothing else")
        XCTAssertGreaterThan(buffer.count, 0, "the rest is still held, not counted as written")
        buffer.discard()
        XCTAssertEqual(buffer.count, 0)
    }
}
