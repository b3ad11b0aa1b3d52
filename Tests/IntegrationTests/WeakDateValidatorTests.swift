import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A server that sends no ETag and a Last-Modified within 60 s of its Date gives a weak
/// validator (RFC 9110 §8.8.2.2): the file may change again within that second and keep
/// the date, so a range under it could join two versions into one file. Ferry treats
/// such a date as no validator at all.
final class WeakDateValidatorTests: FerryTestCase {
    static let date = "Sat, 05 Dec 2026 09:00:00 GMT"

    /// Serves `body` with no ETag and Last-Modified equal to Date.
    private func serveWithWeakDate(_ path: String, _ body: [UInt8]) {
        server.add(path: path, body: body, etag: nil, lastModified: Self.date)
        server.set(.date(Self.date), on: path)
    }

    /// Paused, the file changes on the server within the same second (same date): the
    /// resume starts from byte 0 and the new file arrives whole, never stitched.
    func testResumeUnderAWeakDateStartsOverFromZero() async throws {
        let old = TestData.bytes(count: stalledSize, seed: 1)
        let new = TestData.bytes(count: stalledSize, seed: 2)
        serveWithWeakDate("/weak.bin", old)
        let dest = work + "/weak.bin"
        let t = try await downloadStalled("/weak.bin", dest: dest)
        let data = try await t.pause()
        XCTAssertEqual(data, [], "no usable validator: no resume data")
        let resumable = try await t.info().resumable
        XCTAssertFalse(resumable)

        serveWithWeakDate("/weak.bin", new)
        let info = try await resumeAndFinish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: new)
        let last = server.requests(for: "/weak.bin").last
        XCTAssertNil(last?.header("Range"), "started over from byte 0")
        XCTAssertNil(last?.header("If-Range"))
    }

    /// Ranges on several connections need a validator to check each range against:
    /// under a weak date the file comes on one connection.
    func testSegmentedDownloadUnderAWeakDateUsesOneConnection() async throws {
        let body = TestData.bytes(count: 8 * 1024 * 1024, seed: 3)
        serveWithWeakDate("/weakpar.bin", body)
        server.set(.slow(bytesPerSecond: 8 * 1024 * 1024), on: "/weakpar.bin")
        let s = try await session()
        let t = try await s.download(server.url("/weakpar.bin"),
                                     options: ["destination": .string(work + "/weakpar.bin"), "connections": .uint32(4)])
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/weakpar.bin", equals: body)
        XCTAssertEqual(server.requests(for: "/weakpar.bin").count, 1, "one connection, one request")
        XCTAssertTrue(server.requests(for: "/weakpar.bin").allSatisfy { $0.header("Range") == nil })
    }

    /// A date a minute or more before Date is strong: ranges go on as before.
    func testAnOldEnoughDateStillResumes() async throws {
        let body = TestData.bytes(count: stalledSize, seed: 4)
        server.add(path: "/old.bin", body: body, etag: nil, lastModified: "Sat, 05 Dec 2026 08:59:00 GMT")
        server.set(.date(Self.date), on: "/old.bin")
        let dest = work + "/old.bin"
        let t = try await downloadStalled("/old.bin", dest: dest)
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty)
        let info = try await resumeAndFinish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        XCTAssertEqual(server.requests(for: "/old.bin").last?.header("If-Range"), "Sat, 05 Dec 2026 08:59:00 GMT")
    }
}
