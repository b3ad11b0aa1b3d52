import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The `ferry` command, run as a user would, against the private bus.
final class CLITests: FerryTestCase {
    func transfer(_ id: String) -> FerryTransfer { client.transfer(id: UInt64(id) ?? 0) }

    func json(_ text: String) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8))
    }

    /// `ferry get URL -o FILE --wait` downloads the file and exits 0.
    func testGetWithWaitDownloadsTheFile() async throws {
        let body = serve("/cli.bin", size: 200_000)
        let dest = work + "/cli.bin"
        let r = try ferry(["get", server.url("/cli.bin"), "-o", dest, "--wait"])
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        assertFile(dest, equals: body)
        XCTAssertFalse(exists(dest + ".part"))
        XCTAssertFalse(r.stdout.contains("\u{1B}"), "no terminal escapes when piped: \(r.stdout.debugDescription)")
        let transfers = try await client.listTransfers()
        XCTAssertEqual(transfers.count, 1)
        let info = try await transfers[0].info()
        XCTAssertEqual(info.state, "completed")
        XCTAssertTrue(r.stdout.split(separator: "\n").first.map { $0 == "\(info.id)" } ?? false, "the id comes first: \(r.stdout)")
        // The CLI uses its own session, by default org.ferry.cli.
        let sessionPath = try await getProperty(info.path, BusClient.transferInterface, "Session")?.string ?? ""
        let identifier = try await getProperty(sessionPath, BusClient.sessionInterface, "Identifier")?.string
        XCTAssertEqual(identifier, "org.ferry.cli")
    }

    /// `ferry get URL` prints the new id and returns; `ls --json` and `show --json` report it.
    func testGetPrintsIdAndLsShowReportIt() async throws {
        serve("/later.bin", size: 1000)
        let r = try ferry(["get", server.url("/later.bin"), "-o", work + "/later.bin", "--paused"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let id = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertNotNil(UInt64(id), "one id on stdout: \(r.stdout.debugDescription)")
        let state = try await transfer(id).info().state
        XCTAssertEqual(state, "paused")

        let ls = try ferry(["ls", "--json"])
        XCTAssertEqual(ls.status, 0, ls.stderr)
        let list = json(ls.stdout) as? [[String: Any]]
        XCTAssertNotNil(list, "ls --json is a JSON array: \(ls.stdout)")
        let entry = list?.first { ($0["id"] as? NSNumber)?.stringValue == id }
        XCTAssertNotNil(entry, "ls --json lists transfer \(id)")
        XCTAssertEqual(entry?["state"] as? String, "paused")
        XCTAssertEqual(entry?["url"] as? String, server.url("/later.bin"))

        let show = try ferry(["show", id, "--json"])
        XCTAssertEqual(show.status, 0, show.stderr)
        let obj = json(show.stdout) as? [String: Any]
        XCTAssertEqual((obj?["id"] as? NSNumber)?.stringValue, id)
        XCTAssertEqual(obj?["destination"] as? String, work + "/later.bin")
        XCTAssertEqual(obj?["path"] as? String, BusClient.transferPathPrefix + id)

        let plain = try ferry(["ls"])
        XCTAssertEqual(plain.status, 0)
        XCTAssertTrue(plain.stdout.contains("later.bin"), plain.stdout)
        let human = try ferry(["show", id])
        XCTAssertEqual(human.status, 0)
        XCTAssertTrue(human.stdout.contains("paused"), human.stdout)
    }

    /// `ferry wait ID` exits 0 for a completed transfer and 1 for a failed one.
    /// Another client's description and file name, and a server's message, cannot
    /// drive the user's terminal: control characters and bidirectional overrides are
    /// shown as "?" by ls, show and the failure lines; --json keeps them, escaped.
    func testOtherClientsTextCannotDriveTheTerminal() async throws {
        serve("/t.bin", size: 10)
        let s = try await session()
        let evil = "\u{1b}]0;pwned\u{07}bill\u{202E}fdp.exe"
        let t = try await s.download(server.url("/t.bin"), options: [
            "destination": .string(work + "/x\u{1b}[2Jy.bin"), "description": .string(evil), "start": .boolean(false)])
        let forbidden: [Character] = ["\u{1b}", "\u{07}", "\u{202E}"]
        for args in [["ls"], ["ls", "--state", "paused"], ["show", String(t.id)]] {
            let r = try ferry(args)
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertFalse(r.stdout.contains { forbidden.contains($0) }, "\(args): \(r.stdout.debugDescription)")
            XCTAssertTrue(r.stdout.contains("x?[2Jy.bin"), "\(args): \(r.stdout)")
        }
        XCTAssertTrue(try ferry(["show", String(t.id)]).stdout.contains("?]0;pwned?bill?fdp.exe"))
        // A line break in a description cannot make a field of its own in `show`.
        let forged = try await s.download(server.url("/t.bin"), options: [
            "destination": .string(work + "/forged.bin"), "start": .boolean(false),
            "description": .string("harmless\n  State:        completed")])
        let shown = try ferry(["show", String(forged.id)]).stdout
        XCTAssertEqual(shown.components(separatedBy: "\n").filter { $0.hasPrefix("  State:") }.count, 1, shown)
        XCTAssertTrue(shown.contains("  Description:  harmless?  State:        completed\n"), shown)
        let json = try ferry(["show", "--json", String(t.id)])
        let decoded = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        XCTAssertEqual(decoded?["description"] as? String, evil, "JSON keeps the text as it is")
    }

    func testWaitExitStatus() async throws {
        serve("/w.bin", size: 5000)
        let s = try await session()
        let ok = try await s.download(server.url("/w.bin"), options: ["destination": .string(work + "/w.bin")])
        let bad = try await s.download(server.url("/absent"), options: ["destination": .string(work + "/absent")])
        let r1 = try ferry(["wait", "\(ok.id)"])
        XCTAssertEqual(r1.status, 0, r1.stderr)
        let r2 = try ferry(["wait", "\(bad.id)"])
        XCTAssertEqual(r2.status, 1, "a failed transfer: \(r2.stderr)")
        XCTAssertTrue(r2.stderr.contains("404"), r2.stderr)
        let r3 = try ferry(["wait", "\(ok.id)", "\(bad.id)"])
        XCTAssertEqual(r3.status, 1)

        // A paused transfer has not completed, and waiting on it would never end:
        // `wait` says so and exits 1 instead of hanging.
        serve("/held.bin", size: 5000)
        let held = try await s.download(server.url("/held.bin"), options: ["destination": .string(work + "/held.bin"),
                                                                          "start": .boolean(false)])
        let r4 = try ferry(["wait", "\(held.id)"], timeout: 10)
        XCTAssertEqual(r4.status, 1, "a paused transfer: \(r4.stderr)")
        XCTAssertTrue(r4.stderr.contains("paused"), r4.stderr)
    }

    /// pause / resume / cancel / rm change the state the bus reports.
    func testPauseResumeCancelRemove() async throws {
        serve("/ctl.bin", size: 300_000)
        server.set(.stallAfter(bytes: 10_000, times: 10), on: "/ctl.bin")
        let s = try await session()
        let t = try await s.download(server.url("/ctl.bin"), options: ["destination": .string(work + "/ctl.bin")])
        try await waitForState(t, "running")
        let id = "\(t.id)"

        var r = try ferry(["pause", id])
        XCTAssertEqual(r.status, 0, r.stderr)
        var state = try await t.info().state
        XCTAssertEqual(state, "paused")

        r = try ferry(["resume", id, id])
        XCTAssertEqual(r.status, 0, "an id given twice is acted on once: \(r.stderr)")
        XCTAssertEqual(r.stderr, "")
        state = try await t.info().state
        XCTAssertTrue(["queued", "running"].contains(state), state)

        r = try ferry(["cancel", id])
        XCTAssertEqual(r.status, 0, r.stderr)
        state = try await t.info().state
        XCTAssertEqual(state, "cancelled")
        XCTAssertFalse(exists(work + "/ctl.bin.part"))

        r = try ferry(["rm", id])
        XCTAssertEqual(r.status, 0, r.stderr)
        let listed = try await client.listTransfers().map(\.path)
        XCTAssertFalse(listed.contains(t.path), "rm forgets it")

        r = try ferry(["pause", "9999"])
        XCTAssertEqual(r.status, 2, "an unknown id is refused: \(r.stderr)")
        XCTAssertTrue(r.stderr.hasPrefix("ferry: "), r.stderr)
        XCTAssertTrue(r.stderr.contains("(NoSuchTransfer)"), "exit 2 names the error, as docs/cli.md says: \(r.stderr)")
    }

    /// What `rm` removes from the CLI's own session, the user has seen: its events are
    /// acknowledged (oldest first, as acknowledging drops every earlier one), so a
    /// script that gets without `--wait` and cleans up with `rm` does not pile up
    /// events until the session's cap refuses it.
    func testRemoveAcknowledgesTheEventsOfWhatItRemoved() async throws {
        serve("/rm1.bin", size: 1000)
        for name in ["rm1.bin", "rm-missing"] {
            let r = try ferry(["get", server.url("/" + name), "-o", work + "/" + name])
            XCTAssertEqual(r.status, 0, r.stderr)
        }
        let cli = try await session("org.ferry.cli")
        let transfers = try await cli.listTransfers()
        XCTAssertEqual(transfers.count, 2)
        for t in transfers { try await finish(t) }
        let (first, second) = (transfers[0], transfers[1])
        var pending = try await cli.pendingEvents().map(\.transferPath)
        XCTAssertEqual(pending, [first.path, second.path])

        // The newer one removed: the older one's event, still pending, holds it back.
        var r = try ferry(["rm", "\(second.id)"])
        XCTAssertEqual(r.status, 0, r.stderr)
        pending = try await cli.pendingEvents().map(\.transferPath)
        XCTAssertEqual(pending, [first.path, second.path])
        r = try ferry(["rm", "\(first.id)"])
        XCTAssertEqual(r.status, 0, r.stderr)
        pending = try await cli.pendingEvents().map(\.transferPath)
        XCTAssertEqual(pending, [], "both removed: both acknowledged")
    }

    /// An event of a transfer that has started another run since (a failed download
    /// resumed, then paused) is acknowledged by the next listing: that run ends with
    /// its own event. Before, it held back every later event of the CLI's session.
    func testAnEventOfAResumedTransferDoesNotHoldTheOthersBack() async throws {
        var r = try ferry(["get", server.url("/later.bin"), "-o", work + "/later.bin"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let cli = try await session("org.ferry.cli")
        let t = try await cli.listTransfers()[0]
        let first = try await finish(t)
        XCTAssertEqual(first.state, "failed")
        serve("/later.bin", size: 200_000)
        server.set(.stallAfter(bytes: 10_000, times: 10), on: "/later.bin")
        let mark = signals.all.count
        r = try ferry(["resume", "\(t.id)"])
        XCTAssertEqual(r.status, 0, r.stderr)
        try await waitForState(t, ["running"], since: mark)
        r = try ferry(["pause", "\(t.id)"])
        XCTAssertEqual(r.status, 0, r.stderr)
        serve("/ok.bin", size: 100)
        r = try ferry(["get", server.url("/ok.bin"), "-o", work + "/ok.bin", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        r = try ferry(["ls"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let pending = try await cli.pendingEvents().count
        XCTAssertEqual(pending, 0, "the failed run's event and the later one are both acknowledged")
    }

    /// `--all` acts on the named session's transfers; a session name that does not
    /// exist (a typo) is refused and creates nothing, and the CLI's own session, never
    /// used, has nothing to act on.
    func testAllActsOnTheNamedSessionAndATypoCreatesNone() async throws {
        serve("/all.bin", size: 2000)
        let s = try await session("org.example.Batch")
        let t = try await s.download(server.url("/all.bin"), options: ["destination": .string(work + "/all.bin"),
                                                                     "start": .boolean(false)])
        let before = try await client.listSessions().count

        let typo = try ferry(["resume", "--all", "--session", "org.example.Btach"])
        XCTAssertEqual(typo.status, 2, typo.stderr)
        XCTAssertEqual(typo.stderr, "ferry: no session named org.example.Btach (NoSuchSession)\n", "named as the service would name it")
        let rm = try ferry(["rm", "--all", "--session", "org.example.Btach"])
        XCTAssertEqual(rm.status, 2, rm.stderr)
        let own = try ferry(["cancel", "--all"])
        XCTAssertEqual(own.status, 0, own.stderr)
        let after = try await client.listSessions().count
        XCTAssertEqual(after, before, "no session made by a typo or by --all")
        var state = try await t.info().state
        XCTAssertEqual(state, "paused", "the other sessions' transfers untouched")

        let cancel = try ferry(["cancel", "--all", "--session", "org.example.Batch"])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        state = try await t.info().state
        XCTAssertEqual(state, "cancelled")
    }

    /// `-o FILE` saves to exactly FILE, as curl and wget do: a file already there is
    /// replaced (and keeps its old content until the download is whole), not left
    /// beside a new `rel (1).bin`; `-d DIR` still picks a free name.
    func testOutputFileIsReplacedNotRenamed() async throws {
        let body = serve("/rel.bin", size: 300_000)
        server.set(.slow(bytesPerSecond: 300 * 1024), on: "/rel.bin")
        let dest = work + "/rel.bin"
        let old = Data("the old file".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: dest, contents: old))
        let get = try ChildProcess(executable: ferryPath, arguments: ["get", server.url("/rel.bin"), "-o", dest, "--wait"],
                                   environment: environment())
        defer { get.kill(SIGKILL) }
        try await waitForFileSize(dest + ".part", atLeast: 1)
        XCTAssertEqual(FileManager.default.contents(atPath: dest), old, "the final name never holds a partial download")
        XCTAssertEqual(get.waitForExit(timeout: 20), 0, get.log)
        assertFile(dest, equals: body)
        XCTAssertFalse(exists(work + "/rel (1).bin"), "no second name: \((try? FileManager.default.contentsOfDirectory(atPath: work)) ?? [])")
        XCTAssertTrue(get.stdout.hasSuffix(" completed \(dest)\n"), get.stdout)

        // Into a folder, nothing is replaced: the download takes a free name.
        let into = try ferry(["get", server.url("/rel.bin"), "-d", work, "--wait"])
        XCTAssertEqual(into.status, 0, into.stderr)
        assertFile(work + "/rel (1).bin", equals: body)
        assertFile(dest, equals: body)

        // A name another transfer is saving to stays that one's: get says where this one goes.
        let held = try ferry(["get", server.url("/rel.bin"), "-o", work + "/held.bin", "--paused"])
        XCTAssertEqual(held.status, 0, held.stderr)
        let second = try ferry(["get", server.url("/rel.bin"), "-o", work + "/held.bin", "--paused"])
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(second.stderr, "ferry: another transfer is saving to \(work!)/held.bin; this one saves to \(work!)/held (1).bin\n")
    }

    /// --retries, --timeout, --proxy and --no-notify apply to that run's transfers only:
    /// the next plain `get` has the session's settings (a 503 once is retried), and
    /// `sessions show` still says so. The run's transfer is in a session of its own that
    /// `ls --session`, `--all` and `wait` find as the CLI's.
    func testPerRunSettingsDoNotStick() async throws {
        serve("/held.bin", size: 1000)
        let first = try ferry(["get", server.url("/held.bin"), "-o", work + "/held.bin", "--retries", "0", "--timeout", "7",
                               "--no-notify", "--paused"])
        XCTAssertEqual(first.status, 0, first.stderr)
        let heldID = try XCTUnwrap(UInt64(first.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), first.stdout)

        let body = serve("/flaky.bin", size: 5000)
        server.set(.failFirst(1, status: 503), on: "/flaky.bin")
        let plain = try ferry(["get", server.url("/flaky.bin"), "-o", work + "/flaky.bin", "--wait"])
        XCTAssertEqual(plain.status, 0, "the session's retries, not the earlier run's 0: \(plain.stderr)")
        assertFile(work + "/flaky.bin", equals: body)
        let show = try ferry(["sessions", "show"])
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("    retries: 5\n"), show.stdout)
        XCTAssertTrue(show.stdout.contains("    notify: true\n"), show.stdout)
        XCTAssertTrue(show.stdout.contains("    request-timeout: 60\n"), show.stdout)

        // The run's transfer had its settings, in a session of its own.
        let sessionPath = try await getProperty(BusClient.transferPathPrefix + String(heldID), BusClient.transferInterface, "Session")?.string ?? ""
        let identifier = try await getProperty(sessionPath, BusClient.sessionInterface, "Identifier")?.string ?? ""
        XCTAssertTrue(identifier.hasPrefix("org.ferry.cli.settings-"), identifier)
        let own = try ferry(["sessions", "show", identifier])
        XCTAssertTrue(own.stdout.contains("    retries: 0\n") && own.stdout.contains("    request-timeout: 7\n"), own.stdout)
        // The same settings again: the same session, not one more.
        let again = try ferry(["get", server.url("/held.bin"), "-o", work + "/held2.bin", "--timeout", "7", "--retries", "0",
                               "--no-notify", "--paused"])
        XCTAssertEqual(again.status, 0, again.stderr)
        let sessions = try ferry(["sessions"]).stdout.split(separator: "\n").filter { $0.hasPrefix("org.ferry.cli") }
        XCTAssertEqual(sessions.count, 2, "org.ferry.cli and one settings session: \(sessions)")

        let ls = try ferry(["ls", "--json", "--session", "org.ferry.cli"])
        let ids = (json(ls.stdout) as? [[String: Any]])?.compactMap { ($0["id"] as? NSNumber)?.uint64Value } ?? []
        XCTAssertTrue(ids.contains(heldID), "ls --session org.ferry.cli lists the run's transfer: \(ls.stdout)")
        let resume = try ferry(["resume", "--all"])
        XCTAssertEqual(resume.status, 0, resume.stderr)
        XCTAssertEqual(resume.stdout, "2 resumed\n")
        let wait = try ferry(["wait", String(heldID)])
        XCTAssertEqual(wait.status, 0, wait.stderr)
    }

    /// `-T FILE URL/` uploads to URL/FILE (its name URL-encoded), as curl does; a URL
    /// naming a file is used as it is.
    func testUploadToAFolderURLAppendsTheFileName() async throws {
        let name = "my notes+1.txt"
        XCTAssertTrue(FileManager.default.createFile(atPath: work + "/" + name, contents: Data("hello".utf8)))
        server.set(.acceptUploads(), on: "/up/my%20notes%2B1.txt")
        let r = try ferry(["-T", work + "/" + name, server.url("/up/"), "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(server.requests(for: "/up/my%20notes%2B1.txt").map(\.method), ["PUT"])
        XCTAssertEqual(server.requests(for: "/up/").count, 0)

        server.set(.acceptUploads(), on: "/up/named.txt")
        let named = try ferry(["put", work + "/" + name, server.url("/up/named.txt"), "--wait"])
        XCTAssertEqual(named.status, 0, named.stderr)
        XCTAssertEqual(server.requests(for: "/up/named.txt").map(\.method), ["PUT"])
    }

    /// The --all commands act on what they apply to and say how many: `resume --all`
    /// resumes paused transfers, not old failures (`--failed` adds them); `cancel --all`
    /// leaves failed and completed ones as they ended; each prints "N VERBED".
    func testAllCommandsChangeOnlyWhatTheyApplyToAndSayHowMany() async throws {
        let cli = try await session("org.ferry.cli")
        let failed = try await cli.download(server.url("/gone.bin"), options: ["destination": .string(work + "/gone.bin")])
        try await finish(failed)
        serve("/done.bin", size: 1000)
        let completed = try await cli.download(server.url("/done.bin"), options: ["destination": .string(work + "/done.bin")])
        try await finish(completed)
        serve("/held.bin", size: 300_000)
        server.set(.stallAfter(bytes: 10_000, times: 10), on: "/held.bin")
        let held = try await cli.download(server.url("/held.bin"), options: ["destination": .string(work + "/held.bin"),
                                                                          "start": .boolean(false)])
        let failedError = try await failed.info().errorMessage

        var r = try ferry(["resume", "--all"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "1 resumed\n")
        var info = try await failed.info()
        XCTAssertEqual(info.state, "failed", "an old failure is not retried by resume --all")
        try await waitForState(held, "running")

        r = try ferry(["cancel", "--all"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "1 cancelled\n")
        info = try await failed.info()
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorMessage, failedError, "its error stays")
        let done = try await completed.info().state
        XCTAssertEqual(done, "completed")
        let heldState = try await held.info().state
        XCTAssertEqual(heldState, "cancelled")

        r = try ferry(["pause", "--all"])
        XCTAssertEqual(r.stdout, "0 paused\n", r.stderr)
        let mark = signals.all.count
        r = try ferry(["resume", "--all", "--failed"])
        XCTAssertEqual(r.stdout, "1 resumed\n", r.stderr)
        try await waitForState(failed, ["failed"], since: mark)
        XCTAssertEqual(try ferry(["resume", "--failed", "1"]).status, 64, "--failed goes with --all")
        r = try ferry(["-q", "rm", "--all"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "", "-q: nothing")
        let left = try await cli.listTransfers().count
        XCTAssertEqual(left, 0)
    }

    /// An invalid URL: one clear `ferry: …` line on stderr, exit 2, nothing queued.
    func testInvalidUrlIsOneClearError() async throws {
        let r = try ferry(["get", "not a url"])
        XCTAssertEqual(r.status, 2, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        let lines = r.stderr.split(separator: "\n", omittingEmptySubsequences: true)
        XCTAssertEqual(lines.count, 1, "one line: \(r.stderr.debugDescription)")
        XCTAssertTrue(lines.first?.hasPrefix("ferry: ") ?? false, r.stderr)
        XCTAssertTrue(r.stderr.contains("not a url") || r.stderr.lowercased().contains("url"), r.stderr)
        XCTAssertEqual(r.stdout, "")
        let transfers = try await client.listTransfers()
        XCTAssertEqual(transfers.count, 0)

        let ftp = try ferry(["get", "ftp://example.com/x"])
        XCTAssertEqual(ftp.status, 2)
        XCTAssertTrue(ftp.stderr.hasPrefix("ferry: "), ftp.stderr)
    }

    /// `ferry watch ID` with stdout piped prints plain lines and exits 0 when done.
    func testWatchPipedPrintsPlainLines() async throws {
        let body = serve("/watch.bin", size: 400 * 1024)
        server.set(.slow(bytesPerSecond: 512 * 1024), on: "/watch.bin")
        let s = try await session()
        let dest = work + "/watch.bin"
        let t = try await s.download(server.url("/watch.bin"), options: ["destination": .string(dest)])
        let r = try ferry(["watch", "\(t.id)", "--until-done"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(r.stdout.contains("\u{1B}"), "no escapes: \(r.stdout.debugDescription)")
        XCTAssertFalse(r.stdout.contains("\r"), "no carriage returns: \(r.stdout.debugDescription)")
        let lines = r.stdout.split(separator: "\n")
        XCTAssertGreaterThanOrEqual(lines.count, 1)
        XCTAssertTrue(lines.last?.hasPrefix("\(t.id) completed") ?? false, "last line: \(lines.last ?? "")")
        assertFile(dest, equals: body)
    }

    /// `ferry watch` follows a private session's transfer (`private-signals`: its
    /// signals are sent only to its clients and watchers): it asks ferryd to watch.
    func testWatchFollowsAPrivateSession() async throws {
        let body = serve("/quiet.bin", size: 400 * 1024)
        server.set(.slow(bytesPerSecond: 160 * 1024), on: "/quiet.bin")
        let s = try await session("com.example.Quiet", ["private-signals": .boolean(true)])
        let dest = work + "/quiet.bin"
        let t = try await s.download(server.url("/quiet.bin"), options: ["destination": .string(dest)])
        let r = try ferry(["watch", "\(t.id)", "--until-done"], timeout: 20)
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = r.stdout.split(separator: "\n")
        XCTAssertTrue(lines.last?.hasPrefix("\(t.id) completed") ?? false, "last line: \(lines.last ?? "")")
        assertFile(dest, equals: body)
    }

    /// With no ferryd and no activation file, `ferry ls` exits 3 and says so.
    func testNoServiceExits3() async throws {
        try await stopFerryd()
        let r = try ferry(["ls"])
        XCTAssertEqual(r.status, 3, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        XCTAssertTrue(r.stderr.hasPrefix("ferry: "), r.stderr)
        XCTAssertTrue(r.stderr.contains("not running"), r.stderr)
        XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
    }

    /// With an activation file on the bus, `ferry ls` starts ferryd by D-Bus activation.
    func testActivationStartsTheDaemon() async throws {
        let services = home + "/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        let wrapper = home + "/ferryd-activated.sh"
        let pidFile = home + "/activated.pid"
        let logFile = home + "/activated.log"
        // A state folder of its own: the test's ferryd, on the other bus, uses the
        // usual one (and one ferryd uses a state folder at a time).
        var env = environment()
        env["XDG_STATE_HOME"] = home + "/activated-state"
        var script = "#!/bin/sh\n"
        for key in ["HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_DOWNLOAD_DIR"] {
            script += "export \(key)='\(env[key]!)'\n"
        }
        script += "export NO_PROXY='*' no_proxy='*'\n"
        script += "export DBUS_SESSION_BUS_ADDRESS=\"${DBUS_SESSION_BUS_ADDRESS:-$DBUS_STARTER_ADDRESS}\"\n"
        script += "echo $$ > '\(pidFile)'\n"
        script += "exec '\(ferrydPath!)' --verbose --no-idle-exit 2>>'\(logFile)'\n"
        try script.write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        try "[D-BUS Service]\nName=org.ferry.Ferry1\nExec=\(wrapper)\n".write(toFile: services + "/org.ferry.Ferry1.service", atomically: true, encoding: .utf8)

        let activationBus = try PrivateBus(serviceDirectory: services)
        extraLogs.append { "--- activated ferryd log:\n" + ((try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "") + "\n--- activation bus:\n" + activationBus.log }
        let r = try ferry(["ls"], extraEnv: ["DBUS_SESSION_BUS_ADDRESS": activationBus.address])
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        XCTAssertEqual(r.stdout, "", "an empty listing prints no line a script would read")
        XCTAssertTrue(r.stderr.contains("No transfers"), r.stderr)

        // It is really there now, and serving.
        let other = try BusClient(address: activationBus.address)
        let owned = try await other.bus.nameHasOwner(BusClient.busName)
        XCTAssertTrue(owned)
        let s = try await other.openSession("com.example.Activated")
        XCTAssertTrue(s.path.hasPrefix("/org/ferry/Ferry1/session/"))
        other.close()

        // Stopping the bus stops the daemon it started.
        activationBus.stop()
        let pid = Int32((try? String(contentsOfFile: pidFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0
        XCTAssertGreaterThan(pid, 0, "the wrapper recorded its pid")
        if pid > 0 {
            let gone = waitUntil(timeout: 10) { kill(pid, 0) != 0 }
            XCTAssertTrue(gone, "the activated ferryd exits when its bus goes away")
            if !gone { kill(pid, SIGKILL) }
        }
    }
}
