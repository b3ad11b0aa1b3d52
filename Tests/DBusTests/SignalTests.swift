import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// Subscribing to signals by match rule.
final class SignalTests: BusTestCase {
    /// The string argument of each message, sorted (signals from different
    /// connections may arrive in either order).
    private func texts(_ box: Mailbox<BusMessage>) -> [String] {
        box.queued.map { (try? $0.arguments().first?.string) ?? "?" }.sorted()
    }

    private func emit(_ path: String, _ interface: String, _ member: String, _ text: String) throws {
        try server.emitSignal(path: path, interface: interface, name: member, arguments: [.string(text)])
    }

    func testMatchRules() async throws {
        let byPath = try await collect(MatchRule(path: "/a/b"))
        let byNamespace = try await collect(MatchRule(pathNamespace: "/a"))
        let byInterface = try await collect(MatchRule(interface: "org.ferry.Test.Other"))
        let byMember = try await collect(MatchRule(member: "Beep"))
        let bySender = try await collect(MatchRule(sender: server.uniqueName, member: "Ping"))
        let combined = try await collect(MatchRule(pathNamespace: "/a", interface: "org.ferry.Test.Sig", member: "Ping"))
        let done = try await collect(MatchRule(path: "/done", member: "Done"))

        // A third connection sends too; a sender rule must leave its signals out.
        let other = try BusConnection(address: bus.address)
        defer { other.close() }
        try other.emitSignal(path: "/a/b", interface: "org.ferry.Test.Sig", name: "Ping", arguments: [.string("0")])

        try emit("/a/b", "org.ferry.Test.Sig", "Ping", "1")
        try emit("/a/c/d", "org.ferry.Test.Sig", "Ping", "2")
        try emit("/ab", "org.ferry.Test.Sig", "Ping", "3")
        try emit("/x", "org.ferry.Test.Other", "Ping", "4")
        try emit("/x", "org.ferry.Test.Sig", "Beep", "5")
        try emit("/a", "org.ferry.Test.Other", "Beep", "6")
        // `other` sent first, but through a different connection; wait for its signal too.
        let otherDone = try await collect(MatchRule(sender: other.uniqueName, path: "/done", member: "Done"))
        try other.emitSignal(path: "/done", interface: "org.ferry.Test.Sig", name: "Done", arguments: [.string("other")])
        _ = try await otherDone.next(timeout: 5, "Done from the other connection")
        try emit("/done", "org.ferry.Test.Sig", "Done", "end")
        _ = try await done.next(timeout: 5, "Done")
        _ = try await done.next(timeout: 5, "Done")

        XCTAssertEqual(texts(byPath), ["0", "1"])
        XCTAssertEqual(texts(byNamespace), ["0", "1", "2", "6"])
        XCTAssertEqual(texts(byInterface), ["4", "6"])
        XCTAssertEqual(texts(byMember), ["5", "6"])
        XCTAssertEqual(texts(bySender), ["1", "2", "3", "4"])
        XCTAssertEqual(texts(combined), ["0", "1", "2"])
    }

    func testUnsubscribe() async throws {
        let kept = Mailbox<BusMessage>()
        let dropped = Mailbox<BusMessage>()
        _ = try await client.subscribe(MatchRule(pathNamespace: "/s")) { kept.put($0) }
        let subscription = try await client.subscribe(MatchRule(path: "/s/t")) { dropped.put($0) }

        try emit("/s/t", "org.ferry.Test.Sig", "Ping", "before")
        let before = try await dropped.next(timeout: 5, "the first signal")
        XCTAssertEqual(try before.arguments(), [.string("before")])
        _ = try await kept.next(timeout: 5, "the first signal")

        client.unsubscribe(subscription)
        try emit("/s/t", "org.ferry.Test.Sig", "Ping", "after")
        // Handlers run in turn on the client's queue: once the next signal has
        // reached `kept`, every handler is done with the one before.
        try emit("/s/u", "org.ferry.Test.Sig", "Ping", "sentinel")
        _ = try await kept.next(timeout: 5, "the second signal")
        _ = try await kept.next(timeout: 5, "the sentinel")
        XCTAssertEqual(texts(dropped), [], "no signal after unsubscribing")

        // Unsubscribing twice is harmless.
        client.unsubscribe(subscription)
        try emit("/s/u", "org.ferry.Test.Sig", "Ping", "again")
        _ = try await kept.next(timeout: 5, "the third signal")
    }

    func testSignalsFromExportedObject() async throws {
        try await startSample()
        let pinged = try await collect(MatchRule(sender: Sample.busName, interface: Sample.interfaceName, member: "Pinged"))
        try server.emitSignal(path: Sample.objectPath, interface: Sample.interfaceName, name: "Pinged", arguments: [.string("hi")])
        let m = try await pinged.next(timeout: 5, "Pinged")
        XCTAssertEqual(m.type, .signal)
        XCTAssertEqual(m.path, Sample.objectPath)
        XCTAssertEqual(m.interface, Sample.interfaceName)
        XCTAssertEqual(m.member, "Pinged")
        XCTAssertEqual(m.sender, server.uniqueName)
        XCTAssertEqual(try m.arguments(), [.string("hi")])
    }

    func testInvalidSignalsThrow() {
        XCTAssertThrowsError(try server.emitSignal(path: "bad", interface: "a.b", name: "S"))
        XCTAssertThrowsError(try server.emitSignal(path: "/a", interface: "a.b", name: "S", arguments: [.structure([])]))
    }

    func testSubscribingWithABadRuleFails() async throws {
        // The bus refuses a rule it cannot parse; nothing is left registered.
        await assertBusError("org.freedesktop.DBus.Error.MatchRuleInvalid") {
            _ = try await self.client.subscribe(MatchRule(path: "not a path")) { _ in }
        }
    }

    func testSubscribingToSeveralRulesIsAllOrNone() async throws {
        // A bus that lets a connection hold three rules: four are refused, and the
        // three added before the refusal are taken back, so three fit afterwards.
        let small = try PrivateBus(maxMatchRulesPerConnection: 3)
        defer { small.stop() }
        let listener = try BusConnection(address: small.address)
        defer { listener.close() }
        let sender = try BusConnection(address: small.address)
        defer { sender.close() }
        let heard = Mailbox<String>()
        func rule(_ n: Int) -> (MatchRule, @Sendable (BusMessage) -> Void) {
            (MatchRule(path: "/r\(n)"), { m in heard.put("\(n):" + ((try? m.arguments().first?.string) ?? "?")) })
        }
        do {
            _ = try await listener.subscribe(all: (1...4).map(rule))
            XCTFail("a fourth rule was accepted on a bus that allows three")
        } catch let e as BusError {
            XCTAssertEqual(e.name, "org.freedesktop.DBus.Error.LimitsExceeded")
        }
        _ = try await listener.subscribe(all: (1...3).map(rule))
        for n in 1...3 {
            try sender.emitSignal(path: "/r\(n)", interface: "org.ferry.Test.Sig", name: "Ping", arguments: [.string("x")])
        }
        var got: [String] = []
        for _ in 1...3 { got.append(try await heard.next(timeout: 5, "a signal")) }
        XCTAssertEqual(got.sorted(), ["1:x", "2:x", "3:x"], "each handler once")
        // Nothing heard twice: a last signal comes next, not a repeat of one before.
        try sender.emitSignal(path: "/r1", interface: "org.ferry.Test.Sig", name: "Ping", arguments: [.string("end")])
        let last = try await heard.next(timeout: 5, "the last signal")
        XCTAssertEqual(last, "1:end")
    }
}
