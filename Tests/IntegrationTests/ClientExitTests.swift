import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The session key `on-client-exit` (contract v1.2): what a session's unfinished
/// transfers do when the last bus connection that opened or used the session leaves the
/// bus. Each app here is a connection of its own, closed to leave the bus; the test's own
/// connection only reads properties (which is not using a session).
final class ClientExitTests: FerryTestCase {
    /// An app's connection, its session opened with `on-client-exit` = `policy`.
    private func app(_ identifier: String, _ policy: String?) async throws -> (BusClient, BusSession) {
        let connection = try BusClient(address: bus.address)
        let configuration: [String: DBusValue] = policy.map { ["on-client-exit": .string($0)] } ?? [:]
        return (connection, try await connection.openSession(identifier, configuration: configuration))
    }

    /// A download the server stalls (it stays running), started through `session`.
    private func stalled(_ name: String, in session: BusSession) async throws -> (FerryTransfer, [UInt8]) {
        let body = serve("/\(name)", size: stalledSize)
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: "/\(name)")
        let t = try await session.download(server.url("/\(name)"), options: ["destination": .string(work + "/" + name)])
        // Followed from the test's connection, which does not use the session.
        let seen = client.transfer(id: BusClient.transferID(t.path))
        try await waitForState(seen, "running")
        try await waitForFileSize(work + "/" + name + ".part", atLeast: stalledCut)
        return (seen, body)
    }

    /// A download in a `pause` session of `connection`'s own: once it is paused after the
    /// connection closed, ferryd has handled that departure.
    private func departureMarker(_ connection: BusClient, _ name: String) async throws -> FerryTransfer {
        let own = try await connection.openSession("com.example.Marker.\(name)", configuration: ["on-client-exit": .string("pause")])
        return try await stalled("marker-\(name).bin", in: own).0
    }

    /// `pause`: the app's connection leaves, its running download pauses (the one the
    /// user paused stays as it is); the app opening the session again resumes the
    /// first, which completes, and not the second.
    func testPauseWhenTheLastClientLeavesAndResumeWhenItComesBack() async throws {
        let (connection, s) = try await app("com.example.Pausing", "pause")
        let (t, body) = try await stalled("running.bin", in: s)
        let (userPaused, _) = try await stalled("user-paused.bin", in: s)
        _ = try await connection.transfer(id: BusClient.transferID(userPaused.path)).pause()
        try await waitForState(userPaused, "paused")

        connection.close()
        try await waitForState(t, "paused")
        XCTAssertEqual(fileSize(work + "/running.bin.part"), stalledCut, "paused, its partial file is kept")

        let (back, again) = try await app("com.example.Pausing", nil)
        defer { back.close() }
        XCTAssertEqual(again.path, s.path)
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/running.bin", equals: body)
        let userPausedState = try await userPaused.info().state
        XCTAssertEqual(userPausedState, "paused", "a transfer the user paused stays paused")
    }

    /// `pause` leaves a POST upload whose body is out running: paused, and resumed when
    /// the app comes back, it would reach the server twice. (The server has the whole
    /// body and holds its answer; the same connection's other `pause` session shows
    /// when the departure has been handled.)
    func testPauseLetsAPOSTAwaitingItsAnswerRunOn() async throws {
        let (connection, s) = try await app("com.example.Posting", "pause")
        let file = work + "/form.bin"
        FileManager.default.createFile(atPath: file, contents: Data(repeating: 9, count: 20_000))
        server.set(.acceptUploads(status: 201, body: Array("stored".utf8)), on: "/form")
        server.set(.holdAnswers, on: "/form")
        let posted = try await s.upload(server.url("/form"), file: file, options: ["method": .string("POST")])
        let t = client.transfer(id: BusClient.transferID(posted.path))
        try await waitUntilAsync("the server to have the whole POST") { server.uploads(for: "/form").count == 1 }
        try await waitForBytesTransferred(t, atLeast: 20_000)
        let marker = try await departureMarker(connection, "post")
        connection.close()
        try await waitForState(marker, "paused")
        let state = try await t.info().state
        XCTAssertEqual(state, "running", "the POST awaiting its answer runs on")
        server.release("/form")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(server.requests(for: "/form").count, 1, "sent once")
    }

    /// `cancel`: the app leaves, its download is cancelled and its partial file goes.
    func testCancelWhenTheLastClientLeaves() async throws {
        let (connection, s) = try await app("com.example.Cancelling", "cancel")
        let (t, _) = try await stalled("cancelled.bin", in: s)
        connection.close()
        let completed = try await signals.completed(t.path)
        XCTAssertEqual(completed.errorName, "org.ferry.Ferry1.Error.Cancelled")
        let tState = try await t.info().state
        XCTAssertEqual(tState, "cancelled")
        XCTAssertFalse(exists(work + "/cancelled.bin.part"))
    }

    /// `continue` (the default): the app leaves and its download keeps running. The same
    /// connection's `pause` session shows when its departure has been handled.
    func testContinueKeepsRunning() async throws {
        let connection = try BusClient(address: bus.address)
        let keeps = try await connection.openSession("com.example.Continuing")
        let (t, _) = try await stalled("continues.bin", in: keeps)
        let m = try await departureMarker(connection, "continue")
        connection.close()
        try await waitForState(m, "paused")
        let tState = try await t.info().state
        XCTAssertEqual(tState, "running")
        let config = try await getProperty(keeps.path, "org.ferry.Ferry1.Session", "Configuration")?.vardict
        XCTAssertEqual(config?["on-client-exit"]?.string, "continue", "the default")
    }

    /// Two connections use the session: the policy applies only when the second leaves too.
    /// The first's departure shows through its own `pause` session.
    func testPolicyWaitsForTheLastOfSeveralClients() async throws {
        let (first, shared) = try await app("com.example.Shared", "pause")
        let second = try BusClient(address: bus.address)
        _ = try await second.openSession("com.example.Shared")
        let (t, _) = try await stalled("shared.bin", in: shared)
        let m = try await departureMarker(first, "first")

        first.close()
        try await waitForState(m, "paused")
        let tState = try await t.info().state
        XCTAssertEqual(tState, "running", "another client still uses the session")

        second.close()
        try await waitForState(t, "paused")
    }

    /// A connection that only acts on a transfer of a session (cancels one) uses it too;
    /// so does one that only calls the session (lists its transfers). Each holds its
    /// session's transfers going after the opener left, until it leaves itself.
    func testActingOnATransferOrTheSessionCountsAsUsingIt() async throws {
        let (opener, acted) = try await app("com.example.Acted", "pause")
        let listed = try await opener.openSession("com.example.Listed", configuration: ["on-client-exit": .string("pause")])
        let (a, _) = try await stalled("acted.bin", in: acted)
        let (other, _) = try await stalled("other.bin", in: acted)
        let (b, _) = try await stalled("listed.bin", in: listed)
        let actor = try BusClient(address: bus.address)
        try await actor.transfer(id: BusClient.transferID(other.path)).cancel()
        let lister = try BusClient(address: bus.address)
        _ = try await BusSession(client: lister, path: listed.path).listTransfers()
        let openerGone = try await departureMarker(opener, "opener")
        let actorGone = try await departureMarker(actor, "actor")

        opener.close()
        try await waitForState(openerGone, "paused")
        let aState = try await a.info().state, bState = try await b.info().state
        XCTAssertEqual(aState, "running", "the connection that cancelled one of its transfers is still on the bus")
        XCTAssertEqual(bState, "running", "the connection that listed its transfers is still on the bus")

        actor.close()
        try await waitForState(actorGone, "paused")
        try await waitForState(a, "paused")
        let bStill = try await b.info().state
        XCTAssertEqual(bStill, "running")
        lister.close()
        try await waitForState(b, "paused")
    }

    /// A value other than continue, pause or cancel is refused with InvalidArgument and
    /// changes nothing; the policy is stored with the session, and so is the mark of what
    /// it paused: after kill -9 the app opening the session again resumes its download.
    func testInvalidValuesAreRefusedAndThePolicySurvivesARestart() async throws {
        let connection = try BusClient(address: bus.address)
        for bad: DBusValue in [.string("stop"), .string(""), .string("PAUSE"), .boolean(true)] {
            await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "on-client-exit \(bad)") {
                try await connection.openSession("com.example.Bad", configuration: ["on-client-exit": bad])
            }
        }
        let bad = try await client.managedObjects().session(identifier: "com.example.Bad")
        XCTAssertNil(bad, "a refused OpenSession makes no session")

        let s = try await connection.openSession("com.example.Lasting", configuration: ["on-client-exit": .string("pause")])
        let (t, body) = try await stalled("lasting.bin", in: s)
        connection.close()
        try await waitForState(t, "paused")

        try await killAndRestart()
        let config = try await getProperty(s.path, "org.ferry.Ferry1.Session", "Configuration")?.vardict
        XCTAssertEqual(config?["on-client-exit"]?.string, "pause")
        let tState = try await t.info().state
        XCTAssertEqual(tState, "paused")

        let back = try BusClient(address: bus.address)
        defer { back.close() }
        _ = try await back.openSession("com.example.Lasting")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/lasting.bin", equals: body)
    }
}
