import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The contract's limits (interface.md, Security): each is refused at call time with
/// its named error, the message says what and how much without echoing the value,
/// and a refused call creates nothing and sends nothing.
final class LimitsTests: FerryTestCase {
    static let prefix = "org.ferry.Ferry1.Error."
    static let limitExceeded = prefix + "LimitExceeded"
    static let invalidArgument = prefix + "InvalidArgument"

    func snapshot() async throws -> [String] {
        let t = try await client.listTransfers().map(\.path)
        let s = try await client.listSessions().map(\.path)
        return t + ["|"] + s
    }

    /// `size` bytes of URL on the test server (a query pads it).
    func url(ofSize size: Int) -> String {
        let base = server.url("/limit.bin") + "?pad="
        return base + String(repeating: "p", count: size - base.utf8.count)
    }

    func headers(_ count: Int) -> [String: String] {
        Dictionary(uniqueKeysWithValues: (0..<count).map { ("X-H\($0)", "v") })
    }

    func testSizesAndCountsAreRefusedAtCallTime() async throws {
        serve("/limit.bin", size: 10)
        let s = try await session()
        let before = try await snapshot()
        let paused: [String: DBusValue] = ["start": .boolean(false), "destination": .string(work + "/l.bin")]

        // (what, url, options, expected error)
        let cases: [(String, String, [String: DBusValue], String)] = [
            ("URL of 64 KiB + 1", url(ofSize: 65_537), paused, Self.limitExceeded),
            ("URL of 1 MiB", url(ofSize: 1 << 20), paused, Self.limitExceeded),
            ("destination over PATH_MAX", server.url("/limit.bin"),
             ["destination": .string(work + "/" + String(repeating: "d/", count: 2100) + "f")], Self.limitExceeded),
            ("destination name over NAME_MAX", server.url("/limit.bin"),
             ["destination": .string(work + "/" + String(repeating: "n", count: 256))], Self.limitExceeded),
            ("file name whose .part is over NAME_MAX", server.url("/limit.bin"),
             ["destination": .string(work + "/" + String(repeating: "n", count: 251))], Self.limitExceeded),
            ("65 headers", server.url("/limit.bin"), ["headers": .stringDict(headers(65))], Self.limitExceeded),
            ("10,000 headers", server.url("/limit.bin"), ["headers": .stringDict(headers(10_000))], Self.limitExceeded),
            ("header name of 257 bytes", server.url("/limit.bin"),
             ["headers": .stringDict([String(repeating: "N", count: 257): "v"])], Self.limitExceeded),
            ("header value of 8 KiB + 1", server.url("/limit.bin"),
             ["headers": .stringDict(["X-Big": String(repeating: "v", count: 8193)])], Self.limitExceeded),
            ("header value of 1 MiB", server.url("/limit.bin"),
             ["headers": .stringDict(["X-Big": String(repeating: "v", count: 1 << 20)])], Self.limitExceeded),
            ("description of 4 KiB + 1", server.url("/limit.bin"),
             ["description": .string(String(repeating: "d", count: 4097))], Self.limitExceeded),
            ("header value with CR", server.url("/limit.bin"), ["headers": .stringDict(["X-A": "a\rb"])], Self.invalidArgument),
        ]
        for (what, u, options, name) in cases {
            let e = await assertBusError(name, what) { try await s.download(u, options: options) }
            XCTAssertLessThan(e?.message.utf8.count ?? 0, 400, "\(what): the message does not echo the value")
        }
        for header in ["Host", "Content-Length", "Transfer-Encoding", "Connection", "keep-alive", "TE", "Upgrade", "Trailer"] {
            await assertBusError(Self.invalidArgument, "request header \(header)") {
                try await s.download(self.server.url("/limit.bin"), options: ["headers": .stringDict([header: "evil.example"])])
            }
            await assertBusError(Self.invalidArgument, "session header \(header)") {
                try await self.client.openSession("com.example.Hdr", configuration: ["headers": .stringDict([header: "1"])])
            }
        }
        await assertBusError(Self.limitExceeded, "resume data of 64 KiB + 1") {
            try await s.resumeDownload([UInt8](repeating: 0x41, count: 65_537))
        }
        let configurations: [(String, [String: DBusValue], String)] = [
            ("65 session headers", ["headers": .stringDict(headers(65))], Self.limitExceeded),
            ("session header value of 8 KiB + 1", ["headers": .stringDict(["X-Big": String(repeating: "v", count: 8193)])], Self.limitExceeded),
            ("application-id of 256 bytes", ["application-id": .string("org." + String(repeating: "a", count: 252))], Self.limitExceeded),
            ("application-id of 1 MiB", ["application-id": .string("org." + String(repeating: "a", count: 1 << 20))], Self.limitExceeded),
            ("application-id not a D-Bus name", ["application-id": .string("not an id")], Self.invalidArgument),
            ("application-id starting with a digit", ["application-id": .string("org.9lives")], Self.invalidArgument),
            ("application-id of one element", ["application-id": .string("podcasts")], Self.invalidArgument),
            ("directory over PATH_MAX", ["directory": .string("/" + String(repeating: "d/", count: 2100))], Self.limitExceeded),
            ("directory name over NAME_MAX", ["directory": .string(work + "/" + String(repeating: "n", count: 256))], Self.limitExceeded),
            ("proxy URL over 64 KiB", ["proxy": .string("http://p.example/" + String(repeating: "x", count: 65_536))], Self.limitExceeded),
        ]
        for (what, config, name) in configurations {
            let e = await assertBusError(name, what) { try await self.client.openSession("com.example.Limits", configuration: config) }
            XCTAssertLessThan(e?.message.utf8.count ?? 0, 400, "\(what): the message does not echo the value")
        }
        let after = try await snapshot()
        XCTAssertEqual(after, before, "refused calls create nothing")
        XCTAssertEqual(server.requests.count, 0, "and send nothing")

        // The boundaries themselves are fine.
        let longest = try await s.download(url(ofSize: 65_536), options: [
            "start": .boolean(false), "destination": .string(work + "/" + String(repeating: "n", count: 250)),
            "description": .string(String(repeating: "d", count: 4096)), "headers": .stringDict(headers(64)),
        ])
        let info = try await longest.info()
        XCTAssertEqual(info.url.utf8.count, 65_536)
        XCTAssertEqual(info.description.utf8.count, 4096)
        let withApp = try await client.openSession("com.example.App", configuration: [
            "application-id": .string("org." + String(repeating: "a", count: 251)),
            "headers": .stringDict(["X-Big": String(repeating: "v", count: 8192)]),
        ])
        XCTAssertFalse(withApp.path.isEmpty)
        // SetUrl has the URL limit too.
        await assertBusError(Self.limitExceeded, "SetUrl over 64 KiB") { try await longest.setURL(self.url(ofSize: 65_537)) }
    }

