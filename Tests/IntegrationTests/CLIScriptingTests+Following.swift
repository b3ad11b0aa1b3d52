import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Following transfers from the CLI: get --wait and Ctrl-C, watch and events, also when ferryd leaves the bus.
extension CLIScriptingTests {
    /// `get --wait` piped: stdout holds what a script captures (the id, then the
    /// final line with the file); the state and progress lines go to stderr, as curl's
    /// progress does; a download that lasts seconds has its progress lines there.
    func testGetWaitKeepsProgressOffStandardOutput() async throws {
        serve("/cap.bin", size: 600_000)
        server.set(.slow(bytesPerSecond: 200 * 1024), on: "/cap.bin")
        let started = Date()
        let r = try ferry(["get", server.url("/cap.bin"), "-o", work + "/cap.bin", "--wait"])
        let seconds = Date().timeIntervalSince(started)
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 2, r.stdout)
        let id = lines.first ?? ""
        XCTAssertNotNil(UInt64(id), r.stdout)
        XCTAssertEqual(lines.last, "\(id) completed \(work!)/cap.bin")
        XCTAssertTrue(r.stderr.contains("\(id) running "), r.stderr)
        let progress = r.stderr.split(separator: "\n").filter { $0.hasPrefix("\(id) ") && $0.split(separator: " ").dropFirst().first?.hasSuffix("%") == true }
        XCTAssertFalse(progress.isEmpty, "progress lines (about 3 s at 200 KiB/s, one a second): \(r.stderr)")
        XCTAssertLessThanOrEqual(Double(progress.count), seconds, "at most one a second, from a second in: \(r.stderr)")
    }

    /// The id a piped `get --wait` printed, once its first state line is on stderr: the
    /// download is being followed (and Ctrl-C's note armed).
    func idOnceFollowed(_ get: ChildProcess) async throws -> String {
        var id = ""
        try await waitUntilAsync("the id and a state line") {
            id = get.stdout.split(separator: "\n").first.map(String.init) ?? ""
            return !id.isEmpty && get.stderr.split(separator: "\n").contains { $0.hasPrefix("\(id) ") }
        }
        return id
    }

    /// Ctrl-C on `get --wait` stops the waiting, not the download: the CLI says so on
    /// stderr with the id, ends as killed by SIGINT (as any program does, so a script's
    /// loop stops too), and the file still arrives whole.
    func testCtrlCOnGetWaitSaysTheDownloadGoesOn() async throws {
        let body = serve("/long.bin", size: 600_000)
        server.set(.slow(bytesPerSecond: 300 * 1024), on: "/long.bin")
        let get = try ChildProcess(executable: ferryPath, arguments: ["get", server.url("/long.bin"), "-o", work + "/long.bin", "--wait"],
                                   environment: environment())
        defer { get.kill(SIGKILL) }
        let id = try await idOnceFollowed(get)
        get.kill(SIGINT)
        XCTAssertEqual(get.waitForExit(timeout: 10), 128 + SIGINT, get.log)
        XCTAssertTrue(get.stderr.contains("stopped waiting; what has not finished goes on in the Ferry service"), get.stderr)
        XCTAssertTrue(get.stderr.contains("Transfer \(id)."), get.stderr)
        let t = client.transfer(id: try XCTUnwrap(UInt64(id), get.stdout))
        try await waitForState(t, "completed", timeout: 20)
        XCTAssertEqual(FileManager.default.contents(atPath: work + "/long.bin"), Data(body))
    }

    /// A `get --wait` started with SIGINT ignored (a script's background job) keeps
    /// ignoring it: it waits on to the end, without a note.
    func testGetWaitStartedWithCtrlCIgnoredKeepsIgnoringIt() async throws {
        serve("/bg.bin", size: 300_000)
        server.set(.slow(bytesPerSecond: 300 * 1024), on: "/bg.bin")
        let get = try ChildProcess(executable: "/bin/sh",
                                   arguments: ["-c", "trap '' INT; exec \"$0\" get \"$1\" -o \"$2\" --wait", ferryPath,
                                               server.url("/bg.bin"), work + "/bg.bin"],
                                   environment: environment())
        defer { get.kill(SIGKILL) }
        let id = try await idOnceFollowed(get)
        get.kill(SIGINT)
        XCTAssertEqual(get.waitForExit(timeout: 20), 0, get.log)
        XCTAssertFalse(get.stderr.contains("stopped waiting"), get.stderr)
        XCTAssertTrue(get.stdout.contains("\(id) completed \(work!)/bg.bin"), get.stdout)
    }

    /// Piped progress starts from the real state: a finished transfer is one final line at once.
    func testPipedWatchOfAFinishedTransfer() async throws {
        serve("/fin.bin", size: 3000)
        let s = try await session()
        let t = try await s.download(server.url("/fin.bin"), options: ["destination": .string(work + "/fin.bin")])
        try await finish(t)
        let r = try ferry(["watch", "\(t.id)", "--until-done"], timeout: 10)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "\(t.id) completed \(work!)/fin.bin\n")
    }

    /// `watch` follows transfers made after it started, skips paused ones, and
    /// keeps going until interrupted; `events --json` prints JSON lines.
    func testWatchAndEventsFollowNewTransfers() async throws {
        let s = try await session()
        serve("/held.bin", size: 1000)
        let held = try await s.download(server.url("/held.bin"), options: ["destination": .string(work + "/held.bin"), "start": .boolean(false)])
        // A transfer that runs all along: both commands show it at once, which
        // tells the test they have subscribed and read the state.
        serve("/slow.bin", size: 2_000_000)
        server.set(.slow(bytesPerSecond: 64 * 1024), on: "/slow.bin")
        let slow = try await s.download(server.url("/slow.bin"), options: ["destination": .string(work + "/slow.bin")])
        let watch = try ChildProcess(executable: ferryPath, arguments: ["watch"], environment: environment())
        let events = try ChildProcess(executable: ferryPath, arguments: ["events", "--json"], environment: environment())
        let eventsText = try ChildProcess(executable: ferryPath, arguments: ["events"], environment: environment())
        let watchJSON = try ChildProcess(executable: ferryPath, arguments: ["watch", "--json"], environment: environment())
        defer {
            for child in [watch, events, eventsText, watchJSON] { child.kill(SIGKILL) }
        }
        try await waitUntilAsync("what the followers print") { watch.stdout.contains("\(slow.id) ") }
        try await waitUntilAsync("what the followers print") { events.stdout.contains("\"id\":\(slow.id)") }
        try await waitUntilAsync("what the followers print") { eventsText.stdout.contains("\(slow.id) ") }
        try await waitUntilAsync("what the followers print") { watchJSON.stdout.contains("\"id\":\(slow.id)") }
        serve("/late.bin", size: 50_000)
        let late = try await s.download(server.url("/late.bin"), options: ["destination": .string(work + "/late.bin")])
        try await finish(late)
        try await waitUntilAsync("what the followers print") { watch.stdout.contains("\(late.id) completed") }
        try await waitUntilAsync("what the followers print") { events.stdout.contains("\"event\":\"completed\"") }
        // Text lines name their event once: "ID finished PATH", "ID completed".
        try await waitUntilAsync("what the followers print") { eventsText.stdout.contains("\(late.id) completed") }
        XCTAssertTrue(eventsText.stdout.contains("\(late.id) finished \(work!)/late.bin\n"), eventsText.stdout)
        XCTAssertFalse(eventsText.stdout.contains("finished finished"), eventsText.stdout)
        XCTAssertEqual(eventsText.stdout.components(separatedBy: "\n").filter { $0 == "\(late.id) completed" }.count, 1,
                       "the end said once: \(eventsText.stdout)")
        // watch --json shows live progress as `progress` events (the slow one runs on).
        try await waitUntilAsync("what the followers print") { watchJSON.stdout.contains("\"event\":\"progress\"") }
        XCTAssertTrue(watch.isRunning, "watch goes on until Ctrl-C")
        XCTAssertFalse(watch.stdout.contains("\(held.id) "), "a paused transfer is not followed: \(watch.stdout)")
        watch.kill(SIGINT)
        XCTAssertNotNil(watch.waitForExit(timeout: 5))
        struct Line: Decodable { var event: String; var id: UInt64; var time: UInt64; var state: String? }
        let lines = events.stdout.split(separator: "\n").compactMap { decode(Line.self, String($0)) }
        XCTAssertTrue(lines.contains { $0.event == "added" && $0.id == late.id }, events.stdout)
        XCTAssertTrue(lines.contains { $0.event == "completed" && $0.id == late.id && $0.state == "completed" }, events.stdout)
        XCTAssertFalse(events.stdout.contains("\\/"))
    }

    /// `events` and `watch` run until Ctrl-C: ferryd leaving the bus (as it does after a
    /// minute with nothing to do) does not end them; once it is back, they go on.
    func testEventsAndWatchOutliveFerrydLeavingTheBus() async throws {
        let s = try await session()
        // A transfer that runs all along: both commands show it at once, which tells
        // the test they have subscribed and read the state.
        serve("/slow.bin", size: 2_000_000)
        server.set(.slow(bytesPerSecond: 64 * 1024), on: "/slow.bin")
        let slow = try await s.download(server.url("/slow.bin"), options: ["destination": .string(work + "/slow.bin")])
        let events = try ChildProcess(executable: ferryPath, arguments: ["events"], environment: environment())
        let watch = try ChildProcess(executable: ferryPath, arguments: ["watch", "--json"], environment: environment())
        defer { for child in [events, watch] { child.kill(SIGKILL) } }
        try await waitUntilAsync("what the followers print") { events.stdout.contains("\(slow.id) ") }
        try await waitUntilAsync("what the followers print") { watch.stdout.contains("\"id\":\(slow.id)") }

        try await stopFerryd()
        try await waitUntilAsync("what the followers print") { events.stderr.contains("left the bus") && watch.stderr.contains("left the bus") }
        XCTAssertTrue(events.isRunning, "events goes on: \(events.stderr)")
        XCTAssertTrue(watch.isRunning, "watch goes on: \(watch.stderr)")

        try await startFerryd()
        serve("/after.bin", size: 2_000)
        let again = try await session()
        let after = try await again.download(server.url("/after.bin"), options: ["destination": .string(work + "/after.bin")])
        try await finish(after)
        try await waitUntilAsync("what the followers print") { events.stdout.contains("\(after.id) completed") }
        try await waitUntilAsync("what the followers print") { watch.stdout.contains("\"id\":\(after.id)") }
    }
}
