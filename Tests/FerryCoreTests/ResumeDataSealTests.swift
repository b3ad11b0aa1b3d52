import Crypto
import Foundation
import Logging
import XCTest
@testable import FerryCore

final class ResumeDataSealTests: XCTestCase {
    private var folder = ""
    private let logger = Logger(label: "test")

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "ferry-seal-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private var sample: ResumeData {
        ResumeData(url: "https://user:secret@example.com/a.bin", destination: "/home/u/a.bin", partPath: "/home/u/a.bin.part",
                   offset: 5, etag: "\"e\"", lastModified: nil, expected: 10, session: "s", created: 1)
    }

    func testSealedDataHidesItsContentsAndOpensOnlyWithItsKey() throws {
        let seal = ResumeDataSeal.ephemeral()
        let bytes = sample.encoded(sealedWith: seal)
        XCTAssertEqual(Array(bytes.prefix(4)), Array("FRD2".utf8))
        let text = String(decoding: bytes, as: UTF8.self)
        XCTAssertFalse(text.contains("secret") || text.contains("example.com") || text.contains("a.bin"), text)
        XCTAssertEqual(try ResumeData.decode(bytes, seal: seal), sample)
        XCTAssertNotEqual(sample.encoded(sealedWith: seal), bytes, "a fresh nonce each time")

        XCTAssertThrowsError(try ResumeData.decode(bytes, seal: .ephemeral())) { error in
            guard case CoreError.invalidResumeData(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("another Ferry installation"), message)
        }
        for i in [4, 20, bytes.count - 1] {
            var changed = bytes; changed[i] ^= 1
            XCTAssertThrowsError(try ResumeData.decode(changed, seal: seal), "byte \(i) changed")
        }
        XCTAssertThrowsError(try ResumeData.decode(Array(bytes.prefix(20)), seal: seal), "cut short")
    }

    /// What Ferry 0.1 handed out (readable JSON with a checksum) is still taken back.
    func testTheOlderFormatIsStillTakenBack() throws {
        let encoder = JSONEncoder(); encoder.outputFormatting = [.sortedKeys]
        let json = Array(try encoder.encode(sample))
        let old = Array("FRD1".utf8) + json + Array(SHA256.hash(data: json))
        XCTAssertEqual(try ResumeData.decode(old, seal: .ephemeral()), sample)
    }

    func testTheKeyIsKeptPrivatelyAndReusedAfterARestart() throws {
        let first = ResumeDataSeal.persistent(in: folder, logger: logger)
        let path = folder + "/resume-key"
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600, "only the user may read the key")
        XCTAssertEqual(st.st_size, 32)
        let bytes = sample.encoded(sealedWith: first)
        let second = ResumeDataSeal.persistent(in: folder, logger: logger)
        XCTAssertEqual(try ResumeData.decode(bytes, seal: second), sample, "the next daemon opens it")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder), ["resume-key"], "no temporary file left")
    }

    func testADamagedKeyFileIsReplaced() throws {
        let path = folder + "/resume-key"
        FileManager.default.createFile(atPath: path, contents: Data([1, 2, 3]))
        let seal = ResumeDataSeal.persistent(in: folder, logger: logger)
        XCTAssertEqual(FileManager.default.contents(atPath: path)?.count, 32)
        let bytes = sample.encoded(sealedWith: seal)
        XCTAssertEqual(try ResumeData.decode(bytes, seal: ResumeDataSeal.persistent(in: folder, logger: logger)), sample)
    }

    func testAWidenedKeyFileIsMadePrivateAgainAndKept() throws {
        let first = ResumeDataSeal.persistent(in: folder, logger: logger)
        let path = folder + "/resume-key"
        chmod(path, 0o644)
        let bytes = sample.encoded(sealedWith: first)
        let second = ResumeDataSeal.persistent(in: folder, logger: logger)
        XCTAssertEqual(try ResumeData.decode(bytes, seal: second), sample, "the same key")
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
    }

    /// A link at the key's name is not followed: it is replaced, its target untouched.
    func testALinkAtTheKeysNameIsReplacedNotFollowed() throws {
        let elsewhere = folder + "/elsewhere"
        let planted = Data((0..<32).map { UInt8($0) })
        FileManager.default.createFile(atPath: elsewhere, contents: planted)
        try FileManager.default.createSymbolicLink(atPath: folder + "/resume-key", withDestinationPath: elsewhere)
        let seal = ResumeDataSeal.persistent(in: folder, logger: logger)
        XCTAssertEqual(FileManager.default.contents(atPath: elsewhere), planted, "the link's target is untouched")
        XCTAssertThrowsError(try ResumeData.decode(sample.encoded(sealedWith: ResumeDataSeal(key: SymmetricKey(data: planted))), seal: seal),
                             "the planted key is not the one in use")
        var st = stat()
        XCTAssertEqual(lstat(folder + "/resume-key", &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFREG, "a file of its own now")
    }

    func testAFolderThatCannotBeMadeStillGivesAWorkingKey() throws {
        let notAFolder = folder + "/file"
        FileManager.default.createFile(atPath: notAFolder, contents: Data())
        let seal = ResumeDataSeal.persistent(in: notAFolder, logger: logger)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder), ["file"], "nothing written")
        XCTAssertEqual(try ResumeData.decode(sample.encoded(sealedWith: seal), seal: seal), sample)
    }
}