    /// Each option value must be of exactly its D-Bus type: a variant inside the
    /// variant, an object path or a signature where a string is expected are refused,
    /// naming the key.
    /// A call of millions of small values (which the bus carries: up to 128 MiB) is
    /// refused by its size before any value is read; the largest call the other limits
    /// allow is taken.
    func testACallsArgumentsAreCappedInAll() async throws {
        serve("/limit.bin", size: 10)
        let s = try await session()
        let before = try await snapshot()
        // 700,000 empty names: 5.6 MB on the wire, millions of values once read.
        let e = await assertBusError(Self.limitExceeded, "ListTransferProperties with 700,000 names") {
            try await self.call(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties",
                                [.stringArray(Array(repeating: "", count: 700_000))], timeout: 30)
        }
        XCTAssertTrue(e?.message.contains("at most 4194304") ?? false, e?.message ?? "")
        await assertBusError(Self.limitExceeded, "Download with 600,000 headers") {
            try await self.call(s.path, BusClient.sessionInterface, "Download", [
                .string(self.server.url("/limit.bin")),
                .vardict(["headers": .stringDict(Dictionary(uniqueKeysWithValues: (0..<600_000).map { ("X\($0)", "") })), "start": .boolean(false)]),
            ], timeout: 30)
        }
        let after = try await snapshot()
        XCTAssertEqual(after, before, "nothing was created")
        await assertDaemonAlive()

        // The largest an upload can be within the other limits still goes through to
        // its own checks: a 64 KiB URL, 64 headers and 64 form values of 8 KiB.
        let big = String(repeating: "v", count: 8 * 1024)
        let source = work + "/up.bin"
        FileManager.default.createFile(atPath: source, contents: Data("x".utf8))
        let upload = try await call(s.path, BusClient.sessionInterface, "Upload", [
            .string(url(ofSize: 65_536)), .string(source),
            .vardict(["headers": .stringDict(Dictionary(uniqueKeysWithValues: (0..<64).map { ("X-H\($0)", big) })),
                      "method": .string("POST"), "form-field": .string("file"),
                      "form-values": .stringDict(Dictionary(uniqueKeysWithValues: (0..<64).map { ("f\($0)", big) })),
                      "description": .string(String(repeating: "d", count: 4096)), "start": .boolean(false)]),
        ], timeout: 30)
        XCTAssertEqual(upload.first?.string?.hasPrefix(BusClient.managerPath + "/transfer/"), true, "the largest allowed call is taken")
    }

