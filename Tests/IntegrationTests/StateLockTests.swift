import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// One ferryd per state folder.
final class StateLockTests: FerryTestCase {
    /// A second ferryd started over the same state folder (a second activation, or a
    /// ferryd on another bus with the same home) waits for the first, then gives up
    /// without restoring anything: the first one's transfer goes on untouched.
    func testASecondFerrydLeavesTheStateFolderAlone() async throws {
        let dest = work + "/held.bin"
        let (t, body) = try await startStalledDownload("/held.bin", dest: dest)

        let second = try Ferryd.launch(ferrydPath, arguments: ["--no-idle-exit", "--state-lock-wait", "0.3"],
                                       environment: environment())
        XCTAssertEqual(second.waitForExit(timeout: 15), 1, second.log)
        XCTAssertTrue(second.log.contains("keeps using the state folder"), second.log)
        XCTAssertFalse(second.log.contains("restored"), "it restored nothing:\n\(second.log)")

        let state = try await t.info().state
        XCTAssertEqual(state, "running")
        XCTAssertGreaterThanOrEqual(fileSize(dest + ".part") ?? 0, stalledCut, "the first one's partial file is still there")
        _ = try await t.pause()
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
    }

    /// The next ferryd waits for the one leaving (as after an idle exit) and then
    /// carries on with the state it left.
    func testTheNextFerrydWaitsForTheOneLeaving() async throws {
        _ = serve("/next.bin", size: 1024)
        let t = try await session().download(server.url("/next.bin"), options: ["start": .boolean(false)])
        let next = try Ferryd.launch(ferrydPath, arguments: ["--no-idle-exit"], environment: environment())
        defer { next.terminate(); _ = next.waitForExit(timeout: 10) }
        let deadline = Date().addingTimeInterval(10)
        while !next.log.contains("waiting for another ferryd"), next.isRunning, Date() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        XCTAssertTrue(next.log.contains("waiting for another ferryd"), next.log)
        try await stopFerryd()
        try await Ferryd.waitForName(next, on: client.bus, timeout: 15)
        let state = try await t.info().state
        XCTAssertEqual(state, "paused", "the state came across")
    }
}
