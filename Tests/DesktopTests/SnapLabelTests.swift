import FerryCore
import Foundation
import XCTest
@testable import FerryService

/// A snap is confined by AppArmor, not by a Flatpak sandbox: its label, as the bus
/// daemon reports it (`LinuxSecurityLabel`), makes it the sandboxed application
/// `snap:NAME`, with its files under `~/snap/NAME`. (This machine's kernel has no
/// AppArmor, so no real snap can connect here: the label is the whole input.)
final class SnapLabelTests: XCTestCase {
    private func label(_ text: String, nul: Bool = true) -> [UInt8] { Array(text.utf8) + (nul ? [0] : []) }

    func testASnapsProfileNamesTheSnap() {
        XCTAssertEqual(SnapLabel.appID(fromLabel: label("snap.firefox.firefox (enforce)")), "snap:firefox")
        XCTAssertEqual(SnapLabel.appID(fromLabel: label("snap.telegram-desktop.telegram-desktop (complain)")), "snap:telegram-desktop")
        XCTAssertEqual(SnapLabel.appID(fromLabel: label("snap.vlc.hook.configure (enforce)")), "snap:vlc")
        XCTAssertEqual(SnapLabel.appID(fromLabel: label("snap.code.code", nul: false)), "snap:code")
    }

    func testOtherLabelsAreNotSnaps() {
        for text in ["unconfined", "/usr/bin/evince (enforce)", "snap.firefox (enforce)", "snap..app (enforce)",
                     "snap.Firefox.firefox (enforce)", "snap.-x.app (enforce)", "snap.a--b.app (enforce)",
                     "snap.123.app (enforce)", "snapper.x.y (enforce)", "system_u:system_r:unconfined_t:s0",
                     "snap.x.y\u{0}z"] {
            XCTAssertNil(SnapLabel.appID(fromLabel: label(text)), text)
        }
        XCTAssertNil(SnapLabel.appID(fromLabel: Array(repeating: UInt8(ascii: "a"), count: 5000)), "an oversized label")
    }

    /// A snap may name files only under `~/snap/NAME`, as a Flatpak under `~/.var/app/ID`.
    func testASnapsAreaIsItsFolderUnderSnap() throws {
        let home = NSTemporaryDirectory() + "ferry-snap-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: home) }
        try FileManager.default.createDirectory(atPath: home + "/snap/firefox/common", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: home + "/.var/app/org.example.App", withIntermediateDirectories: true)
        let snap = SandboxArea(appID: "snap:firefox", home: home)
        XCTAssertEqual(snap.root, home + "/snap/firefox")
        XCTAssertNil(snap.refusal(home + "/snap/firefox/common/file.bin", role: "destination"))
        XCTAssertNotNil(snap.refusal(home + "/Documents/file.bin", role: "destination"))
        XCTAssertNotNil(snap.refusal(home + "/snap/other/file.bin", role: "destination"))
        let flatpak = SandboxArea(appID: "org.example.App", home: home)
        XCTAssertEqual(flatpak.root, home + "/.var/app/org.example.App")
    }
}
