import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The `ferry` CLI as scripts use it: stdout/stderr, exit codes, `-d`, `-i`,
/// `--json` schemas, the progress display piped and in a terminal, `watch`.
final class CLIScriptingTests: FerryTestCase {
    /// `ls --json`'s schema, decoded strictly (a missing or mistyped field fails).
    struct TransferRow: Decodable {
        var id: UInt64
        var path: String
        var session: String
        var kind: String
        var url: String
        var description: String
        var destination: String
        var state: String
        var waiting_reason: String
        var bytes_transferred: Int64
        var bytes_expected: Int64
        var rate: UInt64
        var expected_end: UInt64
        var error_name: String
        var error_message: String
        var http_status: UInt32
        var attempts: UInt32
        var resumable: Bool
        var sha256: String
        var created: UInt64
        var started: UInt64
        var completed: UInt64
        var priority: Int32
        var speed_limit: UInt64
        var next_attempt: UInt64
        var single_connection_reason: String
        var connection_limit_reason: String
    }

    func decode<T: Decodable>(_ type: T.Type, _ text: String, file: StaticString = #filePath, line: UInt = #line) -> T? {
        do {
            return try JSONDecoder().decode(T.self, from: Data(text.utf8))
        } catch {
            XCTFail("not the documented schema: \(error)\n\(text)", file: file, line: line)
            return nil
        }
    }

    func cliSessionPending() async throws -> [CompletionEvent] {
        try await client.openSession("org.ferry.cli").pendingEvents()
    }

