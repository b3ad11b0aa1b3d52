import XCTest
@testable import FerryCore

/// Every refused call names the problem with the right error and changes nothing.
final class ValidationTests: XCTestCase {
    func testSessionIdentifiers() throws {
        let h = CoreHarness()
        for bad in ["", "has space", "slash/no", "ümlaut", String(repeating: "a", count: 256), "semi;colon"] {
            XCTAssertFerryError(try h.openSession(bad), { $0.isInvalidArgument }, bad)
        }
        XCTAssertEqual(h.sync { $0.sessionIDs }, [])
        XCTAssertEqual(h.observer.events, [])
        XCTAssertEqual(try h.openSession(String(repeating: "a", count: 255)), 1, "no id was used up by refused calls")
        XCTAssertEqual(try h.openSession("com.example-app_2.X"), 2)
    }

    func testSessionConfiguration() throws {
        let h = CoreHarness()
        let file = h.root + "/plain-file"
        _ = FileManager.default.createFile(atPath: file, contents: Data())
        let cases: [(String, (inout SessionConfigurationUpdate) -> Void, (CoreError) -> Bool)] = [
            ("relative dir", { $0.directory = "Downloads" }, { $0.isInvalidDestination && $0.message.contains("relative") }),
            ("missing dir", { $0.directory = h.root + "/nope" }, { $0.isInvalidDestination && $0.message.contains("does not exist") }),
            ("file as dir", { $0.directory = file }, { $0.isInvalidDestination && $0.message.contains("not a directory") }),
            ("proxy scheme", { $0.proxy = "ftp://proxy:21" }, { $0.isInvalidArgument && $0.message.contains("'ftp'") }),
            ("proxy garbage", { $0.proxy = "not a proxy" }, { $0.isInvalidArgument }),
            ("proxy no host", { $0.proxy = "http://" }, { $0.isInvalidArgument && $0.message.contains("no host") }),
            ("header name", { $0.headers = ["Bad Name": "x"] }, { $0.isInvalidArgument && $0.message.contains("\"Bad\"… is not valid: it holds U+0020") }),
            ("header CRLF", { $0.headers = ["X-Ok": "a\r\nInjected: 1"] }, { $0.isInvalidArgument && $0.message.contains("X-Ok") }),
            ("header NUL", { $0.headers = ["X-Ok": "a\0b"] }, { $0.isInvalidArgument }),
            ("header reserved", { $0.headers = ["Range": "bytes=0-"] }, { $0.isInvalidArgument }),
            ("timeout 0", { $0.requestTimeout = 0 }, { $0.isInvalidArgument && $0.message.contains("request-timeout") }),
            ("timeout neg", { $0.resourceTimeout = -1 }, { $0.isInvalidArgument && $0.message.contains("resource-timeout") }),
            ("timeout inf", { $0.requestTimeout = .infinity }, { $0.isInvalidArgument }),
            ("timeout nan", { $0.requestTimeout = .nan }, { $0.isInvalidArgument }),
            ("conn 0", { $0.maxConnectionsPerHost = 0 }, { $0.isInvalidArgument }),
            ("conn 257", { $0.maxConnectionsPerHost = 257 }, { $0.isInvalidArgument }),
        ]
        for (name, configure, matches) in cases {
            XCTAssertFerryError(try h.openSession("com.example.A", configure), matches, name)
        }
        XCTAssertEqual(h.sync { $0.sessionIDs }, [])
        XCTAssertEqual(h.observer.events, [])
    }

    func testSecretHeaderValuesAreNeverEchoed() {
        let h = CoreHarness()
        XCTAssertFerryError(try h.openSession("a") { $0.headers = ["Authorization": "Bearer sekrit\n"] }, {
            $0.isInvalidArgument && !$0.message.contains("sekrit")
        })
        // A whole header line given as the name: the name's valid start only.
        XCTAssertFerryError(try h.openSession("a") { $0.headers = ["Authorization: Bearer sekrit": "x"] }, {
            $0.isInvalidArgument && !$0.message.contains("sekrit") && $0.message.contains("\"Authorization\"…")
        })
        XCTAssertFerryError(try h.openSession("a") { $0.headers = ["Authorization: Bearer sekrit": String(repeating: "v", count: 9000)] }, {
            $0.isInvalidArgument && !$0.message.contains("sekrit")
        })
    }

