import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A client can put a FIFO where ferryd expects a file: as the file to upload, at an
/// upload's response-destination, or at a download's `.part`. Its reader or writer is
/// the client's, and may never come or never read. That fails the one transfer (or
/// call); it never holds up ferryd's core or engine, so everyone else's transfers go on.
final class FifoTests: FerryTestCase {
    private func makeFIFO(_ path: String) throws {
        guard mkfifo(path, 0o600) == 0 else { throw TestProcessError("mkfifo \(path): \(String(cString: strerror(errno)))") }
    }

    /// Puts a FIFO at `path` with a reader that is there and never reads, resumes `t`
    /// (created with `start` false) and expects it to fail with `Disk`.
    private func resumeFailing(_ t: FerryTransfer, withFIFOAt path: String,
                               file: StaticString = #filePath, line: UInt = #line) async throws -> TransferInfo {
        try makeFIFO(path)
        let reader = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(reader, 0, file: file, line: line)
        defer { close(reader) }
        try await t.resume()
        let info = try await finish(t, timeout: 10)
        XCTAssertEqual(info.state, "failed", file: file, line: line)
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Disk", info.errorMessage, file: file, line: line)
        return info
    }

    /// While something else is stuck (or not), a download of someone else completes.
    private func assertOthersStillDownload(_ name: String, file: StaticString = #filePath, line: UInt = #line) async throws {
        let body = serve("/\(name)", size: 40_000, seed: 9)
        let other = try await session("com.example.Bystander")
        let t = try await other.download(server.url("/\(name)"), options: ["destination": .string(work + "/\(name)")])
        let info = try await finish(t, timeout: 10)
        XCTAssertEqual(info.state, "completed", info.errorMessage, file: file, line: line)
        assertFile(work + "/\(name)", equals: body, file: file, line: line)
    }

    /// A FIFO with no writer given as the file to upload is refused at the call, at once.
    func testAFIFOToUploadIsRefusedAtOnce() async throws {
        let fifo = work + "/up.fifo"
        try makeFIFO(fifo)
        server.set(.acceptUploads(), on: "/put")
        let s = try await session()
        await assertBusError("org.ferry.Ferry1.Error.FileNotFound", "a FIFO as the file to upload") {
            try await self.call(s.path, BusClient.sessionInterface, "Upload",
                                [.string(self.server.url("/put")), .string(fifo), .vardict([:])], timeout: 5)
        }
        try await assertOthersStillDownload("after-upload.bin")
    }

    /// A FIFO already at the response-destination is refused at the call; one put
    /// there before the upload starts (with a reader that takes nothing) fails that
    /// upload, and the engine goes on with everyone else's work.
    func testAFIFOAtTheResponseDestinationFailsOnlyThatUpload() async throws {
        let file = work + "/up.txt"
        try "hello".write(toFile: file, atomically: false, encoding: .utf8)
        server.set(.acceptUploads(), on: "/put")
        let s = try await session("com.example.Up", ["retries": .uint32(0)])
        let existing = work + "/answer.fifo"
        try makeFIFO(existing)
        await assertBusError("org.ferry.Ferry1.Error.InvalidDestination", "a FIFO as response-destination") {
            try await s.upload(self.server.url("/put"), file: file, options: ["response-destination": .string(existing)])
        }

        let later = work + "/answer.txt"
        let t = try await s.upload(server.url("/put"), file: file, options: ["response-destination": .string(later),
                                                                             "start": .boolean(false)])
        let info = try await resumeFailing(t, withFIFOAt: later)
        XCTAssertTrue(info.errorMessage.contains("not a regular file"), info.errorMessage)
        try await assertOthersStillDownload("after-answer.bin")
    }

    /// A FIFO at a download's `.part` whose reader takes nothing: that download fails
    /// (nothing is moved into place), the others complete.
    func testAFIFOPartWhoseReaderTakesNothingFailsOnlyThatDownload() async throws {
        serve("/big.bin", size: 1 << 20)
        let s = try await session("com.example.Fifo", ["retries": .uint32(0)])
        let dest = work + "/big.bin"
        let t = try await s.download(server.url("/big.bin"), options: ["destination": .string(dest), "start": .boolean(false)])
        _ = try await resumeFailing(t, withFIFOAt: dest + ".part")
        XCTAssertFalse(exists(dest), "nothing is moved into place")
        try await assertOthersStillDownload("after-part.bin")
    }
}
