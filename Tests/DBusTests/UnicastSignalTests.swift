import DBus
import FerryTestSupport
import XCTest

/// A signal a peer addresses to us is delivered whatever our match rules say: it must
/// not pass for the bus's own (a NameOwnerChanged saying a client left) or for a
/// service's broadcast.
final class UnicastSignalTests: BusTestCase {
    func testSignalsAddressedToUsByPeersAreDropped() async throws {
        let fromBus = try await collect(MatchRule(sender: StandardNames.bus, interface: StandardNames.bus, member: "NameOwnerChanged"), on: server)
        let anyone = try await collect(MatchRule(interface: "org.ferry.Test.Events", member: "Happened"), on: server)

        // A peer's forgeries, addressed to the server: the bus's signal, and a broadcast's.
        let forged = try BusMessage.signal(path: StandardNames.busPath, interface: StandardNames.bus, member: "NameOwnerChanged")
        try forged.append([.string("org.ferry.Forged"), .string(":1.999"), .string("")])
        try forged.setDestination(server.uniqueName)
        client.send(forged)
        let direct = try BusMessage.signal(path: "/org/ferry/Test", interface: "org.ferry.Test.Events", member: "Happened")
        try direct.append([.string("addressed")])
        try direct.setDestination(server.uniqueName)
        client.send(direct)
        // The same broadcast, as the bus routes it by the server's rule: delivered.
        let broadcast = try BusMessage.signal(path: "/org/ferry/Test", interface: "org.ferry.Test.Events", member: "Happened")
        try broadcast.append([.string("broadcast")])
        client.send(broadcast)
        // A real NameOwnerChanged, from the bus, after the forgeries.
        let third = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.third"))
        defer { third.close() }
        _ = try await third.requestName("org.ferry.Real")

        let real = try await fromBus.next(timeout: 5, "the bus's NameOwnerChanged")
        XCTAssertEqual(real.sender, StandardNames.bus)
        let realArgs = try real.arguments()
        XCTAssertNotEqual(realArgs.first?.string, "org.ferry.Forged", "the forged NameOwnerChanged was taken for the bus's")
        let delivered = try await anyone.next(timeout: 5, "the broadcast")
        XCTAssertEqual(try delivered.arguments().first?.string, "broadcast", "the signal addressed by a peer was handled")
        // Nothing else came: a round trip through the bus after the forgeries has ended.
        _ = try await client.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.peer, method: "Ping")
        _ = try await server.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.peer, method: "Ping")
        let extra = try? await anyone.next(timeout: 0.3, "no more")
        XCTAssertNil(extra, "a signal addressed by a peer reached a subscription")
    }
}
