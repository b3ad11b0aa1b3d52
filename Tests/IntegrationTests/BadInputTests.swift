import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

final class BadInputTests: FerryTestCase {
    static let prefix = "org.ferry.Ferry1.Error."

    /// Transfers and sessions as the manager lists them, to show nothing changed.
    func snapshot() async throws -> [String] {
        let t = try await client.listTransfers().map(\.path)
        let s = try await client.listSessions().map(\.path)
        return t + ["|"] + s
    }

    /// Bad OpenSession identifiers and configurations are refused by name and create nothing.
    func testOpenSessionRefusesBadInput() async throws {
        let before = try await snapshot()
        let ids = ["", "has space", "slash/inside", "ümlaut", "semi;colon", String(repeating: "a", count: 256), "new\nline"]
        for id in ids {
            await assertBusError(Self.prefix + "InvalidArgument", "OpenSession(\(id.debugDescription))") {
                try await client.openSession(id)
            }
        }
        let configs: [(String, [String: DBusValue])] = [
            ("unknown key", ["colour": .string("blue")]),
            ("wrong type retries", ["retries": .string("5")]),
            ("wrong type persistent", ["persistent": .uint32(1)]),
            ("wrong type headers", ["headers": .stringArray(["a"])]),
            ("max-connections-per-host 0", ["max-connections-per-host": .uint32(0)]),
            ("request-timeout negative", ["request-timeout": .double(-1)]),
            ("request-timeout NaN", ["request-timeout": .double(.nan)]),
            ("proxy ftp", ["proxy": .string("ftp://proxy.example")]),
            ("proxy garbage", ["proxy": .string("not a url")]),
            ("proxy libcurl refuses", ["proxy": .string("http://user:pa@ss@127.0.0.1:3128")]),
            ("proxy with DEL", ["proxy": .string("http://proxy.example\u{7F}:3128")]),
            ("proxy with a no-break space", ["proxy": .string("http://proxy.example\u{A0}:3128")]),
            ("header given as (hidden), not held", ["headers": .stringDict(["Authorization": "(hidden)"])]),
            ("header CRLF", ["headers": .stringDict(["X-A": "a\r\nInjected: yes"])]),
            ("header bad name", ["headers": .stringDict(["Bad Name": "x"])]),
        ]
        for (what, config) in configs {
            await assertBusError(Self.prefix + "InvalidArgument", "OpenSession config \(what)") {
                try await client.openSession("com.example.Bad", configuration: config)
            }
        }
        await assertBusError(Self.prefix + "InvalidDestination", "relative session directory") {
            try await client.openSession("com.example.Bad", configuration: ["directory": .string("rel/dir")])
        }
        await assertBusError(Self.prefix + "InvalidDestination", "missing session directory") {
            try await client.openSession("com.example.Bad", configuration: ["directory": .string(work + "/nope")])
        }
        let after = try await snapshot()
        XCTAssertEqual(after, before, "refused calls change nothing")

        // The boundary: 255 characters of the allowed set is fine.
        let longest = String(repeating: "a", count: 250) + ".-_Z9"
        let s = try await client.openSession(longest)
        let identifier = try await s.properties()["Identifier"]?.string
        XCTAssertEqual(identifier, longest)

        // A refused re-open does not alter the stored configuration.
        let good = try await session("com.example.Keep", ["retries": .uint32(2)])
        await assertBusError(Self.prefix + "InvalidArgument", "bad update") {
            try await client.openSession("com.example.Keep", configuration: ["retries": .uint32(3), "colour": .string("x")])
        }
        let retries = try await good.properties()["Configuration"]?.vardict?["retries"]?.uint32
        XCTAssertEqual(retries, 2, "a refused OpenSession changes nothing, not even the valid keys")
    }

    /// An unwritable directory: mode 0555, or a /proc directory when running as root.
    func unwritableDirectory() throws -> String {
        let dir = work + "/readonly"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        chmod(dir, 0o555)
        cleanups.append { chmod(dir, 0o755) }
        if access(dir, W_OK) != 0 { return dir }
        return "/proc/1"  // root may write anywhere, but not here
    }

