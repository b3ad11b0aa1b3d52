import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Secrets a client gives ferryd (request headers, proxy and URL credentials) reach
/// the server they are for, and nothing else: not the bus (properties, replies, the
/// broadcast signals any `dbus-monitor` sees), not the log, not the CLI's output, not
/// a state file another user could read.
final class SecretsTests: FerryTestCase {
    static let authorization = "Bearer tok-AUTH-5e4a1"
    static let apiKey = "key-CUSTOM-77c2"
    static let proxyPassword = "pw-PROXY-0b3d"
    static let urlPassword = "pw-URL-91ee"
    static let transferSecret = "tx-HEADER-a0f9"
    /// Every string that must not leave ferryd except towards the server.
    static let secrets = [authorization, apiKey, proxyPassword, urlPassword, transferSecret, "proxyuser", "urluser"]

    /// Starts `dbus-monitor` on the private bus and waits (bounded) until it prints.
    func startMonitor() async throws -> ChildProcess {
        let monitor = try ChildProcess(executable: "dbus-monitor", arguments: ["--address", bus.address, "--monitor"],
                                       environment: environment())
        cleanups.append { monitor.kill(SIGTERM); _ = monitor.waitForExit(timeout: 5) }
        extraLogs.append { monitor.stderr }
        let deadline = Date().addingTimeInterval(10)
        while monitor.stdout.isEmpty {
            guard Date() < deadline, monitor.isRunning else { throw TimedOut(description: "dbus-monitor did not start\n\(monitor.log)") }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        return monitor
    }

    /// The messages in dbus-monitor's output that `sender` sent (each block starts with
    /// an unindented header line naming the sender).
    func messages(in output: String, from sender: String) -> String {
        var out: [Substring] = []
        var keep = false
        for line in output.split(separator: "\n", omittingEmptySubsequences: false) {
            if let first = line.first, first != " " { keep = line.contains("sender=\(sender) ") }
            if keep { out.append(line) }
        }
        return out.joined(separator: "\n")
    }

    func assertNoSecrets(in text: String, _ place: String, file: StaticString = #filePath, line: UInt = #line) {
        for secret in Self.secrets where text.contains(secret) {
            XCTFail("\(place) shows the secret '\(secret)'", file: file, line: line)
        }
    }

    func testSecretsStayOffTheBusTheLogAndTheDisk() async throws {
        let monitor = try await startMonitor()
        let body = serve("/secret.bin", size: 5_000)
        let port = URL(string: server.url("/"))!.port!
        let credentialURL = "http://urluser:\(Self.urlPassword)@127.0.0.1:\(port)/secret.bin"

        // Session A: secret headers and a proxy with a password (nothing listens there,
        // so its transfer fails, and the failure is reported).
        let a = try await session("com.example.SecretA", [
            "headers": .stringDict(["Authorization": Self.authorization, "X-Api-Key": Self.apiKey]),
            "proxy": .string("http://proxyuser:\(Self.proxyPassword)@127.0.0.1:9"),
            "retries": .uint32(0),
        ])
        let viaProxy = try await a.download(server.url("/secret.bin"), options: ["destination": .string(work + "/proxy.bin")])
        // (The test environment may bypass proxies for loopback: either way it ends.)
        try await signals.completed(viaProxy.path)

        // Session B: credentials in the URL and a transfer header; this one succeeds.
        let b = try await session("com.example.SecretB")
        let good = try await b.download(credentialURL, options: [
            "destination": .string(work + "/good.bin"), "headers": .stringDict(["X-Transfer-Secret": Self.transferSecret]),
        ])
        let info = try await finish(good)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/good.bin", equals: body)
        // The secrets did reach the server: the daemon kept the real values.
        let request = server.requests.last { $0.path == "/secret.bin" }
        let basic = "Basic " + Data("urluser:\(Self.urlPassword)".utf8).base64EncodedString()
        XCTAssertEqual(request?.header("Authorization"), basic, "the URL's credentials went to the server")
        XCTAssertEqual(request?.header("X-Transfer-Secret"), Self.transferSecret)

        // A paused transfer pointed at a URL with credentials (PropertiesChanged on Url).
        let paused = try await b.download(server.url("/elsewhere.bin"), options: [
            "destination": .string(work + "/paused.bin"), "start": .boolean(false),
        ])
        let mark = signals.all.count
        try await call(paused.path, BusClient.transferInterface, "SetUrl", [.string(credentialURL)])
        try await signals.wait("Url change on \(paused.path)", timeout: 10) { s in
            s.dropFirst(mark).contains { $0.path == paused.path && $0.changed["Url"] != nil }
        }
        // Refused calls that carry secrets: the error messages must not echo them.
        var refusals: [String] = []
        let refused: [(String, [DBusValue])] = [
            ("Download", [.string("http://urluser:\(Self.urlPassword)@exa mple.com/x"), .vardict([:])]),
            ("Download", [.string(server.url("/x")), .vardict(["headers": .stringDict(["Authorization": Self.authorization + "\r\n"])])]),
        ]
        for (method, args) in refused {
            do {
                try await call(b.path, BusClient.sessionInterface, method, args)
                XCTFail("\(method) with a bad value was accepted")
            } catch let e as BusError {
                refusals.append("\(e.name): \(e.message)")
            }
        }
        do {
            _ = try await client.openSession("com.example.SecretC", configuration: ["proxy": .string("ftp://proxyuser:\(Self.proxyPassword)@h")])
            XCTFail("an ftp proxy was accepted")
        } catch let e as BusError {
            refusals.append("\(e.name): \(e.message)")
        }
        assertNoSecrets(in: refusals.joined(separator: "\n"), "error replies")

        // What any client can read.
        let configuration = try await getProperty(a.path, BusClient.sessionInterface, "Configuration")?.vardict ?? [:]
        XCTAssertEqual(configuration["headers"]?.stringDict, ["Authorization": "(hidden)", "X-Api-Key": "(hidden)"],
                       "header names stay visible, values do not")
        XCTAssertEqual(configuration["proxy"]?.string, "http://127.0.0.1:9", "the proxy without its credentials")
        assertNoSecrets(in: "\(configuration)", "Get Configuration")
        let url = try await getProperty(good.path, BusClient.transferInterface, "Url")?.string
        XCTAssertEqual(url, "http://127.0.0.1:\(port)/secret.bin", "Url without user:password@")
        let pausedURL = try await getProperty(paused.path, BusClient.transferInterface, "Url")?.string
        XCTAssertEqual(pausedURL, "http://127.0.0.1:\(port)/secret.bin")
        var readable: [String] = []
        for path in [a.path, b.path, viaProxy.path, good.path, paused.path] {
            let iface = path.contains("/session/") ? BusClient.sessionInterface : BusClient.transferInterface
            readable.append("\(try await call(path, StandardNames.properties, "GetAll", [.string(iface)]))")
        }
        assertNoSecrets(in: readable.joined(separator: "\n"), "GetAll")
        let managed = try await call(BusClient.managerPath, StandardNames.objectManager, "GetManagedObjects")
        assertNoSecrets(in: "\(managed)", "GetManagedObjects")
        XCTAssertTrue("\(managed)".contains("(hidden)"), "GetManagedObjects holds the sessions' configurations")
        let columns = try await call(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties", [.stringArray([])])
        assertNoSecrets(in: "\(columns)", "ListTransferProperties")
        XCTAssertTrue("\(columns)".contains("127.0.0.1:\(port)/secret.bin"), "ListTransferProperties holds the transfers' URLs")
        for s in [a, b] {
            let events = try await call(s.path, BusClient.sessionInterface, "PendingEvents")
            assertNoSecrets(in: "\(events)", "PendingEvents of \(s.path)")
        }

        // The broadcast signals: InterfacesAdded, PropertiesChanged, Completed…
        let recorded = signals.all.map(\.description).joined(separator: "\n")
        XCTAssertTrue(recorded.contains("InterfacesAdded"), "the recorder saw the objects appear")
        assertNoSecrets(in: recorded, "signals")
        // …and everything ferryd sent, as a monitor of the bus sees it.
        let owner = try await client.bus.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                              method: "GetNameOwner", arguments: [.string(BusClient.busName)]).first?.string ?? "?"
        _ = try await call(BusClient.managerPath, StandardNames.peer, "Ping")
        let sent = messages(in: monitor.stdout, from: owner)
        XCTAssertTrue(sent.contains("InterfacesAdded") && sent.contains("PropertiesChanged"),
                      "dbus-monitor recorded ferryd's messages:\n\(sent.prefix(2000))")
        assertNoSecrets(in: sent, "messages ferryd sent (dbus-monitor)")

        // The CLI reads the bus.
        let ls = try ferry(["ls", "--json"])
        XCTAssertEqual(ls.status, 0, ls.stderr)
        XCTAssertTrue(ls.stdout.contains("secret.bin"), ls.stdout)
        assertNoSecrets(in: ls.stdout + ls.stderr, "ferry ls --json")
        for t in [viaProxy, good, paused] {
            let id = String(t.path.split(separator: "/").last!)
            let show = try ferry(["show", id])
            XCTAssertEqual(show.status, 0, show.stderr)
            assertNoSecrets(in: show.stdout + show.stderr, "ferry show \(id)")
        }

        // ferryd's log (it runs with --verbose: every refused call is logged).
        assertNoSecrets(in: ferryd?.log ?? "", "ferryd's log")

        // The state on disk holds the secrets (it must, to resume after a restart), so
        // only the user may read it.
        let stateDirectory = home + "/.local/state/ferry"
        XCTAssertEqual(mode(stateDirectory), 0o700, "the state directory")
        let files = try FileManager.default.contentsOfDirectory(atPath: stateDirectory)
        XCTAssertTrue(files.contains("ferry.sqlite"), "\(files)")
        for name in files {
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: stateDirectory + "/" + name, isDirectory: &isDirectory)
            XCTAssertEqual(mode(stateDirectory + "/" + name), isDirectory.boolValue ? 0o700 : 0o600, "\(name) is private to the user")
        }
        XCTAssertTrue(files.contains("ferry.sqlite-wal"), "the WAL is checked too: \(files)")
        XCTAssertFalse(files.contains("ferry.sqlite-shm"), "ferryd alone opens it (exclusive locking): no shared index file")
        XCTAssertTrue(files.contains("resume-key"), "the key that seals resume data is checked too: \(files)")
    }

    func mode(_ path: String) -> mode_t? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return st.st_mode & 0o777
    }
}
