import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// What ferryd does with files it did not make: a `.part` that is a symbolic link (or
/// a hard link, or a FIFO) is never written through, the final file is never a link,
/// and an overwrite never leaves a hidden copy of the old file.
final class FileSafetyTests: FerryTestCase {

    private func isSymlink(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK
    }

    private func contents(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Pause, swap the `.part` for a symlink to a file of the user's, resume: the
    /// linked file keeps its bytes, the download starts over in a new plain file and
    /// completes, and the final file is not a link.
    func testResumeNeverWritesThroughASymlinkedPartFile() async throws {
        let dest = work + "/swapped.bin"
        let victim = work + "/precious.txt"
        try "my precious notes\n".write(toFile: victim, atomically: false, encoding: .utf8)
        let (t, body) = try await startStalledDownload("/swapped.bin", dest: dest)
        _ = try await t.pause()
        try await waitForState(t, "paused")

        try FileManager.default.removeItem(atPath: dest + ".part")
        try FileManager.default.createSymbolicLink(atPath: dest + ".part", withDestinationPath: victim)
        try await t.resume()
        let info = try await finish(t)

        XCTAssertEqual(contents(victim), "my precious notes\n", "the link's target is untouched")
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertFalse(isSymlink(dest), "the final file is not a symbolic link")
        assertFile(dest, equals: body)
        XCTAssertFalse(exists(dest + ".part"))
    }

    /// A `.part` planted after the download was queued and before it starts (a symlink
    /// to a file elsewhere, a hard link to it) is not written through either.
    func testPlantedLinksAtThePartPathAreNotFollowed() async throws {
        let victim = work + "/bashrc"
        try "alias ls='ls --color'\n".write(toFile: victim, atomically: false, encoding: .utf8)
        let body = serve("/planted.bin", size: 100_000)
        let s = try await session()

        for (dest, plant) in [(work + "/a.bin", { try FileManager.default.createSymbolicLink(atPath: $0, withDestinationPath: victim) }),
                              (work + "/b.bin", { try FileManager.default.linkItem(atPath: victim, toPath: $0) })] as [(String, (String) throws -> Void)] {
            let t = try await s.download(server.url("/planted.bin"), options: ["destination": .string(dest), "start": .boolean(false)])
            try plant(dest + ".part")
            try await t.resume()
            let info = try await finish(t)
            XCTAssertEqual(info.state, "completed", "\(dest): \(info.errorMessage)")
            XCTAssertFalse(isSymlink(dest), "\(dest) is not a symbolic link")
            assertFile(dest, equals: body)
        }
        XCTAssertEqual(contents(victim), "alias ls='ls --color'\n", "the linked file is untouched")
    }

    /// `overwrite` replaces the old file in one step: watched with inotify, no other
    /// name than the final one and its `.part` ever appears in the directory (the old
    /// way moved the old file to `.NAME.ferry-replaced-XXXXXXXX` first, which a crash
    /// at that moment left behind for good), and the final name never goes missing.
    func testOverwriteReplacesInOneStepWithoutAHiddenCopy() async throws {
        let dir = work + "/over"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let dest = dir + "/report.pdf"
        try "old version\n".write(toFile: dest, atomically: false, encoding: .utf8)
        let body = serve("/report.pdf", size: 200_000)

        let watch = try DirectoryWatch(dir)
        defer { watch.close() }
        let s = try await session()
        let t = try await s.download(server.url("/report.pdf"), options: ["destination": .string(dest), "overwrite": .boolean(true)])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)

        let seen = watch.drain()
        let foreign = seen.filter { $0.name != "report.pdf" && $0.name != "report.pdf.part" }
        XCTAssertEqual(foreign.map(\.name), [], "no other name appeared beside the download")
        XCTAssertFalse(seen.contains { $0.name == "report.pdf" && ($0.mask & UInt32(IN_MOVED_FROM | IN_DELETE)) != 0 },
                       "the old file was never moved away or deleted before the new one took its name")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["report.pdf"])
    }
}

/// The names that changed in one directory, read from inotify (non-blocking).
final class DirectoryWatch {
    struct Change { var name: String; var mask: UInt32 }
    private let fd: Int32

    init(_ dir: String) throws {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw TimedOut(description: "inotify_init1 failed: \(errno)") }
        let mask = UInt32(IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE)
        guard inotify_add_watch(fd, dir, mask) >= 0 else { throw TimedOut(description: "inotify_add_watch failed: \(errno)") }
    }

    func drain() -> [Change] {
        var out: [Change] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            var offset = 0
            buffer.withUnsafeBytes { raw in
                while offset + MemoryLayout<inotify_event>.size <= n {
                    let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    let nameStart = offset + MemoryLayout<inotify_event>.size
                    let nameBytes = raw[nameStart..<(nameStart + Int(event.len))].prefix { $0 != 0 }
                    out.append(Change(name: String(decoding: nameBytes, as: UTF8.self), mask: event.mask))
                    offset = nameStart + Int(event.len)
                }
            }
        }
        return out
    }

    func close() { Glibc.close(fd) }
}

extension FileSafetyTests {
    /// ferryd marks the partial files it makes: after a SIGKILL its ephemeral
    /// download's `.part`, which nothing on disk records, is removed at the next start,
    /// while another program's `NAME.part` in the same folder stays; a finished file
    /// carries no mark.
    func testAForgottenPartFileOfFerrysIsRemovedAtTheNextStartAndNoOtherFile() async throws {
        let downloads = try XCTUnwrap(self.downloads)
        let done = serve("/done.bin", size: 1000)
        let s = try await session()
        let finished = try await s.download(server.url("/done.bin"), options: ["destination": .string(downloads + "/done.bin")])
        let info = try await finish(finished)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(downloads + "/done.bin", equals: done)
        let mark = try runTool("/usr/bin/python3", ["-c", "import os,sys; os.getxattr(sys.argv[1], 'user.ferry.part')",
                                                    downloads + "/done.bin"], environment: environment())
        XCTAssertNotEqual(mark.status, 0, "a finished file carries no partial-file mark")

        serve("/eph.bin", size: stalledSize)
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: "/eph.bin")
        let eph = try await session("com.example.Gone", ["persistent": .boolean(false)])
        let t = try await eph.download(server.url("/eph.bin"), options: ["destination": .string(downloads + "/eph.bin")])
        try await waitForState(t, "running")
        try await waitForFileSize(downloads + "/eph.bin.part", atLeast: stalledCut)
        let browsers = downloads + "/browser.bin.part"
        try "a browser's download under way".write(toFile: browsers, atomically: false, encoding: .utf8)

        try await killFerryd()
        XCTAssertTrue(exists(downloads + "/eph.bin.part"), "the crash left it")
        try await startFerryd()
        XCTAssertFalse(exists(downloads + "/eph.bin.part"), "ferryd's, owned by nothing: removed at the start")
        XCTAssertEqual(contents(browsers), "a browser's download under way", "another program's: left alone")
    }
}
