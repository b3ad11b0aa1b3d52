import DBus
import FerryBusClient
import FerryCore
import FerryTestSupport
import Foundation
import XCTest

/// Where things go: downloads in the XDG download directory, state in
/// XDG_STATE_HOME, and the origin URL on the finished file.
final class XDGTests: DesktopBusTestCase {
    override func setUp() async throws {
        try await super.setUp()
        try await startFerryd()
    }

    func testDownloadGoesToTheXDGDownloadDirectoryAndCarriesItsOriginURL() async throws {
        serve("/paper.pdf", size: 12_345)
        let url = server.url("/paper.pdf")
        let session = try await client.openSession("com.example.XDG")
        let transfers = try await batch(session, [url])
        let t = try XCTUnwrap(transfers.first)
        let info = try await t.info()
        XCTAssertEqual(info.state, "completed")
        // From user-dirs.dirs: XDG_DOWNLOAD_DIR="$HOME/Dl".
        XCTAssertEqual(info.destination, downloads + "/paper.pdf")

        let probe = home + "/xattr-probe"
        _ = FileManager.default.createFile(atPath: probe, contents: Data())
        guard OriginURLAttribute.set(path: probe, url: "http://probe/") else {
            throw XCTSkip("the file system under \(home!) has no user extended attributes")
        }
        XCTAssertEqual(OriginURLAttribute.get(path: info.destination), url)
    }

    func testOriginURLLeavesOutCredentials() {
        let probe = home + "/xattr-probe"
        _ = FileManager.default.createFile(atPath: probe, contents: Data())
        guard OriginURLAttribute.set(path: probe, url: "https://user:secret@example.org/a?b=1") else {
            return  // no user xattrs here; the test above reports the skip
        }
        XCTAssertEqual(OriginURLAttribute.get(path: probe), "https://example.org/a?b=1")
    }

    func testStateLivesInXDGStateHome() async throws {
        _ = try await client.openSession("com.example.State")
        let database = home + "/.local/state/ferry/ferry.sqlite"
        XCTAssertTrue(FileManager.default.fileExists(atPath: database), "no state database at \(database)")
    }
}
