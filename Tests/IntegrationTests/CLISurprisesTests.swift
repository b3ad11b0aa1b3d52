import DBus
import FerryBusClient
import FerryInterface
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Issue 43's remaining points: a `ferry` that surprises no curl or wget user. Retries
/// are said as they happen, one connection instead of `-x N` is said, `watch
/// --until-done` started first waits for the work, `config get` prints one form.
extension CLITests {
    /// `get --wait` says each retry on stderr as it happens (when, which, why), and
    /// with -q from a transfer's second retry on; stdout keeps only the results.
    func testGetWaitSaysEachRetry() async throws {
        let body = serve("/flaky.bin", size: 20_000)
        server.set(.failFirst(2, status: 503), on: "/flaky.bin")
        let dest = work + "/flaky.bin"
        let r = try ferry(["get", server.url("/flaky.bin"), "-o", dest, "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        assertFile(dest, equals: body)
        // The CLI's session retries 5 times by default: "retry 1/5", then "retry 2/5".
        XCTAssertTrue(r.stderr.contains("waiting(retry) flaky.bin: retry 1/5 in "), r.stderr)
        XCTAssertTrue(r.stderr.contains("retry 2/5 in "), r.stderr)
        XCTAssertTrue(r.stderr.contains("503"), "why it retries: \(r.stderr)")
        XCTAssertFalse(r.stdout.contains("retry"), "stdout holds results only: \(r.stdout)")

        // -q keeps errors only; a retry is no error, but one that keeps coming is
        // worth a word: the first retry is silent, the second and later are said.
        let quietBody = serve("/flaky2.bin", size: 20_000, seed: 2)
        server.set(.failFirst(3, status: 503), on: "/flaky2.bin")
        let q = try ferry(["-q", "get", server.url("/flaky2.bin"), "-o", work + "/flaky2.bin", "--wait"])
        XCTAssertEqual(q.status, 0, q.stderr)
        assertFile(work + "/flaky2.bin", equals: quietBody)
        XCTAssertFalse(q.stderr.contains("retry 1/5"), "a single retry is not worth a word with -q: \(q.stderr)")
        XCTAssertTrue(q.stderr.contains("retry 2/5 in "), q.stderr)
        XCTAssertTrue(q.stderr.contains("retry 3/5 in "), q.stderr)
    }

    /// `show` says when a retry comes and why; once the transfer runs again, the last
    /// try's failure is shown as the previous try's, not as its current error.
    func testShowSaysWhenTheNextTryComesAndTheErrorIsThePreviousTrys() async throws {
        serve("/down.bin", size: 10_000)
        server.set(.status(503), on: "/down.bin")
        server.set(.retryAfter("40"), on: "/down.bin")
        let s = try await session("org.ferry.cli")
        let t = try await s.download(server.url("/down.bin"), options: ["destination": .string(work + "/down.bin")])
        try await waitForState(t, "waiting")
        let next = try await getProperty(t.path, BusClient.transferInterface, "NextAttempt")?.uint64 ?? 0
        let now = UInt64(Date().timeIntervalSince1970 * 1_000_000)
        XCTAssertTrue(next > now + 20_000_000 && next < now + 60_000_000, "NextAttempt is the time of the next try: \(next) vs \(now)")
        let show = try ferry(["show", "\(t.id)"])
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("State:        waiting(retry): retry 1/5 in "), show.stdout)
        XCTAssertTrue(show.stdout.contains("Next try:"), show.stdout)
        XCTAssertTrue(show.stdout.contains("Previous try: failed: HTTP 503"), show.stdout)
        XCTAssertFalse(show.stdout.contains("  Error:"), "not failed: \(show.stdout)")
        // --json: the time itself.
        let shown = json(try ferry(["show", "\(t.id)", "--json"]).stdout) as? [String: Any]
        XCTAssertEqual((shown?["next_attempt"] as? NSNumber)?.uint64Value, next)
        XCTAssertEqual(shown?["single_connection_reason"] as? String, "")
        try await t.cancel()

        // Failed once, then running: the error is the previous try's.
        serve("/back.bin", size: 2_000_000, seed: 3)
        server.set(.failFirst(1, status: 503), on: "/back.bin")
        server.set(.slow(bytesPerSecond: 64 * 1024), on: "/back.bin")
        let b = try await s.download(server.url("/back.bin"), options: ["destination": .string(work + "/back.bin")])
        try await waitUntilAsync("the second try runs", timeout: 15) {
            self.signals.all.contains { $0.path == b.path && $0.member == "Progress" }
        }
        let info = try await b.info()
        XCTAssertEqual(info.state, "running")
        XCTAssertEqual(info.nextAttempt, 0, "no next try while running")
        let running = try ferry(["show", "\(b.id)"])
        XCTAssertTrue(running.stdout.contains("State:        running\n"), running.stdout)
        XCTAssertTrue(running.stdout.contains("Previous try: failed: HTTP 503"), running.stdout)
        XCTAssertFalse(running.stdout.contains("  Error:"), running.stdout)
        XCTAssertFalse(running.stdout.contains("Next try:"), running.stdout)
        try await b.cancel()
    }

    /// `-x 8` against a server without ranges runs on one connection and says why, once:
    /// `get --wait` on stderr, `show` in a line of its own, the bus in
    /// `SingleConnectionReason`.
    func testOneConnectionInsteadOfSeveralIsSaid() async throws {
        let body = serve("/noranges.bin", size: 3_000_000, ranges: false)
        let dest = work + "/noranges.bin"
        let r = try ferry(["get", server.url("/noranges.bin"), "-x", "8", "-o", dest, "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        assertFile(dest, equals: body)
        let notes = r.stderr.components(separatedBy: "\n").filter { $0.contains("one connection: ") }
        XCTAssertEqual(notes.count, 1, "said once: \(r.stderr)")
        XCTAssertTrue(notes.first?.contains("range requests") ?? false, r.stderr)
        let id = r.stdout.split(separator: "\n").first.map(String.init) ?? ""
        let show = try ferry(["show", id])
        XCTAssertTrue(show.stdout.contains("Connections:  one connection: the server does not accept range requests"), show.stdout)
        let reason = try await getProperty(transfer(id).path, BusClient.transferInterface, "SingleConnectionReason")?.string
        XCTAssertTrue(reason?.contains("range requests") ?? false, reason ?? "nil")

        // One connection asked for: nothing to say.
        serve("/plain.bin", size: 10_000, seed: 4, ranges: false)
        let one = try ferry(["get", server.url("/plain.bin"), "-o", work + "/plain.bin", "--wait"])
        XCTAssertFalse(one.stderr.contains("one connection"), one.stderr)
    }

    /// `-x 8` gets 8 connections, above the CLI session's 6 per host (as aria2c's `-x 8`
    /// does); a bus client's `connections=8` in a session of 6 gets 6, and
    /// `ConnectionLimitReason` says why.
    func testEightConnectionsAskedForAreGivenOrTheCapIsSaid() async throws {
        let body = serve("/x8.bin", size: 16 * 1024 * 1024)
        server.set(.slow(bytesPerSecond: 2 * 1024 * 1024), on: "/x8.bin")
        let r = try ferry(["get", server.url("/x8.bin"), "-x", "8", "-o", work + "/x8.bin", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        assertFile(work + "/x8.bin", equals: body)
        XCTAssertEqual(server.mostRequestsInFlight, 8, "eight ranges at once")
        XCTAssertFalse(r.stderr.contains("connections asked for"), r.stderr)
        let id = r.stdout.split(separator: "\n").first.map(String.init) ?? ""
        let reason = try await getProperty(transfer(id).path, BusClient.transferInterface, "ConnectionLimitReason")?.string
        XCTAssertEqual(reason, "")

        // A bus client in a session of its own (6 per host): 6, and the reason.
        serve("/b6.bin", size: 4 * 1024 * 1024, seed: 3)
        let s = try await session("com.example.Six")
        let t = try await s.download(server.url("/b6.bin"), options: ["destination": .string(work + "/b6.bin"), "connections": .uint32(8)])
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.connectionLimitReason,
                       "6 of the 8 connections asked for: the session's max-connections-per-host is 6")
        let show = try ferry(["show", String(t.id)])
        XCTAssertTrue(show.stdout.contains("Connections:  6 of the 8 connections asked for"), show.stdout)
    }

    /// `watch --until-done` started before any work waits for it, follows it and ends
    /// when it has ended; `--if-running` ends at once as before.
    func testWatchUntilDoneStartedFirstWaitsForTheWork() async throws {
        let now = try ferry(["watch", "--until-done", "--if-running"], timeout: 10)
        XCTAssertEqual(now.status, 0, now.stderr)
        XCTAssertEqual(now.stdout, "Nothing is queued or running.\n")

        let watch = try ChildProcess(executable: ferryPath, arguments: ["watch", "--until-done"], environment: environment())
        defer { watch.kill(SIGKILL) }
        try await waitUntilAsync("watch says it waits", timeout: 10) { watch.stderr.contains("waiting for transfers") || !watch.isRunning }
        XCTAssertTrue(watch.isRunning, "it waits for the work: \(watch.log)")
        // Work that fails once first: watch says the retry too.
        let body = serve("/later.bin", size: 30_000)
        server.set(.failFirst(1, status: 503), on: "/later.bin")
        let r = try ferry(["get", server.url("/later.bin"), "-o", work + "/later.bin"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(watch.waitForExit(timeout: 20), 0, watch.log)
        assertFile(work + "/later.bin", equals: body)
        XCTAssertTrue(watch.stdout.contains(" completed "), watch.stdout)
        XCTAssertTrue(watch.stdout.contains("waiting(retry) later.bin: retry 1"), watch.stdout)
        XCTAssertTrue(watch.stdout.contains("HTTP 503"), watch.stdout)
    }

    /// `config get` and `config get KEY` print a setting the same way, as people read
    /// it and `config set` takes it back; --json keeps the number.
    func testConfigGetPrintsOneHumanForm() async throws {
        XCTAssertEqual(try ferry(["config", "get", "speed-limit"]).stdout, "none\n")
        XCTAssertTrue(try ferry(["config", "get"]).stdout.contains("speed-limit none\n"))
        XCTAssertEqual(try ferry(["config", "set", "speed-limit", "500k"]).status, 0)
        XCTAssertEqual(try ferry(["config", "get", "speed-limit"]).stdout, "500 KiB/s\n")
        XCTAssertTrue(try ferry(["config", "get"]).stdout.contains("speed-limit 500 KiB/s\n"))
        XCTAssertEqual(try ferry(["config", "get", "speed-limit", "--json"]).stdout, "512000\n")
        // What it prints, `config set` takes.
        XCTAssertEqual(try ferry(["config", "set", "speed-limit", "1.5 MiB/s"]).status, 0)
        XCTAssertEqual(try ferry(["config", "get", "speed-limit"]).stdout, "1.5 MiB/s\n")
        XCTAssertEqual(try ferry(["config", "set", "speed-limit", "none"]).status, 0)
        let limit = try await managerProperty("SpeedLimit")?.uint64
        XCTAssertEqual(limit, 0)
    }
}

extension CLIScriptingTests {
    /// In a terminal, the live line of a transfer waiting to try again says which retry,
    /// when and why, and a download that asked for several connections and runs on one
    /// says why in a line above the display.
    func testTerminalDisplaySaysRetriesAndOneConnection() async throws {
        serve("/tty-flaky.bin", size: 20_000)
        server.set(.failFirst(1, status: 503), on: "/tty-flaky.bin")
        server.set(.retryAfter("1"), on: "/tty-flaky.bin")
        serve("/tty-noranges.bin", size: 2_000_000, seed: 5, ranges: false)
        let (status, rows, raw) = try getInTerminal([server.url("/tty-flaky.bin"), server.url("/tty-noranges.bin")],
                                                    into: work + "/tty", extra: ["-x", "4"])
        XCTAssertEqual(status, 0, raw)
        XCTAssertTrue(rows.contains { $0.hasPrefix("1 tty-flaky") && $0.contains("retry 1/5 in") && $0.contains("HTTP 503") },
                      rows.joined(separator: "\n"))
        XCTAssertEqual(rows.filter { $0.hasPrefix("2 tty-noranges.bin: one connection: the server") }.count, 1, rows.joined(separator: "\n"))
        for row in rows where !row.hasPrefix(work) { XCTAssertLessThanOrEqual(row.count, 80, "too wide: \(row)") }
    }
}