    /// Bad Download URLs and options are refused by name and create nothing.
    func testDownloadRefusesBadInput() async throws {
        serve("/ok.bin", size: 100)
        let s = try await session()
        let url = server.url("/ok.bin")
        let before = try await snapshot()

        let urls: [(String, String)] = [
            ("", "InvalidUrl"), ("not a url", "InvalidUrl"), ("http://", "InvalidUrl"), ("://x", "InvalidUrl"),
            ("http://exa mple.com/x", "InvalidUrl"), ("http://host:99999/x", "InvalidUrl"), ("relative/path", "InvalidUrl"),
            ("ftp://example.com/file", "UnsupportedScheme"), ("file:///etc/passwd", "UnsupportedScheme"),
            ("gopher://example.com/", "UnsupportedScheme"), ("data:text/plain,hi", "UnsupportedScheme"),
        ]
        for (u, name) in urls {
            await assertBusError(Self.prefix + name, "Download(\(u.debugDescription))") { try await s.download(u) }
        }
        // URLs that pass a first look but that libcurl's parser refuses (an unencoded '@'
        // in the password, a %00 in it): refused at the call, not failed as Network after
        // every retry; the password is not in the message.
        for u in [server.url("/ok.bin").replacingOccurrences(of: "http://", with: "http://user:s3cr3t@@"),
                  server.url("/ok.bin").replacingOccurrences(of: "http://", with: "http://user:s3cr3t%00x@")] {
            let e = await assertBusError(Self.prefix + "InvalidUrl", "Download(\(u.debugDescription))") { try await s.download(u) }
            XCTAssertFalse(e?.message.contains("s3cr3t") ?? true, e?.message ?? "")
        }
        // A non-ASCII host name that Foundation takes but that has no IDNA form (a
        // full-width semicolon maps to ';'): refused at the call, saying why.
        let e = await assertBusError(Self.prefix + "InvalidUrl", "Download with a host that has no IDNA form") {
            try await s.download("http://\u{E4}\u{FF1B}.example/x")
        }
        XCTAssertTrue(e?.message.contains("internationalised domain name") ?? false, e?.message ?? "")

        let readonly = try unwritableDirectory()
        let notADirectory = work + "/plainfile"
        FileManager.default.createFile(atPath: notADirectory, contents: Data("x".utf8))
        let options: [(String, [String: DBusValue], String)] = [
            ("relative destination", ["destination": .string("out/file.bin")], "InvalidDestination"),
            ("missing directory", ["destination": .string(work + "/missing/file.bin")], "InvalidDestination"),
            ("missing directory with slash", ["destination": .string(work + "/missing/")], "InvalidDestination"),
            ("unwritable directory", ["destination": .string(readonly + "/file.bin")], "InvalidDestination"),
            ("parent is a file", ["destination": .string(notADirectory + "/file.bin")], "InvalidDestination"),
            ("unknown option", ["colour": .string("blue")], "InvalidArgument"),
            ("destination of wrong type", ["destination": .uint32(1)], "InvalidArgument"),
            ("priority of wrong type", ["priority": .uint32(1)], "InvalidArgument"),
            ("priority 5", ["priority": .int32(5)], "InvalidArgument"),
            ("priority -2", ["priority": .int32(-2)], "InvalidArgument"),
            ("connections 0", ["connections": .uint32(0)], "InvalidArgument"),
            ("connections 17", ["connections": .uint32(17)], "InvalidArgument"),
            ("sha256 not hex", ["sha256": .string(String(repeating: "z", count: 64))], "InvalidArgument"),
            ("sha256 too short", ["sha256": .string(String(repeating: "a", count: 63))], "InvalidArgument"),
            ("header with CR LF", ["headers": .stringDict(["X-Test": "a\r\nEvil: 1"])], "InvalidArgument"),
            ("header with LF", ["headers": .stringDict(["X-Test": "a\nb"])], "InvalidArgument"),
            ("header name with colon", ["headers": .stringDict(["X:Y": "a"])], "InvalidArgument"),
            ("Range header", ["headers": .stringDict(["Range": "bytes=0-"])], "InvalidArgument"),
            ("headers of wrong type", ["headers": .vardict(["X-A": .string("b")])], "InvalidArgument"),
            ("start-after of wrong type", ["start-after": .int64(5)], "InvalidArgument"),
            ("start of wrong type", ["start": .string("yes")], "InvalidArgument"),
        ]
        for (what, opts, name) in options {
            await assertBusError(Self.prefix + name, "Download with \(what)") { try await s.download(url, options: opts) }
        }
        let after = try await snapshot()
        XCTAssertEqual(after, before, "refused Download calls create nothing")
        XCTAssertEqual(server.requests.count, 0, "and send no request")
    }

