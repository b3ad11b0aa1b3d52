import Foundation
import XCTest
@testable import FerryCore

/// The system calls the core makes when it finishes a download, asked directly.
final class FileOperationTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "ferry-fileops-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func write(_ text: String, _ name: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: folder + "/" + name))
    }

    private func read(_ name: String) -> String? {
        try? String(contentsOfFile: folder + "/" + name, encoding: .utf8)
    }

    func testMoveNoReplaceMovesToAFreeName() throws {
        try write("body", "f.part")
        XCTAssertEqual(try AtomicReplace.moveNoReplace(folder + "/f.part", to: folder + "/f"), .moved)
        XCTAssertEqual(read("f"), "body")
        XCTAssertNil(read("f.part"))
    }

    func testMoveNoReplaceLeavesAFileThatIsThere() throws {
        try write("new", "g.part")
        try write("theirs", "g")
        XCTAssertEqual(try AtomicReplace.moveNoReplace(folder + "/g.part", to: folder + "/g"), .targetExists)
        XCTAssertEqual(read("g"), "theirs", "never replaced")
        XCTAssertEqual(read("g.part"), "new", "and the download is still there to be moved elsewhere")

        // A dangling symbolic link is something at the name too.
        XCTAssertEqual(symlink(folder + "/nowhere", folder + "/h"), 0)
        XCTAssertEqual(try AtomicReplace.moveNoReplace(folder + "/g.part", to: folder + "/h"), .targetExists)
        XCTAssertNil(read("nowhere"))
    }

    func testMoveByLinkMovesAndNeverReplaces() throws {
        try write("body", "l.part")
        try write("theirs", "taken")
        XCTAssertEqual(try AtomicReplace.moveByLink(folder + "/l.part", to: folder + "/taken"), .targetExists)
        XCTAssertEqual(read("taken"), "theirs")
        XCTAssertEqual(read("l.part"), "body")

        XCTAssertEqual(try AtomicReplace.moveByLink(folder + "/l.part", to: folder + "/l"), .moved)
        XCTAssertEqual(read("l"), "body")
        XCTAssertNil(read("l.part"), "no second name left behind")
        var info = stat()
        XCTAssertEqual(lstat(folder + "/l", &info), 0)
        XCTAssertEqual(info.st_nlink, 1)
        XCTAssertThrowsError(try AtomicReplace.moveByLink(folder + "/gone.part", to: folder + "/gone"))
    }

    /// Names relative to an open folder stay in that folder, even once its path leads
    /// elsewhere (what a sandboxed app's `.part` rename relies on).
    func testMoveRelativeToAnOpenFolderStaysInIt() throws {
        try FileManager.default.createDirectory(atPath: folder + "/mine", withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: folder + "/other", withIntermediateDirectories: false)
        try write("body", "mine/a.part")
        try write("theirs", "other/a.part")
        let opened = open(folder + "/mine", O_RDONLY | O_DIRECTORY)
        XCTAssertGreaterThanOrEqual(opened, 0)
        defer { close(opened) }
        try FileManager.default.moveItem(atPath: folder + "/mine", toPath: folder + "/mine-old")
        XCTAssertEqual(symlink(folder + "/other", folder + "/mine"), 0)

        try write("taken", "mine-old/t.part")
        XCTAssertEqual(try AtomicReplace.move((opened, "a.part"), to: (opened, "t.part")), .targetExists)
        XCTAssertEqual(try AtomicReplace.move((opened, "a.part"), to: (opened, "b.part")), .moved)
        XCTAssertEqual(read("mine-old/b.part"), "body")
        XCTAssertNil(read("mine-old/a.part"))
        XCTAssertEqual(read("other/a.part"), "theirs", "the file the path now leads to is untouched")
        XCTAssertNil(read("other/b.part"))
        XCTAssertEqual(read("mine-old/t.part"), "taken")
    }

    func testMoveNoReplaceOfAMissingFileThrowsADiskError() {
        XCTAssertThrowsError(try AtomicReplace.moveNoReplace(folder + "/none.part", to: folder + "/none")) { error in
            guard case CoreError.disk(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("none.part"), message)
        }
    }

    func testFreeSpaceIsWhatStatfsSays() throws {
        let foundation = try XCTUnwrap(
            (try FileManager.default.attributesOfFileSystem(forPath: folder))[.systemFreeSize] as? NSNumber).int64Value
        let ours = try XCTUnwrap(CoreEnvironment.systemFreeSpace(folder))
        // Other processes write to this disk meanwhile: equal within 256 MiB.
        XCTAssertLessThan(abs(ours - foundation), 256 << 20, "ours \(ours), Foundation's \(foundation)")
        XCTAssertGreaterThan(ours, 0)
        XCTAssertNil(CoreEnvironment.systemFreeSpace(folder + "/missing"))
    }

    func testExistsCountsADanglingLinkAndNotAMissingName() {
        XCTAssertEqual(symlink(folder + "/nowhere", folder + "/link"), 0)
        XCTAssertTrue(FileSystemChecks.exists(folder + "/link"))
        XCTAssertFalse(FileSystemChecks.exists(folder + "/nowhere"))
        XCTAssertTrue(FileSystemChecks.exists(folder))
    }

    func testFileSizeIsARegularFilesSize() throws {
        let file = folder + "/f.bin", link = folder + "/link"
        FileManager.default.createFile(atPath: file, contents: Data(count: 12_345))
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
        XCTAssertEqual(FileSystemChecks.fileSize(file), 12_345)
        XCTAssertNil(FileSystemChecks.fileSize(link), "a link is not followed: its target's size is not told")
        XCTAssertNil(FileSystemChecks.fileSize(folder), "a folder has no file size")
        XCTAssertNil(FileSystemChecks.fileSize(folder + "/missing"))
    }
}
