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

}