    /// Actions in states that do not allow them are refused with InvalidState.
    func testTransferActionsInWrongStateAreRefused() async throws {
        let body = serve("/done.bin", size: 100)
        let s = try await session()
        let done = try await s.download(server.url("/done.bin"), options: ["destination": .string(work + "/done.bin")])
        try await finish(done)
        serve("/run.bin", size: 100_000)
        server.set(.stallAfter(bytes: 1000, times: 10), on: "/run.bin")
        let running = try await s.download(server.url("/run.bin"), options: ["destination": .string(work + "/run.bin")])
        try await waitForState(running, "running")
        let paused = try await s.download(server.url("/done.bin"), options: ["destination": .string(work + "/p.bin"), "start": .boolean(false)])

        let invalidState = Self.prefix + "InvalidState"
        await assertBusError(invalidState, "Pause on completed") { try await done.pause() }
        await assertBusError(invalidState, "Resume on completed") { try await done.resume() }
        await assertBusError(invalidState, "Cancel on completed") { try await done.cancel() }
        await assertBusError(invalidState, "SetUrl on completed") { try await done.setURL(self.server.url("/x")) }
        await assertBusError(invalidState, "Resume on running") { try await running.resume() }
        await assertBusError(invalidState, "Remove on running") { try await running.remove() }
        await assertBusError(invalidState, "SetUrl on running") { try await running.setURL(self.server.url("/x")) }
        await assertBusError(invalidState, "Resume on paused is fine, Remove is not") { try await paused.remove() }
        await assertBusError(Self.prefix + "InvalidUrl", "SetUrl garbage") { try await paused.setURL("::garbage::") }
        await assertBusError(Self.prefix + "InvalidUrl", "SetUrl empty") { try await paused.setURL("") }
        await assertBusError(Self.prefix + "UnsupportedScheme", "SetUrl ftp") { try await paused.setURL("ftp://example.com/x") }

        let doneState = try await done.info().state
        let runningState = try await running.info().state
        let pausedState = try await paused.info().state
        let states = [doneState, runningState, pausedState]
        XCTAssertEqual(states, ["completed", "running", "paused"], "refused actions change nothing")
        let pausedURL = try await paused.info().url
        XCTAssertEqual(pausedURL, server.url("/done.bin"))
        assertFile(work + "/done.bin", equals: body)
        try await client.cancelAll()
    }

