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

        var sessions: [FerrySession] = []
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
}