    /// Calls that arrive before their sender is identified wait for it; oversized ones
    /// are refused at once instead, so that they cannot fill what libdbus reads ahead
    /// (about 63 MiB) and leave the answer to the lookup itself unread: ferryd would
    /// not answer anyone until the lookup's timeout (10 s).
    func testOversizedCallsFromAnUnidentifiedCallerStallNobody() async throws {
        _ = try await session() // this test's client is identified
        let fresh = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.fresh-caller"))
        defer { fresh.close() }
        let big = String(repeating: "p", count: 30 << 20)
        let answers = PipelinedCallTests.Replies()
        for i in 0..<3 {
            let m = try BusMessage.methodCall(destination: BusClient.busName, path: BusClient.managerPath,
                                              interface: BusClient.managerInterface, member: "OpenSession")
            try m.append([.string("com.example.Big\(i)"), .vardict(["proxy": .string(big)])])
            fresh.send(m, timeout: 60) { answers.record(i, $0) }
        }
        // Answered by ferryd within 5 s each, not after a 10 s stall: the fresh caller's
        // own small call, and another client's.
        let own = try await fresh.call(destination: BusClient.busName, path: BusClient.managerPath,
                                       interface: BusClient.managerInterface, method: "ListSessions", timeout: 5)
        XCTAssertEqual(own.first?.arrayElements?.count, 1, "the session of this test's client")
        let other = try await client.listSessions()
        XCTAssertEqual(other.count, 1)
        try await answers.wait(for: 3)
        for i in 0..<3 {
            guard case .failure(let e)? = answers[i] else { return XCTFail("the 30 MB call \(i) was taken") }
            XCTAssertEqual(e.name, Self.limitExceeded, e.message)
        }
        await assertDaemonAlive()
    }

    func testOptionValuesNeedTheirExactType() async throws {
        let s = try await session()
        let before = try await snapshot()
        let downloads: [(String, DBusValue)] = [
            ("destination", .variant(.string(work + "/x.bin"))),
            ("destination", .objectPath("/tmp")),
            ("description", .signature("s")),
            ("description", .variant(.variant(.string("deep")))),
            ("headers", .variant(.stringDict(["X-A": "b"]))),
            ("start", .variant(.boolean(false))),
            ("priority", .variant(.int32(0))),
        ]
        for (key, value) in downloads {
            let e = await assertBusError(Self.invalidArgument, "Download \(key) = \(value)") {
                try await s.download(self.server.url("/x.bin"), options: [key: value])
            }
            XCTAssertTrue(e?.message.contains("'\(key)'") ?? false, "the message names the key: \(e?.message ?? "")")
        }
        let configs: [(String, DBusValue)] = [
            ("directory", .objectPath("/tmp")), ("proxy", .variant(.string("http://p.example"))),
            ("application-id", .signature("s")), ("retries", .variant(.uint32(1))),
        ]
        for (key, value) in configs {
            let e = await assertBusError(Self.invalidArgument, "OpenSession \(key) = \(value)") {
                try await self.client.openSession("com.example.Types", configuration: [key: value])
            }
            XCTAssertTrue(e?.message.contains("'\(key)'") ?? false, "the message names the key: \(e?.message ?? "")")
        }
        let after = try await snapshot()
        XCTAssertEqual(after, before)
    }