    /// Bus-level mistakes get the standard D-Bus errors.
    func testWrongSignaturesAndPropertiesAreRefused() async throws {
        let s = try await session()
        serve("/a.bin", size: 10)
        let t = try await s.download(server.url("/a.bin"), options: ["start": .boolean(false), "destination": .string(work + "/a.bin")])
        let before = try await snapshot()
        let m = BusClient.managerPath
        let invalidArgs = StandardErrors.invalidArgs
        await assertBusError(invalidArgs, "OpenSession(s)") { try await self.call(m, BusClient.managerInterface, "OpenSession", [.string("com.example.X")]) }
        await assertBusError(invalidArgs, "OpenSession(i, a{sv})") {
            try await self.call(m, BusClient.managerInterface, "OpenSession", [.int32(1), .vardict([:])])
        }
        await assertBusError(invalidArgs, "OpenSession(s, a{ss})") {
            try await self.call(m, BusClient.managerInterface, "OpenSession", [.string("com.example.X"), .stringDict([:])])
        }
        await assertBusError(invalidArgs, "Download(s, s)") {
            try await self.call(s.path, BusClient.sessionInterface, "Download", [.string("http://x/"), .string("y")])
        }
        await assertBusError(invalidArgs, "ResumeDownload(as, a{sv})") {
            try await self.call(s.path, BusClient.sessionInterface, "ResumeDownload", [.stringArray(["x"]), .vardict([:])])
        }
        await assertBusError(invalidArgs, "Pause(s)") { try await self.call(t.path, BusClient.transferInterface, "Pause", [.string("now")]) }
        await assertBusError(invalidArgs, "AcknowledgeEvents(u)") {
            try await self.call(s.path, BusClient.sessionInterface, "AcknowledgeEvents", [.uint32(1)])
        }
        await assertBusError(invalidArgs, "Close(s)") { try await self.call(s.path, BusClient.sessionInterface, "Close", [.string("true")]) }
        await assertBusError(StandardErrors.unknownMethod, "no such method") { try await self.call(m, BusClient.managerInterface, "Explode") }
        await assertBusError(StandardErrors.unknownInterface, "session method on a transfer") {
            try await self.call(t.path, BusClient.sessionInterface, "PauseAll")
        }
        await assertBusError("org.ferry.Ferry1.Error.NoSuchTransfer", "a transfer that never was") {
            try await self.call(BusClient.transferPathPrefix + "9999", BusClient.transferInterface, "Pause")
        }

        // Properties.
        let props = StandardNames.properties
        await assertBusError(StandardErrors.propertyReadOnly, "Set Version") {
            try await self.call(m, props, "Set", [.string(BusClient.managerInterface), .string("Version"), .variant(.string("9"))])
        }
        await assertBusError(StandardErrors.propertyReadOnly, "Set ActiveTransfers") {
            try await self.call(m, props, "Set", [.string(BusClient.managerInterface), .string("ActiveTransfers"), .variant(.uint32(9))])
        }
        await assertBusError(StandardErrors.propertyReadOnly, "Set State") {
            try await self.call(t.path, props, "Set", [.string(BusClient.transferInterface), .string("State"), .variant(.string("completed"))])
        }
        await assertBusError(invalidArgs, "Set MaxConcurrentTransfers to a string") {
            try await self.call(m, props, "Set", [.string(BusClient.managerInterface), .string("MaxConcurrentTransfers"), .variant(.string("3"))])
        }
        await assertBusError(Self.prefix + "InvalidArgument", "Set MaxConcurrentTransfers 0") {
            try await self.client.setManagerProperty("MaxConcurrentTransfers", .uint32(0))
        }
        await assertBusError(Self.prefix + "InvalidArgument", "Set Priority 5") { try await t.setProperty("Priority", .int32(5)) }
        await assertBusError(StandardErrors.unknownProperty, "Get Colour") {
            try await self.call(m, props, "Get", [.string(BusClient.managerInterface), .string("Colour")])
        }
        await assertBusError(StandardErrors.unknownInterface, "GetAll of an unknown interface") {
            try await self.call(m, props, "GetAll", [.string("org.example.Nope")])
        }
        let max = try await managerProperty("MaxConcurrentTransfers")
        XCTAssertEqual(max?.uint32, 6, "refused Sets change nothing")
        let priority = try await t.info().priority
        XCTAssertEqual(priority, 0)
        // A valid Set works and is announced.
        try await t.setProperty("Priority", .int32(1))
        let newPriority = try await t.info().priority
        XCTAssertEqual(newPriority, 1)
        let after = try await snapshot()
        XCTAssertEqual(after, before)
    }

    /// Upload refuses bad options, a missing file and a bad scheme, and changes nothing.
    func testUploadRefusesBadInputAndChangesNothing() async throws {
        let s = try await session()
        let file = work + "/up.txt"
        try "payload".write(toFile: file, atomically: true, encoding: .utf8)
        let before = try await snapshot()
        func upload(_ options: [String: DBusValue]) async throws {
            try await call(s.path, BusClient.sessionInterface, "Upload", [.string(server.url("/up")), .string(file), .vardict(options)])
        }
        await assertBusError(Self.prefix + "InvalidArgument", "Upload form-field with PUT") { try await upload(["form-field": .string("file")]) }
        await assertBusError(Self.prefix + "InvalidArgument", "Upload source-fd of wrong type") { try await upload(["source-fd": .string("3")]) }
        await assertBusError(Self.prefix + "InvalidArgument", "Upload method GET") { try await upload(["method": .string("GET")]) }
        await assertBusError(Self.prefix + "InvalidArgument", "Upload unknown option") { try await upload(["colour": .string("x")]) }
        await assertBusError(Self.prefix + "InvalidArgument", "Upload start of wrong type") { try await upload(["start": .uint32(1)]) }
        await assertBusError(Self.prefix + "FileNotFound", "Upload of a missing file") {
            try await call(s.path, BusClient.sessionInterface, "Upload", [.string(server.url("/up")), .string(work + "/absent.txt"), .vardict([:])])
        }
        await assertBusError(Self.prefix + "UnsupportedScheme", "Upload to ftp") {
            try await call(s.path, BusClient.sessionInterface, "Upload", [.string("ftp://127.0.0.1/up"), .string(file), .vardict([:])])
        }
        let after = try await snapshot()
        XCTAssertEqual(after, before)
        XCTAssertEqual(server.requests.count, 0)
    }

    // MARK: The barrage

