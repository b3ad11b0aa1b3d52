import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

final class SessionTests: FerryTestCase {
    /// OpenSession makes /org/ferry/Ferry1/session/N; the same identifier re-attaches,
    /// replacing only the configuration keys it passes.
    func testOpenSessionReattachesAndMergesConfiguration() async throws {
        let a = try await session("com.example.A", ["directory": .string(work), "retries": .uint32(2)])
        XCTAssertNotNil(a.path.range(of: #"^/org/ferry/Ferry1/session/[0-9]+$"#, options: .regularExpression), a.path)

        var config = try await a.properties()["Configuration"]?.vardict ?? [:]
        XCTAssertEqual(config["directory"]?.string, work)
        XCTAssertEqual(config["retries"]?.uint32, 2)
        // Defaults of the keys not given.
        XCTAssertEqual(config["persistent"]?.bool, true)
        XCTAssertEqual(config["max-connections-per-host"]?.uint32, 6)
        XCTAssertEqual(config["request-timeout"]?.double, 60)
        XCTAssertEqual(config["resource-timeout"]?.double, 604800)
        XCTAssertEqual(config["allow-metered"]?.bool, true)
        XCTAssertEqual(config["notify"]?.bool, true)
        XCTAssertEqual(config["speed-limit"]?.uint64, 0)

        let again = try await session("com.example.A", ["retries": .uint32(3), "notify": .boolean(false)])
        XCTAssertEqual(again.path, a.path, "same identifier, same session")
        config = try await a.properties()["Configuration"]?.vardict ?? [:]
        XCTAssertEqual(config["retries"]?.uint32, 3, "a key present replaces the stored value")
        XCTAssertEqual(config["notify"]?.bool, false)
        XCTAssertEqual(config["directory"]?.string, work, "an absent key keeps the stored value")

        let b = try await session("com.example.B")
        XCTAssertNotEqual(b.path, a.path)
        let bProps = try await b.properties()
        XCTAssertEqual(bProps["Identifier"]?.string, "com.example.B")
        XCTAssertEqual(bProps["Configuration"]?.vardict?["directory"]?.string, downloads,
                       "the default directory is the XDG download directory")
        let listed = try await client.listSessions().map(\.path)
        XCTAssertEqual(Set(listed), [a.path, b.path])
        let aProps = try await a.properties()
        XCTAssertEqual(aProps["ActiveTransfers"]?.uint32, 0)
    }

    /// Session ids are never reused: after Close, a new session gets a new path.
    func testClosedSessionPathIsNotReused() async throws {
        let a = try await session("com.example.A")
        try await a.close(cancelTransfers: true)
        try await signals.wait("InterfacesRemoved for \(a.path)") { s in
            s.contains { $0.member == "InterfacesRemoved" && $0.args.first?.string == a.path }
        }
        let sessions = try await client.listSessions().map(\.path)
        XCTAssertEqual(sessions, [])
        await assertBusError("org.ferry.Ferry1.Error.NoSuchSession", "PendingEvents on a closed session") { try await a.pendingEvents() }
        let again = try await session("com.example.A")
        XCTAssertNotEqual(again.path, a.path, "session numbers are never reused")
    }
}