    /// Sessions per client and transfers per session are capped; ferryd's options set
    /// the caps (the defaults, 1,000 and 100,000, are too many for a test).
    func testSessionAndTransferCounts() async throws {
        try await stopFerryd()
        try await startFerryd(["--max-sessions-per-client", "3", "--max-transfers-per-session", "4"])

        var sessions: [BusSession] = []
        for i in 0..<3 { sessions.append(try await client.openSession("com.example.Count\(i)")) }
        await assertBusError(Self.limitExceeded, "a fourth session") { try await self.client.openSession("com.example.Count3") }
        let again = try await client.openSession("com.example.Count1", configuration: ["retries": .uint32(1)])
        XCTAssertEqual(again.path, sessions[1].path, "re-attaching to a session is always fine")

        serve("/c.bin", size: 10)
        let s = sessions[0]
        var transfers: [FerryTransfer] = []
        for i in 0..<4 {
            transfers.append(try await s.download(server.url("/c.bin"), options: ["start": .boolean(false), "destination": .string(work + "/c\(i).bin")]))
        }
        await assertBusError(Self.limitExceeded, "a fifth transfer") {
            try await s.download(self.server.url("/c.bin"), options: ["start": .boolean(false), "destination": .string(self.work + "/c4.bin")])
        }
        // Another session has its own count.
        _ = try await sessions[1].download(server.url("/c.bin"), options: ["start": .boolean(false), "destination": .string(work + "/d.bin")])
        // Removing one makes room.
        try await transfers[0].cancel()
        try await transfers[0].remove()
        _ = try await s.download(server.url("/c.bin"), options: ["start": .boolean(false), "destination": .string(work + "/c5.bin")])
        // Closing a session makes room for another.
        try await sessions[2].close(cancelTransfers: true)
        _ = try await client.openSession("com.example.Count3")
        // A session closed without cancelling its paused transfers stays (closing) and
        // counts; opening its identifier again would make a new one, beyond the cap.
        try await s.close(cancelTransfers: false)
        await assertBusError(Self.limitExceeded, "a new session under a closing one's identifier") {
            try await self.client.openSession("com.example.Count0")
        }
    }

    /// Removing a transfer keeps its completion event until it is acknowledged, so a
    /// client that removes but never acknowledges would grow a session's events (and
    /// `PendingEvents`' reply) without bound. The cap counts the events held, one for
    /// each transfer not ended and one for each failed one (it may end once more): at
    /// the cap, a new transfer or a failed one resumed is refused and changes nothing,
    /// while a paused one still resumes. Acknowledging makes room; the count is the
    /// stored events', also after a `kill -9`.
    func testUnacknowledgedEventsAreCapped() async throws {
        let cap = ["--max-pending-events-per-session", "4"]
        try await stopFerryd()
        try await startFerryd(cap)
        serve("/e.bin", size: 10)
        let s = try await session("com.example.Events")
        func paused(_ name: String) -> [String: DBusValue] {
            ["start": .boolean(false), "destination": .string(work + "/" + name)]
        }
        let held = try await s.download(server.url("/e.bin"), options: paused("held.bin"))
        let ok = try await s.download(server.url("/e.bin"), options: ["destination": .string(work + "/e0.bin")])
        try await finish(ok)
        let failed = try await s.download(server.url("/missing.bin"), options: ["destination": .string(work + "/f.bin")])
        let failedInfo = try await finish(failed)
        XCTAssertEqual(failedInfo.state, "failed")
        try await ok.remove()
        let stillHeld = try await s.pendingEvents().count
        XCTAssertEqual(stillHeld, 2, "a removed transfer's event stays until acknowledged")
        // Held: 2 events, the paused transfer and the failed one: 4.

        try await killFerryd()
        try await startFerryd(cap)
        let before = try await snapshot()
        await assertBusError(Self.limitExceeded, "a new download at the cap") {
            try await s.download(self.server.url("/e.bin"), options: paused("e1.bin"))
        }
        await assertBusError(Self.limitExceeded, "an upload at the cap") {
            try await s.upload(self.server.url("/up"), file: self.work + "/e0.bin")
        }
        await assertBusError(Self.limitExceeded, "a download from resume data at the cap") {
            try await s.resumeDownload(Array(repeating: 7, count: 40))
        }
        await assertBusError(Self.limitExceeded, "a failed download resumed at the cap") { try await failed.resume() }
        let after = try await snapshot()
        XCTAssertEqual(after, before, "a refused call creates nothing")
        let state = try await failed.info().state
        XCTAssertEqual(state, "failed", "a refused resume leaves the transfer as it was")
        do {
            _ = try await s.download(server.url("/e.bin"), options: paused("e1.bin"))
        } catch let e as BusError {
            XCTAssertTrue(e.message.contains("'com.example.Events'"), "the session is named: \(e.message)")
        }

        // ResumeAll resumes the paused transfer and leaves the failed one as it is.
        let mark = signals.all.count
        try await s.resumeAll()
        try await finish(held)
        let failedStays = try await failed.info().state
        XCTAssertEqual(failedStays, "failed")
        try await client.resumeAll()
        let failedStill = try await failed.info().state
        XCTAssertEqual(failedStill, "failed")
        XCTAssertFalse(signals.all.dropFirst(mark).contains {
            $0.path == failed.path && $0.member == "PropertiesChanged" && $0.changed["State"] != nil
        }, "neither ResumeAll resumed the failed transfer")

        // Acknowledging makes room again, for one run.
        let events = try await s.pendingEvents()
        XCTAssertEqual(events.count, 3)
        try await s.acknowledgeEvents(upTo: events[0].serial)
        let again = signals.all.count
        try await failed.resume()
        try await waitForState(failed, ["failed"], since: again)
        await assertBusError(Self.limitExceeded, "back at the cap") {
            try await s.download(self.server.url("/e.bin"), options: paused("e2.bin"))
        }
        try await s.acknowledgeEvents(upTo: try await s.pendingEvents().last!.serial)
        let next = try await s.download(server.url("/e.bin"), options: ["destination": .string(work + "/e3.bin")])
        let done = try await finish(next).state
        XCTAssertEqual(done, "completed")
    }