    func randomString(_ rng: inout SeededRandom) -> String {
        let pool: [String] = ["", "x", "destination", "headers", "sha256", "/tmp", "http://127.0.0.1:1/", "\r\n", "ü", "a{sv}",
                              String(repeating: "z", count: 300)]
        return pool[Int(rng.next() % UInt64(pool.count))]
    }

    func randomValue(_ rng: inout SeededRandom, depth: Int) -> DBusValue {
        let choice = depth > 3 ? rng.next() % 10 : rng.next() % 16
        switch choice {
        case 0: return .byte(UInt8(truncatingIfNeeded: rng.next()))
        case 1: return .boolean(rng.next() % 2 == 0)
        case 2: return .int16(Int16(truncatingIfNeeded: rng.next()))
        case 3: return .uint32(UInt32(truncatingIfNeeded: rng.next()))
        case 4: return .int32(Int32(truncatingIfNeeded: rng.next()))
        case 5: return .int64(Int64(bitPattern: rng.next()))
        case 6: return .uint64(rng.next())
        case 7: return .double([0, -1, .infinity, .nan, 1e300][Int(rng.next() % 5)])
        case 8: return .string(randomString(&rng))
        case 9: return .objectPath("/org/ferry/Ferry1")
        case 10, 11: return .variant(randomValue(&rng, depth: depth + 1))
        case 12: return .bytes((0..<Int(rng.next() % 8)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
        case 13: return .structure([randomValue(&rng, depth: depth + 1), .string(randomString(&rng))])
        case 14: return .array(element: "v", (0..<Int(rng.next() % 4)).map { _ in .variant(randomValue(&rng, depth: depth + 1)) })
        default: return randomDict(&rng, depth: depth + 1)
        }
    }

    func randomDict(_ rng: inout SeededRandom, depth: Int) -> DBusValue {
        let keys = ["destination", "headers", "sha256", "priority", "connections", "start", "speed-limit", "directory",
                    "retries", "proxy", "persistent", "max-connections-per-host", "request-timeout", "bogus", ""]
        var d: [String: DBusValue] = [:]
        for _ in 0..<Int(rng.next() % 4) {
            d[keys[Int(rng.next() % UInt64(keys.count))]] = randomValue(&rng, depth: depth)
        }
        return .vardict(d)
    }

    /// A barrage of bad calls and random a{sv} payloads: every refusal is a named error,
    /// the daemon stays up, and a normal download still works afterwards.
    func testDaemonSurvivesBarrageOfBadCalls() async throws {
        let s = try await session()
        var rng = SeededRandom(state: 20261122)
        let allowed: (String) -> Bool = { name in
            name.hasPrefix(Self.prefix) || name == StandardErrors.invalidArgs
        }
        for i in 0..<150 {
            let payload = randomDict(&rng, depth: 0)
            do {
                if i % 2 == 0 {
                    _ = try await call(BusClient.managerPath, BusClient.managerInterface, "OpenSession", [.string("com.example.Fuzz\(i % 5)"), payload])
                } else {
                    // The URL 404s, so an accidentally valid payload is harmless.
                    let t = try await call(s.path, BusClient.sessionInterface, "Download", [.string(server.url("/fuzz")), payload])
                    if let p = t.first?.string { _ = try? await call(p, BusClient.transferInterface, "Cancel") }
                }
            } catch let e as BusError {
                XCTAssertTrue(allowed(e.name), "payload \(payload) got \(e.name): \(e.message)")
            }
        }
        // Random argument lists for every method: wrong signatures must be InvalidArgs.
        let methods: [(String, String, String)] = [
            (BusClient.managerPath, BusClient.managerInterface, "OpenSession"),
            (s.path, BusClient.sessionInterface, "Download"),
            (s.path, BusClient.sessionInterface, "ResumeDownload"),
            (s.path, BusClient.sessionInterface, "Upload"),
            (s.path, BusClient.sessionInterface, "AcknowledgeEvents"),
        ]
        for i in 0..<60 {
            let (path, iface, method) = methods[i % methods.count]
            let args = (0..<Int(rng.next() % 3)).map { _ in randomValue(&rng, depth: 1) }
            do {
                _ = try await call(path, iface, method, args)
            } catch let e as BusError {
                XCTAssertTrue(allowed(e.name),
                              "\(method)\(args) got \(e.name): \(e.message)")
            }
        }
        await assertDaemonAlive()

        let body = serve("/after.bin", size: 70_000)
        let t = try await s.download(server.url("/after.bin"), options: ["destination": .string(work + "/after.bin")])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/after.bin", equals: body)
    }
}
