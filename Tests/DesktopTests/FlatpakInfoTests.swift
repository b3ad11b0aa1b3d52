import Foundation
import XCTest
@testable import FerryService

/// Reading a caller's app id from `/proc/PID/root/.flatpak-info`, against a fake
/// `/proc` tree: only a plain, small file is read, and only a valid id is believed.
final class FlatpakInfoTests: XCTestCase {
    var proc: String!
    let pid: UInt32 = 4242
    var root: String { proc + "/\(pid)/root" }

    override func setUpWithError() throws {
        proc = NSTemporaryDirectory() + "ferry-proc-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: proc)
    }

    func testTheApplicationNameIsRead() throws {
        try "[Instance]\nname=not.this\n\n[Application]\n# comment\nname = org.example.App\nruntime=x\n"
            .write(toFile: root + "/.flatpak-info", atomically: false, encoding: .utf8)
        XCTAssertEqual(FlatpakInfo.finding(forProcess: pid, proc: proc), .app("org.example.App"))
    }

    func testNoFileMeansUnconfined() {
        XCTAssertEqual(FlatpakInfo.finding(forProcess: pid, proc: proc), .unconfined)
    }

    func testAGoneProcessIsNotUnconfined() {
        guard case .unreadable = FlatpakInfo.finding(forProcess: 999_999, proc: proc) else { return XCTFail("a missing process is not unconfined") }
    }

    func testLinksFifosAndHugeFilesAreRefusedNotFollowed() throws {
        let elsewhere = proc + "/elsewhere"
        try "[Application]\nname=org.example.Trusted\n".write(toFile: elsewhere, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: root + "/.flatpak-info", withDestinationPath: elsewhere)
        guard case .unreadable = FlatpakInfo.finding(forProcess: pid, proc: proc) else { return XCTFail("a symlink is not followed") }

        try FileManager.default.removeItem(atPath: root + "/.flatpak-info")
        XCTAssertEqual(mkfifo(root + "/.flatpak-info", 0o644), 0)
        guard case .unreadable = FlatpakInfo.finding(forProcess: pid, proc: proc) else { return XCTFail("a FIFO is not read (nor waited on)") }

        try FileManager.default.removeItem(atPath: root + "/.flatpak-info")
        let huge = "[Application]\nname=org.example.App\n" + String(repeating: "#", count: 70_000)
        try huge.write(toFile: root + "/.flatpak-info", atomically: false, encoding: .utf8)
        guard case .unreadable = FlatpakInfo.finding(forProcess: pid, proc: proc) else { return XCTFail("a huge file is refused") }
    }

    func testOnlyValidApplicationIDsAreBelieved() {
        for bad in ["", "single", "org..example", "org.example.", ".org.example", "org.3example.App", "org.example/../x",
                    "org.example App", String(repeating: "a.", count: 200) + "b"] {
            XCTAssertNil(FlatpakInfo.applicationName(in: "[Application]\nname=\(bad)\n"), bad)
        }
        XCTAssertNil(FlatpakInfo.applicationName(in: "[Instance]\nname=org.example.App\n"), "only the [Application] group")
        XCTAssertEqual(FlatpakInfo.applicationName(in: "[Application]\nname=org.example.App_2-x\n"), "org.example.App_2-x")
    }
}