    /// Headers read back (values "(hidden)") and sent again keep their held values;
    /// "(hidden)" for a header the session does not hold is refused (nothing to keep).
    func testHiddenHeaderValuesSentBackKeepTheHeldOnes() throws {
        let h = CoreHarness()
        let id = try h.openSession("a") { $0.headers = ["Authorization": "Bearer sekrit", "X-App": "one"] }
        XCTAssertFerryError(try h.openSession("a") { $0.headers = ["Authorization": "(hidden)", "X-New": "(hidden)"] }, {
            $0.isInvalidArgument && $0.message.contains("X-New")
        })
        XCTAssertFerryError(try h.openSession("b") { $0.headers = ["Authorization": "(hidden)"] }, {
            $0.isInvalidArgument && $0.message.contains("Authorization") && $0.message.contains("'b'")
        })
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.headers }, ["Authorization": "Bearer sekrit", "X-App": "one"], "refused: unchanged")
        _ = try h.openSession("a") { $0.headers = ["authorization": "(hidden)", "X-App": "two"] }
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.headers }, ["authorization": "Bearer sekrit", "X-App": "two"])
        _ = try h.openSession("a") { $0.headers = ["X-App": "three"] }
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.headers }, ["X-App": "three"], "a header left out is dropped")
    }

    func testReattachValidatesAndChangesNothingOnRefusal() throws {
        let h = CoreHarness()
        let id = try h.openSession("a") { $0.maxConnectionsPerHost = 3 }
        XCTAssertFerryError(try h.openSession("a") { $0.maxConnectionsPerHost = 999; $0.speedLimit = 5 }, { $0.isInvalidArgument })
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.maxConnectionsPerHost }, 3)
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.speedLimit }, 0)
        let again = try h.sync { try $0.openSession(identifier: "a", configuration: { var u = SessionConfigurationUpdate(); u.speedLimit = 9; return u }()) }
        XCTAssertEqual(again.id, id)
        XCTAssertFalse(again.created)
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.speedLimit }, 9)
        XCTAssertEqual(h.sync { $0.session(id)?.configuration.maxConnectionsPerHost }, 3, "absent keys keep their values")
        XCTAssertEqual(h.observer.events.filter { if case .sessionChanged = $0 { return true } else { return false } }.count, 1)
    }

    func testDownloadURLs() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        h.observer.clear()
        XCTAssertFerryError(try h.download(s, "ftp://example.com/x"), { $0 == .unsupportedScheme("'ftp' URLs are not supported; only http and https are") })
        XCTAssertFerryError(try h.download(s, "file:///etc/passwd"), { $0.isUnsupportedScheme && $0.message.contains("'file'") })
        XCTAssertFerryError(try h.download(s, ""), { $0.isInvalidUrl })
        XCTAssertFerryError(try h.download(s, "not a url"), { $0.isInvalidUrl })
        XCTAssertFerryError(try h.download(s, "example.com/x"), { $0.isInvalidUrl && $0.message.contains("no scheme") })
        XCTAssertFerryError(try h.download(s, "http://"), { $0.isInvalidUrl && $0.message.contains("no host") })
        XCTAssertFerryError(try h.download(s, "http:///path"), { $0.isInvalidUrl })
        XCTAssertFerryError(try h.download(s, "http://h:0/x"), { $0.isInvalidUrl && $0.message.contains("port") })
        XCTAssertFerryError(try h.download(s, "https://user:hunter2@exa mple.com/"), { $0.isInvalidUrl && !$0.message.contains("hunter2") })
        XCTAssertFerryError(try h.download(99, "https://example.com/x"), { $0.isNoSuchSession })
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
        XCTAssertEqual(h.observer.events, [])
        XCTAssertEqual(h.engine.started, [])
        XCTAssertEqual(try h.download(s), 1, "no id was used up by refused calls")
    }

    func testDownloadOptions() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let file = h.root + "/plain-file"
        _ = FileManager.default.createFile(atPath: file, contents: Data())
        h.observer.clear()
        let cases: [(String, (inout DownloadOptions) -> Void, (CoreError) -> Bool)] = [
            ("sha short", { $0.sha256 = "abc" }, { $0.isInvalidArgument && $0.message.contains("sha256") }),
            ("sha non-hex", { $0.sha256 = String(repeating: "g", count: 64) }, { $0.isInvalidArgument }),
            ("priority", { $0.priority = 2 }, { $0.isInvalidArgument && $0.message.contains("priority is 2") }),
            ("priority low", { $0.priority = -2 }, { $0.isInvalidArgument }),
            ("connections 0", { $0.connections = 0 }, { $0.isInvalidArgument && $0.message.contains("connections") }),
            ("connections 17", { $0.connections = 17 }, { $0.isInvalidArgument }),
            ("header", { $0.headers = ["X": "a\nb"] }, { $0.isInvalidArgument }),
            ("header case twins", { $0.headers = ["Accept": "a", "accept": "b"] }, { $0.isInvalidArgument }),
            ("relative", { $0.destination = "out/file.bin" }, { $0.isInvalidDestination && $0.message.contains("relative") }),
            ("missing parent", { $0.destination = h.root + "/nope/file.bin" }, { $0.isInvalidDestination && $0.message.contains("does not exist") }),
            ("missing dir", { $0.destination = h.root + "/nope/" }, { $0.isInvalidDestination && $0.message.contains("does not exist") }),
            ("parent is a file", { $0.destination = file + "/x" }, { $0.isInvalidDestination && $0.message.contains("not a directory") }),
        ]
        for (name, configure, matches) in cases {
            XCTAssertFerryError(try h.download(s, "https://example.com/f", configure), matches, name)
        }
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
        XCTAssertEqual(h.observer.events, [])
        XCTAssertEqual(h.engine.started, [])
        XCTAssertNoThrow(try h.download(s) { $0.sha256 = String(repeating: "aB", count: 32); $0.connections = 16; $0.priority = -1 })
    }

    func testUnwritableDirectory() throws {
        // Root may write anywhere; /proc/1 refuses even root where it exists.
        let dir = "/proc/1"
        guard FileSystemChecks.isDirectory(dir), !FileManager.default.isWritableFile(atPath: dir) else {
            throw XCTSkip("no unwritable directory available")
        }
        let h = CoreHarness()
        XCTAssertFerryError(try h.openSession("a") { $0.directory = dir }, { $0.isInvalidDestination && $0.message.contains("not writable") })
        let s = try h.openSession()
        XCTAssertFerryError(try h.download(s) { $0.destination = dir + "/file.bin" }, { $0.isInvalidDestination && $0.message.contains("not writable") })
        XCTAssertEqual(try h.sync { try $0.transferIDs() }, [])
    }

    func testTransferLevelRefusals() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        XCTAssertFerryError(try h.sync { try $0.setPriority(t, 5) }, { $0.isInvalidArgument })
        XCTAssertFerryError(try h.sync { try $0.setMaxConcurrentTransfers(0) }, { $0.isInvalidArgument })
        XCTAssertFerryError(try h.sync { try $0.setMaxConcurrentTransfers(257) }, { $0.isInvalidArgument })
        XCTAssertFerryError(try h.sync { try $0.pause(42) }, { $0.isNoSuchTransfer })
        XCTAssertFerryError(try h.sync { try $0.transferIDs(session: 42) }, { $0.isNoSuchSession })
        XCTAssertFerryError(try h.sync { try $0.pendingEvents(session: 42) }, { $0.isNoSuchSession })
        XCTAssertFerryError(try h.sync { try $0.setURL(t, url: "https://example.com/new") }, { $0.isInvalidState }, "running")
        XCTAssertFerryError(try h.sync { try $0.remove(t) }, { $0.isInvalidState })
        XCTAssertFerryError(try h.sync { try $0.resume(t) }, { $0.isInvalidState })
        _ = try h.sync { try $0.pause(t) }
        XCTAssertFerryError(try h.sync { try $0.setURL(t, url: "gopher://x/") }, { $0.isUnsupportedScheme })
        XCTAssertEqual(h.snapshot(t)?.url, "https://example.com/file.bin")
        try h.sync { try $0.setURL(t, url: "https://mirror.example.org/file.bin") }
        XCTAssertEqual(h.snapshot(t)?.url, "https://mirror.example.org/file.bin")
        XCTAssertEqual(h.snapshot(t)?.priority, 0)
        XCTAssertEqual(h.sync { $0.manager.maxConcurrentTransfers }, 6)
    }
}
