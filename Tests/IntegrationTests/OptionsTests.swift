import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Download options and session settings a user would notice.
final class OptionsTests: FerryTestCase {
    /// Session and transfer headers reach the server (the transfer's win); a secret
    /// header value never shows up in errors, events or the daemon's log.
    func testHeadersReachServerAndSecretsStayHidden() async throws {
        serve("/h.bin", size: 100)
        let secret = "sekrit-token-4711"
        let s = try await session("com.example.Headers", ["headers": .stringDict(["X-Session": "from-session", "X-Both": "session"])])
        let t = try await s.download(server.url("/h.bin"), options: [
            "destination": .string(work + "/h.bin"),
            "headers": .stringDict(["X-Both": "transfer", "Authorization": "Bearer \(secret)"]),
        ])
        try await finish(t)
        let r = server.requests(for: "/h.bin").first
        XCTAssertEqual(r?.header("X-Session"), "from-session")
        XCTAssertEqual(r?.header("X-Both"), "transfer", "a transfer header replaces the session's")
        XCTAssertEqual(r?.header("Authorization"), "Bearer \(secret)")
        XCTAssertEqual(r?.headers.filter { $0.name.lowercased() == "x-both" }.count, 1)

        server.set(.status(401), on: "/deny")
        let denied = try await s.download(server.url("/deny"), options: [
            "destination": .string(work + "/deny"), "headers": .stringDict(["Authorization": "Bearer \(secret)", "Cookie": "id=\(secret)"]),
        ])
        let (serial, errorName, errorMessage) = try await signals.completed(denied.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertTrue(errorMessage.contains("401"), errorMessage)
        XCTAssertFalse(errorMessage.contains(secret), "the message never echoes the secret: \(errorMessage)")
        let event = try await s.pendingEvents().first { $0.serial == serial }
        XCTAssertFalse("\(event?.details ?? [:])".contains(secret))
        let all = try await call(denied.path, StandardNames.properties, "GetAll", [.string(BusClient.transferInterface)])
        let props = "\(all)"
        XCTAssertFalse(props.contains(secret), "no property shows the secret")
        // Refusals of bad headers do not echo values either.
        let e = await assertBusError("org.ferry.Ferry1.Error.InvalidArgument") {
            try await s.download(self.server.url("/h.bin"), options: ["headers": .stringDict(["Authorization": "Bearer \(secret)\r\nX: y"])])
        }
        XCTAssertFalse(e?.message.contains(secret) ?? true, e?.message ?? "")
        XCTAssertFalse(ferryd?.log.contains(secret) ?? true, "the daemon's log never holds the secret")
    }

    /// start-after: the transfer waits (reason start-after) and starts on time.
    func testStartAfterWaitsUntilTheTime() async throws {
        let body = serve("/later.bin", size: 1000)
        let s = try await session()
        // Far enough ahead that the call and the first look come before it on a slow machine.
        let startAfter = UInt64((Date().timeIntervalSince1970 + 2.0) * 1_000_000)
        let t = try await s.download(server.url("/later.bin"), options: [
            "destination": .string(work + "/later.bin"), "start-after": .uint64(startAfter),
        ])
        let first = try await t.info()
        XCTAssertEqual(first.state, "waiting")
        XCTAssertEqual(first.waitingReason, "start-after")
        XCTAssertEqual(server.requests.count, 0)
        let info = try await finish(t, timeout: 10)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertGreaterThanOrEqual(info.started, startAfter, "not started before start-after")
        XCTAssertEqual(info.waitingReason, "", "WaitingReason is empty when not waiting")
        assertFile(work + "/later.bin", equals: body)
    }

    /// With one slot, a high-priority transfer queued last runs before normal and low ones.
    func testPriorityOrdersTheQueue() async throws {
        try await client.setManagerProperty("MaxConcurrentTransfers", .uint32(1))
        // The first holds the one slot (its server stops sending) until it is paused,
        // so the other three are all queued, whatever the machine's pace, before any runs.
        serve("/first.bin", size: 64 * 1024)
        server.set(.stallAfter(bytes: 16 * 1024), on: "/first.bin")
        serve("/x.bin", size: 1000)
        let s = try await session()
        let first = try await s.download(server.url("/first.bin"), options: ["destination": .string(work + "/first.bin")])
        try await waitForState(first, "running")
        // One URL three times: each fetched on its own (dedupe would make the last two
        // follow the first, and end with it).
        let low = try await s.download(server.url("/x.bin"), options: ["destination": .string(work + "/low"), "priority": .int32(-1), "dedupe": .boolean(false)])
        let normal = try await s.download(server.url("/x.bin"), options: ["destination": .string(work + "/normal"), "dedupe": .boolean(false)])
        let high = try await s.download(server.url("/x.bin"), options: ["destination": .string(work + "/high"), "priority": .int32(1), "dedupe": .boolean(false)])
        let queued = try await [low.info().state, normal.info().state, high.info().state]
        XCTAssertEqual(queued, ["queued", "queued", "queued"])
        _ = try await first.pause()
        for t in [low, normal, high] { try await signals.completed(t.path, timeout: 20) }
        // The order they started in: a body that is complete frees the one slot while its
        // file is synced, so the next may end first (the order of `Completed` is the disk's).
        let paths = [low.path, normal.path, high.path]
        let started = signals.all.filter {
            $0.member == "PropertiesChanged" && paths.contains($0.path) && $0.changed["State"]?.string == "running"
        }.map(\.path)
        XCTAssertEqual(started, [high.path, normal.path, low.path])
        let p = try await high.info().priority
        XCTAssertEqual(p, 1)
    }

    /// The speed-limit option holds a download to about that rate.
    func testSpeedLimitOptionSlowsTheDownload() async throws {
        let body = serve("/limited.bin", size: 192 * 1024)
        let (_, info, elapsed) = try await timedDownload("/limited.bin", in: session(), equals: body,
                                                         options: ["speed-limit": .uint64(128 * 1024)], timeout: 20)
        XCTAssertEqual(info.speedLimit, 128 * 1024)
        XCTAssertGreaterThanOrEqual(elapsed, 1.0, "192 KiB at 128 KiB/s take about 1.5 s, not \(elapsed) s")
    }

    /// overwrite = true replaces an existing file; the default keeps it and picks a new name.
    func testOverwriteOption() async throws {
        let body = serve("/o.bin", size: 3000)
        let dest = work + "/o.bin"
        try Data("old contents".utf8).write(to: URL(fileURLWithPath: dest))
        let s = try await session()
        let keep = try await s.download(server.url("/o.bin"), options: ["destination": .string(dest)])
        let ki = try await finish(keep)
        XCTAssertEqual(ki.destination, work + "/o (1).bin")
        XCTAssertEqual(try String(contentsOfFile: dest, encoding: .utf8), "old contents", "the existing file is untouched")
        let replace = try await s.download(server.url("/o.bin"), options: ["destination": .string(dest), "overwrite": .boolean(true)])
        let ri = try await finish(replace)
        XCTAssertEqual(ri.destination, dest)
        assertFile(dest, equals: body)
        assertFile(work + "/o (1).bin", equals: body)
    }

    /// overwrite replaces the file at the name asked for only: when another transfer
    /// holds that name, the new one goes to a free "name (N)", never over a user's
    /// existing "name (1)".
    func testOverwriteNeverReplacesAFileUnderAnotherName() async throws {
        let body = serve("/report.pdf", size: 2000)
        let dest = work + "/report.pdf"
        let s = try await session()
        _ = try await s.download(server.url("/report.pdf"), options: ["destination": .string(dest), "start": .boolean(false)])
        try Data("the user's own file".utf8).write(to: URL(fileURLWithPath: work + "/report (1).pdf"))
        let t = try await s.download(server.url("/report.pdf"), options: ["destination": .string(dest), "overwrite": .boolean(true)])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, work + "/report (2).pdf")
        assertFile(work + "/report (2).pdf", equals: body)
        XCTAssertEqual(try String(contentsOfFile: work + "/report (1).pdf", encoding: .utf8), "the user's own file")
    }

