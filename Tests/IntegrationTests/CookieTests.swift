import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A cookie jar per session: what one answer sets, the next request of the same
/// session sends; kept across a restart for a persistent session only; never shared.
final class CookieTests: FerryTestCase {
    static let secret = "s3cr3t-cookie-value"

    var jarDirectory: String { home + "/.local/state/ferry/cookies" }

    /// Downloads `path` in the session and returns the Cookie header the server saw.
    func fetch(_ s: BusSession, _ path: String) async throws -> String? {
        serve(path, size: 100)
        let name = path.replacingOccurrences(of: "/", with: "_")
        let t = try await s.download(server.url(path), options: ["destination": .string(work + "/" + name + UUID().uuidString)])
        // Polled, not by its Completed signal: an ephemeral session's transfer ids
        // are handed out again after a restart, so an old signal may share the path.
        let deadline = Date().addingTimeInterval(20)
        var info = try await t.info()
        while !info.isFinal, Date() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
            info = try await t.info()
        }
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        return server.requests(for: path).last?.header("Cookie")
    }

    func login(_ s: BusSession) async throws {
        server.set(.setCookie("sid=\(Self.secret); Path=/"), on: "/login")
        let before = try await fetch(s, "/login")
        XCTAssertNil(before, "no cookie before the server set one")
    }

    func testCookieSetByOneResponseIsSentOnTheNextAndNeverLeaks() async throws {
        let s = try await session()
        try await login(s)
        let cookie = try await fetch(s, "/next")
        XCTAssertEqual(cookie, "sid=\(Self.secret)")
        // Its jar is private to the user.
        let jars = try FileManager.default.contentsOfDirectory(atPath: jarDirectory)
        XCTAssertEqual(jars.count, 1)
        let mode = (try FileManager.default.attributesOfItem(atPath: jarDirectory + "/" + jars[0]))[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o600)
        // Cookie values never reach the bus or the log.
        XCTAssertFalse(signals.all.contains { $0.description.contains(Self.secret) }, "a signal carried the cookie")
        let props = try await s.properties()
        XCTAssertFalse("\(props)".contains(Self.secret))
        XCTAssertFalse(ferryd?.log.contains(Self.secret) ?? true, "the log shows the cookie")
    }

    func testSessionsNeverShareCookiesAndTheSettingTurnsThemOff() async throws {
        let a = try await session("com.example.A")
        try await login(a)
        let b = try await session("com.example.B")
        let inB = try await fetch(b, "/b")
        XCTAssertNil(inB, "another session's cookie was sent")
        let off = try await session("com.example.Off", ["cookies": .boolean(false)])
        server.set(.setCookie("other=1; Path=/"), on: "/off-login")
        _ = try await fetch(off, "/off-login")
        let inOff = try await fetch(off, "/off")
        XCTAssertNil(inOff, "cookies=false keeps no cookie")
        let config = try await off.properties()["Configuration"]
        XCTAssertEqual(config?.unwrapped.dictValue("cookies")?.bool, false)
    }

    func testPersistentSessionKeepsCookiesAcrossRestartEphemeralDoesNot() async throws {
        let kept = try await session("com.example.Kept")
        try await login(kept)
        let gone = try await session("com.example.Gone", ["persistent": .boolean(false)])
        server.set(.setCookie("eph=\(Self.secret); Path=/"), on: "/eph-login")
        _ = try await fetch(gone, "/eph-login")
        let sameRun = try await fetch(gone, "/eph-next")
        XCTAssertEqual(sameRun, "eph=\(Self.secret)", "an ephemeral session keeps cookies in memory")

        try await stopFerryd()
        try await startFerryd()
        let keptAgain = try await session("com.example.Kept")
        let afterRestart = try await fetch(keptAgain, "/after")
        XCTAssertEqual(afterRestart, "sid=\(Self.secret)")
        let goneAgain = try await session("com.example.Gone", ["persistent": .boolean(false)])
        let ephemeralAfter = try await fetch(goneAgain, "/eph-after")
        XCTAssertNil(ephemeralAfter, "an ephemeral session's cookies vanish with the daemon")

        // Closing the session deletes its jar.
        try await keptAgain.close(cancelTransfers: true)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, !((try? FileManager.default.contentsOfDirectory(atPath: jarDirectory)) ?? []).isEmpty {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: jarDirectory), [], "the closed session's jar is gone")
    }
}

private extension DBusValue {
    /// The value of `key` in an `a{sv}`.
    func dictValue(_ key: String) -> DBusValue? {
        guard case .dictionary(_, _, let entries) = self else { return nil }
        return entries.first { $0.key.string == key }?.value.unwrapped
    }
}
