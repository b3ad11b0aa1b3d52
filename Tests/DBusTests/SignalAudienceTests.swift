import DBus
import FerryTestSupport
import XCTest

/// An object with an audience sends its signals to each recipient, addressed, and to
/// nobody else; a recipient that called the service takes them as the service's.
final class SignalAudienceTests: BusTestCase {
    final class Recipients: SignalAudience, @unchecked Sendable { // set before the signals, on the test's thread
        var names: [String]?
        init(_ names: [String]?) { self.names = names }
        func recipients() -> [String]? { names }
    }

    func testAnAudiencesSignalsReachOnlyItsRecipients() async throws {
        let sample = try await startSample()
        let third = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.third"))
        defer { third.close() }
        let rule = MatchRule(sender: Sample.busName, pathNamespace: Sample.rootPath)
        let atClient = try await collect(rule, on: client)
        let atThird = try await collect(MatchRule(pathNamespace: Sample.rootPath), on: third)
        // The client called the service: it knows who answers for Sample.busName.
        try await callSample("Nothing")

        let audience = Recipients([client.uniqueName])
        server.perform { sample.first.audience = audience }
        try server.emitSignal(path: Sample.objectPath, interface: Sample.interfaceName, name: "Pinged", arguments: [.string("private")])
        server.perform { sample.first.setProperties(Sample.interfaceName, ["Volume": .uint32(7)]) }
        let pinged = try await atClient.next(timeout: 5, "the addressed Pinged")
        XCTAssertEqual(pinged.member, "Pinged")
        XCTAssertEqual(pinged.destination, client.uniqueName)
        let changed = try await atClient.next(timeout: 5, "the addressed PropertiesChanged")
        XCTAssertEqual(changed.member, "PropertiesChanged")

        // Back to broadcast: both hear it; the third heard nothing before.
        server.perform { sample.first.audience = nil }
        try server.emitSignal(path: Sample.objectPath, interface: Sample.interfaceName, name: "Pinged", arguments: [.string("public")])
        let first = try await atThird.next(timeout: 5, "the broadcast at the third")
        XCTAssertEqual(try first.arguments().first?.string, "public", "the third connection heard a private signal")
        let broadcast = try await atClient.next(timeout: 5, "the broadcast at the client")
        XCTAssertNil(broadcast.destination)
    }

    func testAnAddressedSignalFromAnotherPeerIsNotTheServices() async throws {
        try await startSample()
        let atClient = try await collect(MatchRule(sender: Sample.busName, pathNamespace: Sample.rootPath), on: client)
        try await callSample("Nothing")
        let forger = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.forger"))
        defer { forger.close() }
        let forged = try BusMessage.signal(path: Sample.objectPath, interface: Sample.interfaceName, member: "Pinged")
        try forged.append([.string("forged")])
        try forged.setDestination(client.uniqueName)
        forger.send(forged)
        // The bus has passed the forgery on before it answers this.
        _ = try await forger.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.peer, method: "Ping")
        // The service's own, addressed: taken.
        let real = try BusMessage.signal(path: Sample.objectPath, interface: Sample.interfaceName, member: "Pinged")
        try real.append([.string("real")])
        try real.setDestination(client.uniqueName)
        server.send(real)
        let got = try await atClient.next(timeout: 5, "the service's addressed signal")
        XCTAssertEqual(try got.arguments().first?.string, "real", "a peer's addressed signal passed for the service's")
    }

    /// A subscriber that has not called the service yet takes its addressed signals too:
    /// subscribing asked the bus who owns the name.
    func testAnAddressedSignalBeforeAnyCallIsTaken() async throws {
        try await startSample()
        let atClient = try await collect(MatchRule(sender: Sample.busName, pathNamespace: Sample.rootPath), on: client)
        let m = try BusMessage.signal(path: Sample.objectPath, interface: Sample.interfaceName, member: "Pinged")
        try m.append([.string("early")])
        try m.setDestination(client.uniqueName)
        server.send(m)
        let got = try await atClient.next(timeout: 5, "the service's addressed signal before any call")
        XCTAssertEqual(try got.arguments().first?.string, "early")
    }
}