    /// connections > 1 still produces exactly the right file.
    func testConnectionsOptionYieldsTheRightFile() async throws {
        let body = serve("/multi.bin", size: 1 << 20)
        let s = try await session()
        let t = try await s.download(server.url("/multi.bin"), options: [
            "destination": .string(work + "/multi.bin"), "connections": .uint32(4),
        ])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/multi.bin", equals: body)
        XCTAssertEqual(partFiles(in: work), [])
    }

    /// AcknowledgeEvents(serial) drops the events up to and including it, no more.
    func testAcknowledgeEventsDropsUpToSerial() async throws {
        serve("/ev.bin", size: 10)
        let s = try await session()
        var serials: [UInt64] = []
        for i in 0..<3 {
            let t = try await s.download(server.url("/ev.bin"), options: ["destination": .string(work + "/ev\(i)")])
            serials.append(try await signals.completed(t.path).serial)
        }
        var pending = try await s.pendingEvents().map(\.serial)
        XCTAssertEqual(pending, serials, "oldest first")
        XCTAssertEqual(serials, serials.sorted())
        try await s.acknowledgeEvents(upTo: serials[1])
        pending = try await s.pendingEvents().map(\.serial)
        XCTAssertEqual(pending, [serials[2]])
        try await s.acknowledgeEvents(upTo: 0)
        pending = try await s.pendingEvents().map(\.serial)
        XCTAssertEqual(pending, [serials[2]], "acknowledging nothing changes nothing")
        try await s.acknowledgeEvents(upTo: UInt64.max)
        pending = try await s.pendingEvents().map(\.serial)
        XCTAssertEqual(pending, [])
        // Events belong to their session.
        let other = try await session("com.example.Other")
        let otherPending = try await other.pendingEvents()
        XCTAssertEqual(otherPending.count, 0)
    }

    /// The Version property is the daemon's version.
    func testVersionPropertyMatchesTheDaemon() async throws {
        let r = try runTool(ferrydPath, ["--version"], environment: environment())
        XCTAssertEqual(r.status, 0)
        let version = try await managerProperty("Version")?.string
        XCTAssertEqual(version, r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let cli = try runTool(ferryPath, ["--version"], environment: environment())
        XCTAssertEqual(cli.stdout, r.stdout, "one release: the CLI's version is the daemon's")
    }
}
