import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Free space is watched while the data arrives, not only when the length is known.
final class DiskSpaceWhileWritingTests: FerryTestCase {
    private func reply(_ head: String, body: [UInt8] = []) -> [UInt8] { Array(head.utf8) + body }

    private func failed(_ url: String, dest: String) async throws -> TransferInfo {
        let s = try await session("com.example.Space", ["retries": .uint32(0)])
        let t = try await s.download(url, options: ["destination": .string(dest)])
        return try await finish(t)
    }

    /// A small disk of its own for one test (tmpfs; needs root), removed after it.
    private func smallDisk(_ name: String, size: String) throws -> String {
        let folder = work + "/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let mounted = try ChildProcess.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", folder], timeout: 10)
        guard mounted.status == 0 else {
            throw XCTSkip("cannot mount a small tmpfs here (\(mounted.stderr.trimmingCharacters(in: .whitespacesAndNewlines))); needs root")
        }
        cleanups.append { _ = try? ChildProcess.run("/bin/umount", ["-l", folder], timeout: 10) }
        return folder
    }

    /// A download that takes most of a disk, but fits, completes, on one connection and
    /// on several: the space the engine reserves for it when its length is announced is
    /// not counted a second time as missing (it was: a file larger than half the free
    /// space failed with Disk, "X more are needed, Y are free").
    func testADownloadThatFitsCompletesThoughItNeedsMostOfTheDisk() async throws {
        let disk = try smallDisk("fits", size: "8m")
        let body = serve("/most.bin", size: 6 << 20, seed: 7)
        let s = try await session("com.example.Space", ["retries": .uint32(0)])
        for connections in [1, 4] {
            let dest = disk + "/most-\(connections).bin"
            let t = try await s.download(server.url("/most.bin"), options: [
                "destination": .string(dest), "connections": .uint32(UInt32(connections)),
            ])
            let info = try await finish(t)
            XCTAssertEqual(info.state, "completed", "connections=\(connections): \(info.errorName) \(info.errorMessage)")
            assertFile(dest, equals: body)
            try FileManager.default.removeItem(atPath: dest)
        }
    }

    /// On a small disk a download of unknown length stops with Disk while some space
    /// is still free (the old check ran only when the length was announced, so the
    /// disk filled to the last byte), and keeps its partial file.
    func testUnknownLengthStopsBeforeTheDiskIsFull() async throws {
        let small = try smallDisk("small", size: "1m")
        let raw = try RawResponseServer(replies: [
            "/stream": reply("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", body: TestData.bytes(count: 3 << 20, seed: 4)),
        ])
        defer { raw.stop() }
        let info = try await failed(raw.url("/stream"), dest: small + "/stream.bin")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Disk", info.errorMessage)
        var fs = statvfs()
        XCTAssertEqual(statvfs(small, &fs), 0)
        XCTAssertGreaterThan(Int(fs.f_bavail) * Int(fs.f_frsize), 0, "the disk is not full: \(info.errorMessage)")
        XCTAssertGreaterThan(fileSize(small + "/stream.bin.part") ?? 0, 0, "the partial file is kept")
    }
}
