import FerryTestSupport
import Foundation
import XCTest
@testable import FerryEngine

/// The `.part` file a new download writes: made without a name, then given its name
/// before the first byte, and never in place of what is already there.
final class PartFileTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws { folder = try makeShortTemporaryDirectory(prefix: "ferry-partfile") }
    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: folder) }

    func testANewPartFileHasItsNameBeforeAnyByteIsWritten() throws {
        let path = folder + "/a.iso.part"
        let part = try PartFile.open(path).get()
        defer { part.close() }

        var info = stat()
        XCTAssertEqual(lstat(path, &info), 0, "the name exists as soon as the file does (a crash leaves a resumable .part)")
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFREG)
        XCTAssertEqual(info.st_nlink, 1, "one name, not a second link to something else")
        XCTAssertEqual(info.st_size, 0)
        let mask = umask(0); umask(mask)
        XCTAssertEqual(info.st_mode & 0o777, 0o644 & ~mask)
        XCTAssertTrue(part.isRegular)
        XCTAssertEqual(part.initialSize, 0)

        let bytes: [UInt8] = Array("some bytes".utf8)
        XCTAssertEqual(write(part.fd, bytes, bytes.count), bytes.count)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), Data(bytes), "the descriptor writes the named file")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder), ["a.iso.part"], "nothing else is left in the folder")
    }

    /// A resumed prefix is hashed from the open file itself, not from whatever its name
    /// leads to by then (a folder swapped for a link, a file put in its place).
    func testTheHashReadsTheOpenFileNotItsName() throws {
        let path = folder + "/h.part"
        let part = try PartFile.open(path).get()
        defer { part.close() }
        let mine: [UInt8] = Array("the download's own bytes".utf8)
        XCTAssertEqual(write(part.fd, mine, mine.count), mine.count)
        try FileManager.default.moveItem(atPath: path, toPath: folder + "/elsewhere")
        try Data("someone else's file at the name".utf8).write(to: URL(fileURLWithPath: path))

        let digest = try PartFile.hashPrefix(part.openForReading(), path: path, length: Int64(mine.count)).get()
        XCTAssertEqual(digest.finalize().map { String(format: "%02x", $0) }.joined(), TestData.sha256Hex(mine))
    }

    func testTheUnnamedFileIsTheNamedOneAndFollowsTheUmask() throws {
        let path = folder + "/private.part"
        let mask = umask(0o022)
        umask(mask)
        XCTAssertEqual(PartFile.processUmask, mask, "read from /proc/self/status")

        guard case .success(let fd)? = PartFile.createUnnamedThenLink(path) else {
            return XCTFail("O_TMPFILE and linkat work on this file system")
        }
        defer { close(fd) }
        var opened = stat(), named = stat()
        XCTAssertEqual(fstat(fd, &opened), 0)
        XCTAssertEqual(lstat(path, &named), 0)
        XCTAssertEqual(opened.st_ino, named.st_ino, "the descriptor writes the file that has the name")
        XCTAssertEqual(named.st_nlink, 1)
        XCTAssertEqual(named.st_mode & 0o777, 0o644 & ~mask, "the process's umask, whatever the kernel does")
    }

    func testTheNamedFallbackNeverReplacesAFileThatIsThere() throws {
        let fresh = folder + "/fresh.part"
        let fd = try PartFile.createNamed(fresh).get()
        close(fd)
        var info = stat()
        XCTAssertEqual(lstat(fresh, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFREG)

        guard case .failure(let error) = PartFile.createNamed(fresh) else { return XCTFail("expected EEXIST") }
        XCTAssertEqual(error.code, EEXIST)
        XCTAssertEqual(error.action, "creating")
    }

    func testTheUnnamedFileNeverTakesTheNameOfAFileThatIsThere() throws {
        let path = folder + "/b.part"
        try Data("someone else's".utf8).write(to: URL(fileURLWithPath: path))

        guard case .failure(let error)? = PartFile.createUnnamedThenLink(path) else {
            return XCTFail("expected EEXIST (or no O_TMPFILE on this file system)")
        }
        XCTAssertEqual(error.code, EEXIST)
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), "someone else's")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder), ["b.part"])
    }

    func testAnExistingPartFileIsContinuedNotReplaced() throws {
        let path = folder + "/c.part"
        try Data("first half".utf8).write(to: URL(fileURLWithPath: path))
        var before = stat()
        XCTAssertEqual(lstat(path, &before), 0)

        let part = try PartFile.open(path).get()
        defer { part.close() }

        var after = stat()
        XCTAssertEqual(fstat(part.fd, &after), 0)
        XCTAssertEqual(after.st_ino, before.st_ino)
        XCTAssertEqual(part.initialSize, 10)
    }

    func testAMissingFolderIsReportedNotCreated() throws {
        let path = folder + "/missing/d.part"
        guard case .failure(let error) = PartFile.open(path) else { return XCTFail("expected a failure") }
        XCTAssertEqual(error.code, ENOENT)
        XCTAssertEqual(error.path, path)
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder + "/missing"))
    }
}