    /// `-d` names a folder that does not exist yet: it is made (as `wget -P` does),
    /// and the file lands inside it under its own name; a path under a file is refused.
    func testDirectoryIsMadeWhenMissing() async throws {
        let body = serve("/files/report.pdf", size: 30_000)
        let dir = work + "/new/sub"
        let r = try ferry(["get", server.url("/files/report.pdf"), "-d", dir + "/", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        assertFile(dir + "/report.pdf", equals: body)
        XCTAssertFalse(r.stderr.contains("ferry:"), "no error when all went well (stderr has only the progress): \(r.stderr)")

        _ = FileManager.default.createFile(atPath: work + "/plain", contents: Data("x".utf8))
        let bad = try ferry(["get", server.url("/files/report.pdf"), "-d", work + "/plain/inner"])
        XCTAssertEqual(bad.status, 2, bad.stdout)
        XCTAssertTrue(bad.stderr.contains("cannot make the directory"), bad.stderr)
        XCTAssertTrue(bad.stderr.contains("Not a directory") && !bad.stderr.contains("Domain="), "in words: \(bad.stderr)")
        XCTAssertEqual(bad.stdout, "")
        // An empty name (an unset variable in a script) is not "here".
        for args in [["-o", ""], ["-d", ""], ["-i", ""]] {
            let empty = try ferry(["get", server.url("/files/report.pdf")] + args)
            XCTAssertEqual(empty.status, 64, "\(args): \(empty.stderr)")
            XCTAssertTrue(empty.stderr.contains("empty"), empty.stderr)
        }
        // curl's `-o -` means standard output; ferry says it cannot, rather than save a
        // file named "-" in the current folder.
        let dash = try ferry(["get", server.url("/files/report.pdf"), "-o", "-", "--wait"])
        XCTAssertEqual(dash.status, 64, dash.stderr)
        XCTAssertTrue(dash.stderr.contains("standard output"), dash.stderr)
        XCTAssertEqual(dash.stdout, "")
        let count = try await client.listTransfers().count
        XCTAssertEqual(count, 1, "a refused get queues nothing")
    }

    /// A failed download: the id on stdout, the failure on stderr, exit 1; `-q`
    /// prints nothing on stdout; the CLI acknowledges the events it has shown.
    func testFailuresGoToStderrAndQuietIsQuiet() async throws {
        let r = try ferry(["get", server.url("/absent.bin"), "-o", work + "/absent.bin", "--wait"])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("404"), "the failure on stderr: \(r.stderr)")
        XCTAssertFalse(r.stdout.contains("404"), "not on stdout: \(r.stdout)")
        XCTAssertFalse(r.stdout.contains("failed"), r.stdout)

        serve("/q.bin", size: 20_000)
        let q = try ferry(["get", "-q", server.url("/q.bin"), "-o", work + "/q.bin", "--wait"])
        XCTAssertEqual(q.status, 0, q.stderr)
        XCTAssertEqual(q.stdout, "", "quiet")
        XCTAssertTrue(exists(work + "/q.bin"))
        let pending = try await cliSessionPending()
        XCTAssertEqual(pending.count, 0, "shown events are acknowledged: \(pending.map(\.kind))")
    }

    /// The CLI acknowledges the events of its session from the oldest up to the first
    /// of a transfer it did not show that still exists (a script may still ask for
    /// that one); events of transfers that are gone do not hold the rest back.
    func testEventsOfTransfersNotShownStayPendingUntilTheyAreGone() async throws {
        serve("/one.bin", size: 4_000)
        serve("/two.bin", size: 5_000)
        serve("/three.bin", size: 6_000)
        // Made in the CLI's session by another client: the CLI never shows it.
        let session = try await client.openSession("org.ferry.cli")
        let one = try await session.download(server.url("/one.bin"), options: ["destination": .string(work + "/one.bin")])
        try await finish(one)

        let two = try ferry(["get", server.url("/two.bin"), "-o", work + "/two.bin", "--wait"])
        XCTAssertEqual(two.status, 0, two.stderr)
        // A piped `get` prints the ids first, a line each.
        let twoPath = BusClient.transferPathPrefix + (two.stdout.split(separator: "\n").first.map(String.init) ?? "?")
        var pending = try await cliSessionPending()
        XCTAssertEqual(pending.map(\.transferPath), [one.path, twoPath],
                       "the oldest event is of a transfer the CLI did not show and that exists: nothing acknowledged")

        let removed = try ferry(["rm", String(BusClient.transferID(one.path))])
        XCTAssertEqual(removed.status, 0, removed.stderr)
        let three = try ferry(["get", server.url("/three.bin"), "-o", work + "/three.bin", "--wait"])
        XCTAssertEqual(three.status, 0, three.stderr)
        let threePath = BusClient.transferPathPrefix + (three.stdout.split(separator: "\n").first.map(String.init) ?? "?")
        pending = try await cliSessionPending()
        XCTAssertEqual(pending.map(\.transferPath), [twoPath, threePath],
                       "the gone transfer's event acknowledged; two.bin's (not shown by this get, still there) stops the run")
    }

    /// The synopsis in docs/cli.md: global options before the subcommand.
    func testGlobalOptionsBeforeTheSubcommand() async throws {
        serve("/g.bin", size: 5_000)
        let r = try ferry(["--session", "org.example.Script", "get", server.url("/g.bin"), "-o", work + "/g.bin", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let ls = try ferry(["ls", "--json", "--session", "org.example.Script"])
        let rows = decode([TransferRow].self, ls.stdout) ?? []
        XCTAssertEqual(rows.map(\.session), ["org.example.Script"])
        let other = try ferry(["ls", "--json", "--session", "org.ferry.cli"])
        XCTAssertEqual(decode([TransferRow].self, other.stdout)?.count, 0, "--session filters")
        // A session that does not exist (a typo) lists nothing, and says so on stderr.
        let typo = try ferry(["ls", "--session", "org.example.Scirpt"])
        XCTAssertEqual(typo.status, 0, typo.stderr)
        XCTAssertEqual(typo.stdout, "")
        XCTAssertTrue(typo.stderr.contains("No session 'org.example.Scirpt'"), typo.stderr)
        let typoJSON = try ferry(["ls", "--json", "--session", "org.example.Scirpt"])
        XCTAssertEqual(decode([TransferRow].self, typoJSON.stdout)?.count, 0, typoJSON.stdout)
        XCTAssertTrue(typoJSON.stderr.contains("No session"), typoJSON.stderr)
        XCTAssertEqual(try ferry(["-q", "ls", "--session", "org.example.Scirpt"]).stderr, "", "-q keeps it quiet")
        // Before a command with subcommands of its own (they landed between the two).
        let set = try ferry(["-q", "config", "set", "max-concurrent", "5"])
        XCTAssertEqual(set.status, 0, set.stderr)
        let get = try ferry(["--address", bus.address, "config", "get", "max-concurrent"])
        XCTAssertEqual(get.stdout, "5\n", get.stderr)
        let show = try ferry(["--session", "org.example.Script", "sessions", "show", "org.example.Script"])
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("org.example.Script"), show.stdout)
        // A `--` still ends the options: what follows it is a URL, even when it looks like one.
        let dashed = try ferry(["-q", "get", "--paused", "--", "-not-a-url"])
        XCTAssertNotEqual(dashed.status, 0)
        XCTAssertFalse(dashed.stderr.contains("Unexpected argument '-q'"), dashed.stderr)
    }

    /// `-i FILE` with a SHA-256 per line and `-i -` from stdin; a wrong sum fails that file.
    func testInputListWithChecksums() async throws {
        let a = serve("/list/a.bin", size: 10_000, seed: 1)
        serve("/list/b.bin", size: 10_000, seed: 2)
        let list = """
            # two files
            \(server.url("/list/a.bin")) \(TestData.sha256Hex(a))

            \(String(repeating: "0", count: 64))  \(server.url("/list/b.bin"))
            """
        try list.write(toFile: work + "/urls.txt", atomically: true, encoding: .utf8)
        let r = try ferry(["get", "-i", work + "/urls.txt", "-d", work + "/out", "--wait"])
        XCTAssertEqual(r.status, 1, "one checksum is wrong: \(r.stderr)")
        assertFile(work + "/out/a.bin", equals: a)
        XCTAssertFalse(exists(work + "/out/b.bin"), "an unverified file never gets its final name")
        XCTAssertTrue(r.stderr.contains("b.bin"), r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").filter { UInt64($0) != nil }.count, 2, "two ids: \(r.stdout)")

        let c = serve("/list/c.bin", size: 4_000, seed: 3)
        let piped = try runTool("/bin/sh", ["-c", "printf '%s\\n' \"$1\" | \"$2\" get -i - -d \"$3\" --wait", "sh",
                                           server.url("/list/c.bin"), ferryPath, work + "/stdin"], environment: environment())
        XCTAssertEqual(piped.status, 0, piped.stderr)
        assertFile(work + "/stdin/c.bin", equals: c)
        // A list that is a pipe by name (a FIFO, or bash's `<(…)`), read to its end.
        let fifo = work + "/urls.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let fromFIFO = try runTool("/bin/sh", ["-c", "printf '%s\n' \"$1\" > \"$4\" & exec \"$2\" get -i \"$4\" -d \"$3\" --wait", "sh",
                                             server.url("/list/c.bin"), ferryPath, work + "/fifo", fifo], environment: environment())
        XCTAssertEqual(fromFIFO.status, 0, fromFIFO.stderr)
        assertFile(work + "/fifo/c.bin", equals: c)
        let noList = try ferry(["get", "-i", work + "/no-such-list"])
        XCTAssertEqual(noList.status, 64)
        XCTAssertEqual(noList.stderr, "ferry: cannot read \(work!)/no-such-list: No such file or directory\n", "with the reason")

        try "\(TestData.sha256Hex(c))  c.bin\n".write(toFile: work + "/SHA256SUMS", atomically: true, encoding: .utf8)
        let sums = try ferry(["get", server.url("/list/c.bin"), "--sha256-file", work + "/SHA256SUMS", "-o", work + "/c2.bin", "--json"])
        XCTAssertEqual(sums.status, 0, sums.stderr)
        let rows = decode([TransferRow].self, sums.stdout)
        XCTAssertEqual(rows?.count, 1)
        let missing = try ferry(["get", server.url("/list/a.bin"), "--sha256-file", work + "/SHA256SUMS"])
        XCTAssertEqual(missing.status, 64, "no sum for a.bin: \(missing.stderr)")
    }

    /// What a script may hand over by mistake: a time past any calendar, a header
    /// without a name (refused, exit 64, nothing queued), a list written on Windows
    /// (CRLF line ends: read line by line as any other).
    func testOddArgumentsAreRefusedOrReadAsMeant() async throws {
        let a = serve("/crlf/a.bin", size: 3_000, seed: 4)
        let b = serve("/crlf/b.bin", size: 3_000, seed: 5)
        for time in ["+1e400", "@1e30", "+999999999999d"] {
            let r = try ferry(["get", server.url("/crlf/a.bin"), "--start-after", time])
            XCTAssertEqual(r.status, 64, "\(time): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("--start-after"), r.stderr)
        }
        let nameless = try ferry(["get", server.url("/crlf/a.bin"), "-H", ": v"])
        XCTAssertEqual(nameless.status, 64, nameless.stderr)
        XCTAssertTrue(nameless.stderr.contains("no name"), nameless.stderr)
        XCTAssertEqual(try ferry(["put", server.url("/up"), work + "/nothing", "-H", " : v"]).status, 64)
        // A transfer id that is no number is a usage error naming it, whatever the command.
        for command in [["show", "abc"], ["pause", "3", "x7"], ["wait", "abc"], ["watch", "abc"]] {
            let r = try ferry(command)
            XCTAssertEqual(r.status, 64, "\(command): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("'\(command.last!)' is not a transfer id"), r.stderr)
            XCTAssertTrue(r.stderr.contains("Usage: ferry \(command[0]) "), "the command's own usage: \(r.stderr)")
        }
        // A folder name in another encoding than UTF-8 (byte 0xFF): refused, not bent.
        let latin1 = try runTool("/bin/sh", ["-c", "exec \"$0\" get \"$1\" -d \"$2/pre$(printf '\\377')\"", ferryPath,
                                            server.url("/crlf/a.bin"), work], environment: environment())
        XCTAssertEqual(latin1.status, 64, latin1.stderr)
        XCTAssertTrue(latin1.stderr.contains("not UTF-8"), latin1.stderr)
        XCTAssertFalse((try FileManager.default.contentsOfDirectory(atPath: work)).contains { $0.hasPrefix("pre") })
        let ls = try ferry(["ls", "--json"])
        XCTAssertEqual(decode([TransferRow].self, ls.stdout)?.count, 0, "nothing queued: \(ls.stdout)")

        let list = "\(server.url("/crlf/a.bin"))\r\n# b\r\n\(server.url("/crlf/b.bin")) \(TestData.sha256Hex(b))\r\n"
        try list.write(toFile: work + "/windows.txt", atomically: true, encoding: .utf8)
        let r = try ferry(["get", "-i", work + "/windows.txt", "-d", work + "/crlf", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        assertFile(work + "/crlf/a.bin", equals: a)
        assertFile(work + "/crlf/b.bin", equals: b)
        // A quoted ~ (the shell left it) is $HOME's, as the shell would have made it.
        let tilde = try ferry(["get", server.url("/crlf/a.bin"), "-o", "~/tilde.bin", "--wait"])
        XCTAssertEqual(tilde.status, 0, tilde.stderr)
        assertFile(try XCTUnwrap(environment()["HOME"]) + "/tilde.bin", equals: a)
        try "\(TestData.sha256Hex(a))  a.bin\r\n".write(toFile: work + "/SUMS", atomically: true, encoding: .utf8)
        let sums = try ferry(["get", server.url("/crlf/a.bin"), "--sha256-file", work + "/SUMS", "-o", work + "/a2.bin", "--wait"])
        XCTAssertEqual(sums.status, 0, sums.stderr)
        assertFile(work + "/a2.bin", equals: a)
    }

    /// Options reach the service: limit-rate, priority, description, start-after, paused.
    func testGetOptionsReachTheService() async throws {
        serve("/opt.bin", size: 1000)
        let r = try ferry(["get", server.url("/opt.bin"), "-o", work + "/opt.bin", "--limit-rate", "100k", "--priority", "high",
                           "--description", "nightly build", "--start-after", "+1h", "-x", "2", "--json"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(r.stdout.contains("\\/"), "no escaped slashes: \(r.stdout)")
        guard let row = decode([TransferRow].self, r.stdout)?.first else { return }
        XCTAssertEqual(row.speed_limit, 100 * 1024)
        XCTAssertEqual(row.priority, 1)
        XCTAssertEqual(row.description, "nightly build")
        XCTAssertEqual(row.url, server.url("/opt.bin"))
        let info = try await client.transfer(id: row.id).info()
        XCTAssertEqual(info.state, "waiting", "start-after keeps it waiting")
        XCTAssertEqual(info.waitingReason, "start-after")

        let usage = try ferry(["get", server.url("/opt.bin"), "--priority", "urgent"])
        XCTAssertEqual(usage.status, 64, usage.stderr)
        let usage2 = try ferry(["get", server.url("/opt.bin"), "-x", "17"])
        XCTAssertEqual(usage2.status, 64, usage2.stderr)
    }

    /// `ls --state`, `wait --json`, `sessions`, `config`.
    func testListingsAndSettings() async throws {
        serve("/s1.bin", size: 2000)
        let s = try await session("org.example.Other")
        let done = try await s.download(server.url("/s1.bin"), options: ["destination": .string(work + "/s1.bin")])
        try await finish(done)
        let held = try await s.download(server.url("/s1.bin"), options: ["destination": .string(work + "/s1b.bin"), "start": .boolean(false)])

        let paused = try ferry(["ls", "--json", "--state", "paused"])
        XCTAssertEqual(decode([TransferRow].self, paused.stdout)?.map(\.id), [held.id])
        let table = try ferry(["ls", "--state", "completed,paused"])
        XCTAssertTrue(table.stdout.contains("s1.bin") && table.stdout.contains("s1b.bin"), table.stdout)
        XCTAssertEqual(try ferry(["ls", "--state", "sleeping"]).status, 64)

        let w = try ferry(["wait", "\(done.id)", "--json"])
        XCTAssertEqual(w.status, 0, w.stderr)
        XCTAssertEqual(decode([TransferRow].self, w.stdout)?.first?.state, "completed")

        struct SessionRow: Decodable {
            var identifier: String
            var path: String
            var active_transfers: UInt32
            var transfers: Int
            struct Configuration: Decodable { var persistent: Bool?; var retries: UInt32?; var on_client_exit: String? }
            var configuration: Configuration
        }
        let sessions = try ferry(["sessions", "--json"])
        XCTAssertEqual(sessions.status, 0, sessions.stderr)
        let rows = decode([SessionRow].self, sessions.stdout) ?? []
        XCTAssertEqual(rows.first { $0.identifier == "org.example.Other" }?.transfers, 2)
        XCTAssertEqual(rows.first { $0.identifier == "org.example.Other" }?.configuration.on_client_exit, "continue")
        let show = try ferry(["sessions", "show", "org.example.Other"])
        XCTAssertTrue(show.stdout.contains("Pending events:   1"), show.stdout)
        XCTAssertTrue(show.stdout.contains("    max-connections-per-host: 6\n"), "values as people read them: \(show.stdout)")
        XCTAssertFalse(show.stdout.contains("uint32"), show.stdout)
        XCTAssertEqual(try ferry(["sessions", "close", "org.example.Other", "--cancel"]).status, 0)
        let after = try ferry(["sessions", "--json"])
        XCTAssertNil(decode([SessionRow].self, after.stdout)?.first { $0.identifier == "org.example.Other" })

        XCTAssertEqual(try ferry(["config", "set", "max-concurrent", "3"]).status, 0)
        XCTAssertEqual(try ferry(["config", "set", "speed-limit", "2M"]).status, 0)
        XCTAssertEqual(try ferry(["config", "set", "notifications", "off"]).status, 0)
        XCTAssertEqual(try ferry(["config", "set", "max-concurrent", "zero"]).status, 64)
        let under = try ferry(["config", "set", "speed-limit", "0.4"])
        XCTAssertEqual(under.status, 64, "under 1 byte/s is not \"no limit\"")
        XCTAssertTrue(under.stderr.contains("from 1 up"), under.stderr)
        let max = try await managerProperty("MaxConcurrentTransfers")?.uint32
        XCTAssertEqual(max, 3)
        struct Manager: Decodable {
            var max_concurrent: UInt32; var speed_limit: UInt64; var notifications: Bool; var version: String; var interface_version: String
        }
        let cfg = decode(Manager.self, try ferry(["config", "get", "--json"]).stdout)
        XCTAssertEqual(cfg?.interface_version, "1.2")
        XCTAssertEqual(cfg?.speed_limit, 2 * 1024 * 1024)
        XCTAssertEqual(cfg?.notifications, false)
        XCTAssertEqual(try ferry(["config", "get", "max-concurrent"]).stdout, "3\n")
        XCTAssertEqual(try ferry(["config", "get", "max-concurrent", "--json"]).stdout, "3\n", "one key: its value as JSON")
        XCTAssertEqual(try ferry(["config", "get", "notifications", "--json"]).stdout, "false\n")
    }

    /// A listing long enough to be encoded in slices (one per core) is one JSON document,
    /// every transfer once and in order, byte for byte what one encoder writes.
    func testLongJSONListingIsOneDocument() async throws {
        let count = 700
        let urls = (0..<count).map { server.url("/long/\($0).bin?from=a/b") }
        let r = try ferry(["get"] + urls + ["-d", work + "/long/", "--paused", "--description", "Ütf \"quoted\" a/b"], timeout: 120)
        XCTAssertEqual(r.status, 0, r.stderr)
        let ls = try ferry(["ls", "--json", "--session", "org.ferry.cli"], timeout: 60)
        XCTAssertEqual(ls.status, 0, ls.stderr)
        guard let rows = decode([TransferRow].self, ls.stdout) else { return }
        XCTAssertEqual(rows.count, count)
        XCTAssertEqual(rows.map(\.id), rows.map(\.id).sorted())
        XCTAssertEqual(Set(rows.map(\.url)), Set(urls))
        XCTAssertEqual(rows.last?.description, "Ütf \"quoted\" a/b")
        // The same rows written by one encoder in one piece, as the CLI writes short lists.
        struct Row: Codable {
            var id: UInt64, path: String, session: String, kind: String, url: String, description: String
            var destination: String, state: String, waiting_reason: String, bytes_transferred: Int64
            var bytes_expected: Int64, rate: UInt64, expected_end: UInt64, error_name: String
            var error_message: String, http_status: UInt32, attempts: UInt32, resumable: Bool
            var sha256: String, created: UInt64, started: UInt64, completed: UInt64
            var priority: Int32, speed_limit: UInt64, next_attempt: UInt64, single_connection_reason: String
            var connection_limit_reason: String
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
        let whole = try encoder.encode(try JSONDecoder().decode([Row].self, from: Data(ls.stdout.utf8)))
        XCTAssertEqual(String(decoding: whole, as: UTF8.self) + "\n", ls.stdout)
    }

    /// `get --wait` piped: stdout holds what a script captures (the id, then the
    /// final line with the file); the state and progress lines go to stderr, as curl's
    /// progress does.
    func testGetWaitKeepsProgressOffStandardOutput() async throws {
        serve("/cap.bin", size: 300_000)
        server.set(.slow(bytesPerSecond: 200 * 1024), on: "/cap.bin")
        let r = try ferry(["get", server.url("/cap.bin"), "-o", work + "/cap.bin", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 2, r.stdout)
        let id = lines.first ?? ""
        XCTAssertNotNil(UInt64(id), r.stdout)
        XCTAssertEqual(lines.last, "\(id) completed \(work!)/cap.bin")
        XCTAssertTrue(r.stderr.contains("\(id) running "), r.stderr)
        XCTAssertTrue(r.stderr.contains("\(id) 100% ") || r.stderr.contains("%"), "progress lines: \(r.stderr)")
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

    /// `ferry get URLS -d DIR --wait EXTRA` in a terminal of `columns` × `rows` (script(1)):
    /// its exit status and what the terminal showed, split into rows, escapes dropped.
    /// `stderr`: a file standard error goes to instead of the terminal.
    func getInTerminal(_ urls: [String], into dir: String, columns: Int = 80, rows: Int = 24,
                       extra: [String] = [], stderr: String? = nil) throws -> (status: Int32, rows: [String], raw: String) {
        guard let script = findExecutable("script") else { throw XCTSkip("no script(1)") }
        let args = (urls + [dir] + extra).map { "'\($0)'" }.joined(separator: " ")
        let n = urls.count
        let urlArgs = (1...n).map { "\"$\($0)\"" }.joined(separator: " ")
        let rest = extra.indices.map { "\"$\($0 + n + 2)\"" }.joined(separator: " ")
        let redirect = stderr.map { " 2>\($0)" } ?? ""
        let command = "stty cols \(columns) rows \(rows); exec \"$0\" get \(urlArgs) -d \"$\(n + 1)\" --wait \(rest)\(redirect)"
        let r = try runTool(script, ["-qfec", "sh -c '\(command)' \(ferryPath!) \(args)", "/dev/null"],
                            environment: environment(), timeout: 30)
        let plain = r.stdout.replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        return (r.status, plain.components(separatedBy: CharacterSet(charactersIn: "\r\n")).filter { !$0.isEmpty }, r.stdout + r.stderr)
    }

    /// `ferry ARGS` in a terminal (script(1)) of 200 columns: its exit status and rows.
    func ferryInTerminal(_ args: [String]) throws -> (status: Int32, rows: [String], raw: String) {
        guard let script = findExecutable("script") else { throw XCTSkip("no script(1)") }
        let quoted = args.map { "'\($0)'" }.joined(separator: " ")
        let r = try runTool(script, ["-qfec", "sh -c 'stty cols 200 rows 24; exec \"$0\" \"$@\"' \(ferryPath!) \(quoted)", "/dev/null"],
                            environment: environment(), timeout: 30)
        let plain = r.stdout.replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        return (r.status, plain.components(separatedBy: CharacterSet(charactersIn: "\r\n")).filter { !$0.isEmpty }, r.stdout + r.stderr)
    }

    /// In a terminal, `get` says what it queued and where it goes, and `get --wait` ends
    /// with the saved file's path (the display cuts names to fit); piped, the bare ids
    /// scripts read are unchanged.
    func testGetInATerminalSaysWhereTheFileGoes() async throws {
        let body = serve("/where/f3.bin", size: 20_000)
        let url = server.url("/where/f3.bin")
        let queued = try ferryInTerminal(["get", url, "-o", work + "/later.bin", "--paused"])
        XCTAssertEqual(queued.status, 0, queued.raw)
        let id = try XCTUnwrap(queued.rows.first?.split(separator: " ").first.flatMap { UInt64($0) }, queued.raw)
        XCTAssertEqual(queued.rows, ["\(id) paused: \(url) -> \(work!)/later.bin"])

        let (status, rows, raw) = try getInTerminal([url], into: work + "/tty")
        XCTAssertEqual(status, 0, raw)
        XCTAssertEqual(rows.last, "\(work!)/tty/f3.bin", "the last line names the saved file: \(rows)")
        assertFile(work + "/tty/f3.bin", equals: body)

        let piped = try ferry(["get", url, "-o", work + "/piped.bin", "--paused"])
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertNotNil(UInt64(piped.stdout.trimmingCharacters(in: .newlines)), "a bare id: \(piped.stdout)")
    }

    /// In an 80-column terminal the display fits: no line wider than 80, a total line, the final state.
    func testProgressInAnEightyColumnTerminal() async throws {
        let long = "/a-rather-long-file-name-that-would-not-fit-in-a-narrow-terminal-at-all-\(String(repeating: "x", count: 40)).bin"
        serve(long, size: 300_000)
        serve("/second.bin", size: 200_000)
        server.set(.slow(bytesPerSecond: 600 * 1024), on: long)
        let (status, rows, raw) = try getInTerminal([server.url(long), server.url("/second.bin")], into: work + "/tty")
        XCTAssertEqual(status, 0, raw)
        XCTAssertFalse(rows.isEmpty, raw.debugDescription)
        // (The saved paths after the display are results, in full.)
        for row in rows where !row.hasPrefix(work) { XCTAssertLessThanOrEqual(row.count, 80, "too wide: \(row)") }
        XCTAssertTrue(rows.contains { $0.hasPrefix("Total:") }, "a total line: \(rows)")
        XCTAssertTrue(rows.last { $0.hasPrefix("Total:") }?.contains("2 completed") ?? false, rows.suffix(4).joined(separator: "\n"))
    }

    /// Wide characters take two columns each: a name in Japanese is cut to the columns
    /// the terminal has, not to as many characters (the lines wrapped, and each redraw
    /// left the last frame's extra rows on the screen).
    func testProgressFitsWideCharactersInTheirColumns() async throws {
        let name = String(repeating: "日本語のファイル名", count: 6) + ".bin"
        let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        serve("/wide.bin", size: 300_000, contentDisposition: "attachment; filename*=UTF-8''\(encoded)")
        server.set(.slow(bytesPerSecond: 600 * 1024), on: "/wide.bin")
        let (status, rows, raw) = try getInTerminal([server.url("/wide.bin")], into: work + "/wide")
        XCTAssertEqual(status, 0, raw)
        func columns(_ s: String) -> Int { s.unicodeScalars.reduce(0) { $0 + ((0x3000...0x9FFF).contains($1.value) ? 2 : 1) } }
        XCTAssertTrue(rows.contains { $0.contains("日本語") }, "the name is shown: \(rows)")
        for row in rows where !row.hasPrefix("\(work!)") { XCTAssertLessThanOrEqual(columns(row), 80, "too wide: \(row)") }
    }

    /// Standard output on a terminal and standard error elsewhere (`2>log`): the results
    /// (the id, the final line) are on the terminal, the progress in the log. The ids
    /// were held back whenever stdout was a terminal, as when the display was drawn there.
    func testResultsOnATerminalWithProgressElsewhere() async throws {
        serve("/split.bin", size: 20_000)
        let log = work + "/progress.log"
        let (status, rows, raw) = try getInTerminal([server.url("/split.bin")], into: work + "/split", stderr: log)
        XCTAssertEqual(status, 0, raw)
        let id = try XCTUnwrap(rows.first.flatMap { UInt64($0) }, "the id first: \(rows)")
        XCTAssertEqual(rows.last, "\(id) completed \(work!)/split/split.bin")
        XCTAssertFalse(rows.contains { $0.contains("Total:") }, "no display on stdout: \(rows)")
        let progress = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(progress.contains("\(id) queued "), progress)
    }

    /// A terminal of 3 rows, or one that does not say its size: transfer lines are shown
    /// beside the total (the display once kept only "… and N more" and the total).
    func testProgressInATinyOrSizelessTerminalShowsTransfers() async throws {
        serve("/tiny/one.bin", size: 20_000)
        serve("/tiny/two.bin", size: 20_000)
        for height in [3, 0] {
            let (status, rows, raw) = try getInTerminal([server.url("/tiny/one.bin"), server.url("/tiny/two.bin")],
                                                        into: work + "/tiny", rows: height, extra: ["--overwrite"])
            XCTAssertEqual(status, 0, raw)
            // The last frame: the lines up to its total.
            let end = try XCTUnwrap(rows.lastIndex { $0.hasPrefix("Total:") }, "\(rows)")
            let last = rows[max(0, end - 2)..<end]
            XCTAssertTrue(last.contains { $0.contains("one.bin") || $0.contains("two.bin") }, "rows \(rows): a transfer line in \(last)")
        }
    }

    /// A resized terminal (SIGWINCH) gets frames that fit the new width.
    func testProgressRedrawsForTheNewWidthAfterAResize() async throws {
        guard let script = findExecutable("script") else { throw XCTSkip("no script(1)") }
        serve("/resize/a-long-enough-name-to-be-cut-when-the-terminal-narrows.bin", size: 900_000)
        server.set(.slow(bytesPerSecond: 400 * 1024), on: "/resize/a-long-enough-name-to-be-cut-when-the-terminal-narrows.bin")
        let typescript = work + "/typescript"
        // The shell waits until the display is up (in the typescript), narrows the
        // terminal (the kernel sends SIGWINCH), marks the spot, and waits for ferry.
        let inner = """
            stty cols 100 rows 20; "$0" get "$1" -d "$2" --wait & p=$!
            n=0; until grep -q "ET[A]" "$3" || [ $n -gt 400 ]; do sleep 0.02; n=$((n+1)); done
            stty cols 50; echo RESIZED; wait $p
            """
        let r = try runTool(script, ["-qfec", "sh -c '\(inner)' \(ferryPath!) \(server.url("/resize/a-long-enough-name-to-be-cut-when-the-terminal-narrows.bin")) \(work!)/rs \(typescript)",
                                    typescript], environment: environment(), timeout: 30)
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        let text = (try? String(contentsOfFile: typescript, encoding: .utf8)) ?? ""
        // (The typescript's header quotes the command: the mark is the echoed line.)
        guard let mark = text.range(of: "RESIZED\r\n", options: .backwards) else { return XCTFail("no resize mark: \(text.debugDescription)") }
        let before = text[..<mark.lowerBound].replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        XCTAssertTrue(before.components(separatedBy: CharacterSet(charactersIn: "\r\n")).contains { $0.count > 50 },
                      "wide lines before the resize")
        let after = String(text[mark.upperBound...]).replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        let rows = after.components(separatedBy: CharacterSet(charactersIn: "\r\n")).filter { !$0.isEmpty && !$0.hasPrefix("Script done") }
        XCTAssertTrue(rows.contains { $0.contains("done") }, "frames after the resize: \(rows)")
        for row in rows where !row.hasPrefix(work) { XCTAssertLessThanOrEqual(row.count, 50, "too wide after the resize: \(row)") }
    }

    /// `put`/`post`: argument errors are usage errors; a well-formed call reaches the service.
    func testUploadCommands() async throws {
        _ = FileManager.default.createFile(atPath: work + "/up.txt", contents: Data("hello".utf8))
        XCTAssertEqual(try ferry(["put", work + "/up.txt"]).status, 64)
        XCTAssertEqual(try ferry(["post", server.url("/form"), "-F", "name=value"]).status, 64, "no file field")
        XCTAssertEqual(try ferry(["post", server.url("/form"), "-F", "a=@x", "-F", "b=@y"]).status, 64, "two file fields")
        let missing = try ferry(["put", work + "/nope.txt", server.url("/up")])
        XCTAssertEqual(missing.status, 2)
        XCTAssertTrue(missing.stderr.contains("no such file"), missing.stderr)
        XCTAssertTrue(missing.stderr.contains("(FileNotFound)"), "exit 2 names the error, as docs/cli.md says: \(missing.stderr)")
        let folder = try ferry(["put", work, server.url("/up")])
        XCTAssertEqual(folder.status, 2)
        XCTAssertTrue(folder.stderr.contains("is a folder"), "a folder is not 'no such file': \(folder.stderr)")
        let swapped = try ferry(["put", server.url("/up"), work + "/up.txt"])
        XCTAssertTrue(swapped.stderr.contains("the file comes first"), swapped.stderr)

        for args in [["put", work + "/up.txt", server.url("/up")], ["-T", work + "/up.txt", server.url("/up")],
                     ["post", server.url("/form"), "-F", "file=@" + work + "/up.txt"]] {
            let r = try ferry(args)
            XCTAssertEqual(r.status, 0, "\(args): \(r.stderr)")
            let id = UInt64(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            let kind = try await client.transfer(id: id).info().kind
            XCTAssertEqual(kind, "upload", "\(args)")
        }
        // -H 'Content-Type: …' (as with curl -T) is the file's type; given twice, a usage error.
        server.set(.acceptUploads(), on: "/typed")
        let typed = try ferry(["put", work + "/up.txt", server.url("/typed"), "-H", "Content-Type: text/plain", "-H", "X-A: b", "--wait"])
        XCTAssertEqual(typed.status, 0, typed.stderr)
        let request = server.requests(for: "/typed").first
        XCTAssertEqual(request?.header("Content-Type"), "text/plain")
        XCTAssertEqual(request?.header("X-A"), "b")
        let twice = try ferry(["put", work + "/up.txt", server.url("/typed"), "-H", "content-type: a/b", "--content-type", "c/d"])
        XCTAssertEqual(twice.status, 64, twice.stderr)

        // The server's answer: in --json and in show (one line, its controls made harmless).
        server.set(.acceptUploads(status: 201, body: Array("{\"id\": 7,\n \"note\": \"\u{1B}]0;x\u{07}\"}".utf8)), on: "/answer")
        let answered = try ferry(["put", work + "/up.txt", server.url("/answer"), "--wait", "--json"])
        XCTAssertEqual(answered.status, 0, answered.stderr)
        let objects = try JSONSerialization.jsonObject(with: Data(answered.stdout.utf8)) as? [[String: Any]]
        XCTAssertEqual(objects?.first?["response"] as? String, "{\"id\": 7,\n \"note\": \"\u{1B}]0;x\u{07}\"}", "exact in JSON")
        let id = try XCTUnwrap(objects?.first?["id"] as? Int)
        let shown = try ferry(["show", String(id)])
        XCTAssertEqual(shown.status, 0, shown.stderr)
        XCTAssertTrue(shown.stdout.contains("  Response:     {\"id\": 7,  \"note\": \"?]0;x?\"}\n"), shown.stdout)
        let plain = try ferry(["show", String(id), "--json"])
        XCTAssertNotNil((try JSONSerialization.jsonObject(with: Data(plain.stdout.utf8)) as? [String: Any])?["response"])
    }

    /// Shell completion: transfer ids come from the service; -d completes folders, -o files.
    func testCompletionOffersTransferIDsAndPaths() async throws {
        serve("/cmp.bin", size: 100)
        let s = try await session()
        let a = try await s.download(server.url("/cmp.bin"), options: ["destination": .string(work + "/a"), "start": .boolean(false)])
        let b = try await s.download(server.url("/cmp.bin"), options: ["destination": .string(work + "/b"), "start": .boolean(false)])
        let r = try ferry(["---completion", "show", "--", "positional@0"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(Set(r.stdout.split(separator: "\n").map(String.init)), ["\(a.id)", "\(b.id)"])
        let script = try ferry(["--generate-completion-script", "bash"]).stdout
        XCTAssertTrue(script.contains("'-d'|'--directory')\n        __ferry_add_completions -d"), "folders for -d")
        XCTAssertTrue(script.contains("'-o'|'--output')\n        __ferry_add_completions -f"), "files for -o")
    }

    /// Every example in the `ferry` section of docs/cli.md (moved there from the
    /// README) runs as written (with the test server standing in for example.org),
    /// one after another, under `sh -e`.
    func testReadmeExamplesRun() async throws {
        var dir = URL(fileURLWithPath: #filePath)
        while dir.path != "/" && !FileManager.default.fileExists(atPath: dir.appendingPathComponent("docs/cli.md").path) {
            dir.deleteLastPathComponent()
        }
        let readme = try String(contentsOf: dir.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        guard let section = readme.range(of: "## The `ferry` command"),
              let open = readme.range(of: "```sh\n", range: section.upperBound..<readme.endIndex),
              let close = readme.range(of: "```", range: open.upperBound..<readme.endIndex) else {
            return XCTFail("no sh example block in the ferry section of docs/cli.md")
        }
        let block = String(readme[open.upperBound..<close.lowerBound])
        // The examples set a schedule whose '* 23:00-06:00 discretionary-only' window holds
        // back the plain `get --wait` after it while the window is on: run ferryd at
        // local noon, whatever the hour of the test.
        let secondOfDay = Int(Date().timeIntervalSince1970) % 86_400
        try await killFerryd()
        try await startFerryd(extraEnvironment: ["FERRY_UTC_OFFSET_SECONDS": String(43_200 - secondOfDay)])
        for name in ["debian.iso", "a.iso", "b.iso", "x.tar.gz", "big.iso", "db.dump"] { serve("/" + name, size: 20_000) }
        let script = block.replacingOccurrences(of: "https://example.org", with: server.url(""))
        let bin = (ferryPath as NSString).deletingLastPathComponent
        var env = environment()
        env["PATH"] = bin + ":" + (env["PATH"] ?? "/usr/bin:/bin")
        let r = try runTool("/bin/sh", ["-ec", script], environment: env, timeout: 60)
        XCTAssertEqual(r.status, 0, "the examples of docs/cli.md: \(r.stderr)\n\(r.stdout)")
        XCTAssertTrue(exists(home + "/isos/a.iso") && exists(home + "/more/b.iso") && exists(home + "/x.tar.gz"))
        let json = try String(contentsOfFile: home + "/x.json", encoding: .utf8)
        XCTAssertEqual(decode([TransferRow].self, json)?.first?.state, "completed")
    }

    /// `ferry get` with many URLs is one batch: its transfers are queued together
    /// (pipelined), so the first to finish do not end the batch, and it ends in one
    /// AllFinished; `--wait` follows each from its creation to its end.
    func testGetOfManyURLsIsOneBatch() async throws {
        var bodies: [[UInt8]] = []
        let urls = (0..<40).map { i -> String in
            bodies.append(serve("/batch/\(i).bin", size: 3000, seed: UInt64(i + 10)))
            return server.url("/batch/\(i).bin")
        }
        let mark = signals.mark
        let r = try ferry(["get"] + urls + ["-d", work + "/batch", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        try await signals.wait("the manager's AllFinished") { s in
            s.dropFirst(mark).contains { $0.member == "AllFinished" && $0.path == BusClient.managerPath }
        }
        let seen = Array(signals.all.dropFirst(mark))
        let added = seen.indices.filter { seen[$0].member == "InterfacesAdded" && seen[$0].args.first?.string?.contains("/transfer/") == true }
        XCTAssertEqual(added.count, 40)
        XCTAssertEqual(seen.filter { $0.member == "AllFinished" && $0.path == BusClient.managerPath }.count, 1, "one batch")
        // Piped, each transfer has its first line (queued, on stderr with the progress)
        // and its last (completed, with its file, on stdout).
        let lines = r.stdout.split(separator: "\n").map(String.init)
        let progress = r.stderr.split(separator: "\n").map(String.init)
        for i in 0..<40 {
            let path = work + "/batch/\(i).bin"
            XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: path)), Data(bodies[i]))
            guard let done = lines.first(where: { $0.hasSuffix(" completed \(path)") }),
                  let id = done.split(separator: " ").first else { return XCTFail("no completed line for \(path): \(r.stdout)") }
            XCTAssertTrue(progress.contains { $0.hasPrefix("\(id) queued ") }, "\(id)'s first line: \(r.stderr)")
        }
        XCTAssertFalse(lines.contains { $0.contains(" queued ") }, "no progress on stdout")
    }

    /// On a bus that keeps dbus-daemon's own limit of 128 calls awaiting replies per
    /// connection, `ferry get` of 300 URLs still gets every file (it pipelines its
    /// calls in a window below the limit).
    func testGetOfManyURLsWorksOnABusWithTheDefaultReplyLimit() async throws {
        let urls = (0..<300).map { i -> String in
            serve("/many/\(i).bin", size: 512, seed: UInt64(i + 1))
            return server.url("/many/\(i).bin")
        }
        let small = try PrivateBus(maxRepliesPerConnection: 128)
        defer { small.stop() }
        var env = environment()
        env["DBUS_SESSION_BUS_ADDRESS"] = small.address
        env["XDG_STATE_HOME"] = home + "/small-bus-state"
        let daemon = try Ferryd.launch(ferrydPath, arguments: ["--no-idle-exit"], environment: env)
        defer { daemon.terminate(); _ = daemon.waitForExit(timeout: 10) }
        let watcher = try BusClient(address: small.address)
        defer { watcher.close() }
        try await Ferryd.waitForName(daemon, on: watcher.bus)

        let dest = work + "/many"
        let r = try ferry(["get"] + urls + ["-d", dest, "--wait", "-q"], timeout: 120,
                          extraEnv: ["DBUS_SESSION_BUS_ADDRESS": small.address, "XDG_STATE_HOME": home + "/small-bus-state"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dest).filter { !$0.hasSuffix(".part") }.count, 300)
    }
}
