import FerryCore
import Foundation
import XCTest

/// Which paths count as inside a sandboxed application's own directory.
final class SandboxAreaTests: XCTestCase {
    var home: String!
    var area: SandboxArea!

    override func setUpWithError() throws {
        home = NSTemporaryDirectory() + "ferry-area-\(UUID().uuidString)"
        area = SandboxArea(appID: "com.example.App", home: home)
        try FileManager.default.createDirectory(atPath: area.root + "/data", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: home + "/.config", withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: home)
    }

    func testPathsInsideTheAppDirectory() {
        XCTAssertTrue(area.contains(area.root))
        XCTAssertTrue(area.contains(area.root + "/data"))
        XCTAssertTrue(area.contains(area.root + "/data/new-file.bin"), "a file still to be made")
        XCTAssertTrue(area.contains(area.root + "/data/new/deeper/file.bin"), "folders still to be made")
        XCTAssertNil(area.refusal(area.root + "/data/x", role: "destination"))
    }

    func testEscapesAreRefused() throws {
        XCTAssertFalse(area.contains(home + "/.bashrc"))
        XCTAssertFalse(area.contains(home + "/.config/autostart/x.desktop"))
        XCTAssertFalse(area.contains(area.root + "/../com.example.Other/data"), "..")
        XCTAssertFalse(area.contains(area.root + "/data/../../../../.bashrc"), "..")
        XCTAssertFalse(area.contains("data/relative"), "relative")
        XCTAssertFalse(area.contains(home + "/.var/app/com.example.AppX/data"), "a name that only starts the same")

        try FileManager.default.createSymbolicLink(atPath: area.root + "/home", withDestinationPath: home)
        XCTAssertFalse(area.contains(area.root + "/home/.bashrc"), "a folder link out")
        XCTAssertFalse(area.contains(area.root + "/home/new/file"), "a folder link out, below it nothing exists yet")
        try FileManager.default.createSymbolicLink(atPath: area.root + "/data/rc", withDestinationPath: home + "/.bashrc")
        XCTAssertFalse(area.contains(area.root + "/data/rc"), "a dangling file link out")
        FileManager.default.createFile(atPath: home + "/.bashrc", contents: Data())
        XCTAssertFalse(area.contains(area.root + "/data/rc"), "a file link out")
        if case .invalidDestination? = area.refusal(home + "/.bashrc", role: "destination") {} else {
            XCTFail("refused as InvalidDestination")
        }
    }

    func testALinkInsideThatStaysInsideIsFine() throws {
        try FileManager.default.createSymbolicLink(atPath: area.root + "/dl", withDestinationPath: area.root + "/data")
        XCTAssertTrue(area.contains(area.root + "/dl/file.bin"))
    }
}