    /// Events more than one reply may carry are read a page at a time
    /// (`PendingEventsAfter`): each page keeps under the service's budget (here made
    /// small, for events with 3.6 KB paths) but holds at least one event, and reading on
    /// from the last serial gives every event once, in order, as `PendingEvents` does.
    func testPendingEventsAreReadAPageAtATime() async throws {
        try await stopFerryd()
        try await startFerryd(extraEnvironment: ["FERRY_PENDING_PAGE_BYTES": "9000"])
        serve("/p.bin", size: 10)
        var deep = work!
        for i in 0..<14 { deep += "/" + String(repeating: Character(String(i % 10)), count: 250) }
        try FileManager.default.createDirectory(atPath: deep, withIntermediateDirectories: true)
        let s = try await session("com.example.Pages")
        for i in 0..<5 {
            let t = try await s.download(server.url("/p.bin"), options: ["destination": .string(deep + "/f\(i).bin")])
            try await finish(t)
        }
        let whole = try await client.bus.call(destination: BusClient.busName, path: s.path,
                                              interface: BusClient.sessionInterface, method: "PendingEvents")
        let serials = (whole.first?.arrayElements ?? []).compactMap { $0.structFields?.first?.uint64 }
        XCTAssertEqual(serials.count, 5)

        let first = try await s.pendingEvents(after: 0)
        XCTAssertEqual(first.map(\.serial), Array(serials.prefix(2)), "two events of ~3.9 KB in a page of 9,000 bytes")
        let one = try await s.pendingEvents(after: serials[0], limit: 1)
        XCTAssertEqual(one.map(\.serial), [serials[1]])
        let tail = try await s.pendingEvents(after: serials[4])
        XCTAssertEqual(tail, [], "nothing after the last")
        let paged = try await s.pendingEvents()
        XCTAssertEqual(paged.map(\.serial), serials, "every event once, in order")
        XCTAssertEqual(paged.last?.details["location"]?.string, deep + "/f4.bin")

        // One event larger than the page still comes, alone.
        try await stopFerryd()
        try await startFerryd(extraEnvironment: ["FERRY_PENDING_PAGE_BYTES": "100"])
        let single = try await s.pendingEvents(after: 0)
        XCTAssertEqual(single.map(\.serial), [serials[0]])
        let all = try await s.pendingEvents()
        XCTAssertEqual(all.map(\.serial), serials)
    }
}
