import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A sandboxed app's folder swapped for a link mid-transfer: nothing is read, written, renamed or removed outside it.
extension SandboxedCallerTests {
    /// The app swaps a folder of its own for a link to `~/.config/autostart` while its
    /// download is paused: the finished file is not moved there (Disk), and nothing is
    /// left in autostart.
    func testAFolderSwappedForALinkIsCaughtAtTheFinish() async throws {
        serve("/swap.bin", size: 1 << 20)
        server.set(.stallAfter(bytes: 256 * 1024, times: 1), on: "/swap.bin")
        let appDir = try appDirectory(appID)
        let folder = appDir + "/data/dl"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let autostart = home + "/.config/autostart"
        try FileManager.default.createDirectory(atPath: autostart, withIntermediateDirectories: true)

        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Swap")
        let t = try await pausedAfterTheStall(s, "/swap.bin", into: folder + "/x.desktop")
        try swapForALink(folder, to: autostart)
        try await t.resume()
        try await waitForState(t, ["failed", "completed"], since: 0, timeout: 20)
        let info = try await t.info()
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, ok + "Disk", info.errorMessage)
        let left = try FileManager.default.contentsOfDirectory(atPath: autostart)
        XCTAssertEqual(left, [], "nothing reaches autostart")
    }

    /// A download of the app's, from a path served to stall after 256 KiB, paused once
    /// its `.part` holds them.
    func pausedAfterTheStall(_ s: BusSession, _ path: String, into destination: String) async throws -> FerryTransfer {
        let t = try await s.download(server.url(path), options: ["destination": .string(destination)])
        try await waitForFileSize(destination + ".part", atLeast: 256 * 1024)
        _ = try await t.pause()
        try await waitForState(t, "paused")
        return t
    }

    /// A folder of the app's own (`~/.var/app/APPID/data/NAME`) and one of the user's
    /// outside it (`~/VICTIM`), both made: the two sides of a folder swap.
    func folders(_ name: String, victim: String) throws -> (folder: String, victim: String) {
        let folder = try appDirectory(appID) + "/data/" + name
        let outside = home + "/" + victim
        for path in [folder, outside] { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        return (folder, outside)
    }

    /// The app's move: its `folder` becomes a link to `target`.
    func swapForALink(_ folder: String, to target: String) throws {
        try FileManager.default.moveItem(atPath: folder, toPath: folder + "-old")
        try FileManager.default.createSymbolicLink(atPath: folder, withDestinationPath: target)
    }

    /// Files of the user outside the app's directory, reached by swapping one of the
    /// app's folders for a link while its transfers wait: the download's `.part` there
    /// is neither written, cut nor deleted (Resume, then Cancel), and the upload's
    /// `response-destination` there is not overwritten (black-box hunt g, findings 1, 3).
    func testAFolderSwappedForALinkReachesNoFileOutside() async throws {
        serve("/part.bin", size: 1 << 20)
        server.set(.stallAfter(bytes: 256 * 1024, times: 1), on: "/part.bin")
        server.set(.acceptUploads(status: 200, body: Array("attacker's answer".utf8)), on: "/receipt")
        let appDir = try appDirectory(appID)
        let (folder, victim) = try folders("swap", victim: "Downloads")
        try Data(repeating: 1, count: 1000).write(to: URL(fileURLWithPath: appDir + "/data/photo.jpg"))
        let usersPart = Data("the user's own partial download".utf8)
        let usersFile = Data("the user's own file".utf8)
        try usersPart.write(to: URL(fileURLWithPath: victim + "/x.bin.part"))
        try usersFile.write(to: URL(fileURLWithPath: victim + "/notes.txt"))

        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Swap")
        let down = try await pausedAfterTheStall(s, "/part.bin", into: folder + "/x.bin")
        let up = try await s.upload(server.url("/receipt"), file: appDir + "/data/photo.jpg",
                                    options: ["response-destination": .string(folder + "/notes.txt"), "start": .boolean(false)])

        try swapForALink(folder, to: victim)
        let mark = signals.all.count
        try await down.resume()
        try await up.resume()
        try await waitForState(down, ["failed", "completed"], since: mark, timeout: 20)
        try await waitForState(up, ["failed", "completed"], since: mark, timeout: 20)
        let downInfo = try await down.info(), upInfo = try await up.info()
        XCTAssertEqual(downInfo.state, "failed")
        XCTAssertEqual(downInfo.errorName, ok + "Disk", downInfo.errorMessage)
        XCTAssertEqual(upInfo.state, "failed")
        XCTAssertEqual(upInfo.errorName, ok + "Disk", upInfo.errorMessage)
        try await down.cancel()
        XCTAssertEqual(FileManager.default.contents(atPath: victim + "/x.bin.part"), usersPart, "the user's .part is untouched")
        XCTAssertEqual(FileManager.default.contents(atPath: victim + "/notes.txt"), usersFile, "the user's file is untouched")
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: victim)), ["x.bin.part", "notes.txt"])
    }

    /// The server's name (Content-Disposition) arriving after the app swapped its folder
    /// for a link: the `.part` is not renamed there, so the user's file of the URL's
    /// `.part` name outside keeps its name and bytes, and the download fails with `Disk`.
    func testAServerNameAfterAFolderSwapRenamesNothingOutside() async throws {
        serve("/x.bin", size: 200_000, contentDisposition: "attachment; filename=\"server.bin\"")
        let (_, t, victim, usersPart) = try await heldDownloadInSwappedFolder("/x.bin", destination: "", victim: "Documents")
        server.release("/x.bin")
        try await waitForState(t, ["failed", "completed"], since: 0, timeout: 20)
        let info = try await t.info()
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, ok + "Disk", info.errorMessage)
        XCTAssertEqual(FileManager.default.contents(atPath: victim + "/x.bin.part"), usersPart, "the user's file keeps its bytes")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: victim), ["x.bin.part"], "nothing renamed or added outside")
    }

    /// A download cancelled and forgotten at once (its session closed with
    /// `Close(true)`) while its attempt is still stopping, after the app swapped its
    /// folder for a link: the `.part` left when the attempt ends is removed only within
    /// the app's directory, so the user's file of that name outside stays.
    func testAClosedSessionsLeftoversAreRemovedOnlyInside() async throws {
        serve("/left.bin", size: 200_000)
        let (s, _, victim, usersPart) = try await heldDownloadInSwappedFolder("/left.bin", destination: "/left.bin", victim: "Downloads")
        try await s.close(cancelTransfers: true)
        // Refused twice, each logged: at the cancel, and when the stopped attempt ends.
        func refusals() -> Int { (ferryd?.log ?? "").components(separatedBy: "could not delete partial file").count - 1 }
        try await waitUntilAsync("the stopped attempt's end") {
            refusals() >= 2 || !FileManager.default.fileExists(atPath: victim + "/left.bin.part")
        }
        XCTAssertEqual(FileManager.default.contents(atPath: victim + "/left.bin.part"), usersPart, "the user's file stays")
        server.release("/left.bin")
    }

    /// The app downloads `path` (answers held back) into a folder of its own (plus
    /// `destination`: "" names the folder alone), then swaps that folder for a link to
    /// `~/VICTIM`, which holds the user's file named like the download's `.part`. Gives
    /// the session, the transfer, the victim folder and the user's bytes.
    func heldDownloadInSwappedFolder(_ path: String, destination: String, victim name: String) async throws
        -> (BusSession, FerryTransfer, String, Data) {
        server.set(.holdAnswers, on: path)
        let (folder, victim) = try folders("swapped", victim: name)
        let usersPart = Data("the user's own partial download".utf8)
        try usersPart.write(to: URL(fileURLWithPath: victim + path + ".part"))

        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Swapped")
        let t = try await s.download(server.url(path), options: ["destination": .string(folder + destination)])
        try await waitUntilAsync("the request, its answer held") { server.isHoldingAnswer(for: path) }
        try await waitUntilAsync("the engine's .part") { FileManager.default.fileExists(atPath: folder + path + ".part") }
        try swapForALink(folder, to: victim)
        return (s, t, victim, usersPart)
    }
}
