import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// `BusConnection.restBetweenReads`: a connection that rests after each read takes
/// what came meanwhile in one go, loses nothing, and still gets its replies.
final class ReadRestTests: BusTestCase {
    private struct Arrival: Sendable {
        let text: String
        let time: TimeInterval
    }

    private func arrivals(_ rule: MatchRule) async throws -> Mailbox<Arrival> {
        let box = Mailbox<Arrival>()
        _ = try await client.subscribe(rule) { m in
            box.put(Arrival(text: (try? m.arguments().first?.string) ?? "?", time: ProcessInfo.processInfo.systemUptime))
        }
        return box
    }

    /// Starts a rest of `rest` seconds on `client` (a signal read), sends `count`
    /// signals of about 210 bytes each on the wire meanwhile and collects them:
    /// checks they all came, in order, none before the rest ended; returns how many
    /// rests came between two of them (each rest between two signals means a new
    /// read), or nil when dbus-daemon had not passed them all on before the rest
    /// ended (a machine too busy for the question).
    private func restsWhileReading(count: Int, rest: Double) async throws -> Int? {
        let box = try await arrivals(MatchRule(path: "/rest", member: "Tick"))
        client.restBetweenReads(rest)
        func tick(_ text: String) throws {
            try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string(text)])
        }
        try tick("first")
        let first = try await box.next(timeout: 10, "the first signal")
        XCTAssertEqual(first.text, "first")
        // The client rests now.
        let padding = String(repeating: "x", count: 100)
        for i in 0..<count { try tick("\(i) \(padding)") }
        // dbus-daemon handles the server's messages in order: once it has answered
        // this, it has passed every signal on (into the client's socket, or its own
        // queue for the client when the socket is full).
        _ = try await server.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                  method: "GetId")
        let allSent = ProcessInfo.processInfo.systemUptime
        var later: [Arrival] = []
        for _ in 0..<count { later.append(try await box.next(timeout: 10 + rest, "a signal sent during the rest")) }

        XCTAssertEqual(later.map { $0.text }, (0..<count).map { "\($0) \(padding)" }, "every signal, in order")
        XCTAssertGreaterThanOrEqual(later[0].time - first.time, rest * 0.9,
                                    "what came during the rest waited for its end")
        guard allSent < first.time + rest * 0.8 else { return nil }
        return zip(later.dropFirst(), later).filter { $0.time - $1.time >= rest * 0.9 }.count
    }

    func testWhatCameDuringARestIsReadInOneGoWhenItEnds() async throws {
        // 30 signals, some 6.4 KB: less than 8 KiB (after which reading goes on
        // without a rest anyway), less than a socketful, three of libdbus's reads.
        guard let rests = try await restsWhileReading(count: 30, rest: 1.0) else {
            throw XCTSkip("dbus-daemon passed the signals on only after the rest ended")
        }
        XCTAssertEqual(rests, 0, "all that waited was read before the next rest, not one libdbus read per rest")
    }

    func testAStreamLargerThanTheSocketComesWholeWithFewRests() async throws {
        // 3,000 signals, some 640 KB: about 18 times what the socket holds (dbus-daemon
        // keeps the rest and writes it as room is made) and some 230 of libdbus's
        // reads. A read that found plenty is followed by the next without a rest:
        // none on a quiet machine, up to 7 with both cores busy. Nothing may be lost
        // or reordered across the reads and rests.
        _ = try await restsWhileReading(count: 3000, rest: 0.2).map { rests in
            XCTAssertLessThanOrEqual(rests, 30, "read on while the socket kept filling, not a little per rest")
        }
    }

    /// A connection let go of while it reads and rests goes away (its watches are let
    /// go of on its queue, after what runs there), and the bus carries on.
    func testAConnectionLetGoOfWhileReadingAndRestingIsFreed() async throws {
        weak var gone: BusConnection?
        do {
            let resting = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.resting"))
            gone = resting
            let box = Mailbox<BusMessage>()
            _ = try await resting.subscribe(MatchRule(path: "/rest", member: "Tick")) { box.put($0) }
            resting.restBetweenReads(0.3)
            try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("a")])
            _ = try await box.next(timeout: 10, "the signal that starts a rest")
            // More on their way as it goes.
            for i in 0..<100 {
                try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("\(i)")])
            }
        }
        XCTAssertTrue(waitUntil(timeout: 10) { gone == nil }, "freed")
        let box = try await collect(MatchRule(path: "/rest", member: "Tick"))
        try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("b")])
        _ = try await box.next(timeout: 10, "a signal after the resting connection went")
    }

    func testCallsMadeWhileRestingGetTheirRepliesAndReadingGoesBackToNormal() async throws {
        try await startSample()
        let box = try await arrivals(MatchRule(path: "/rest", member: "Tick"))
        client.restBetweenReads(0.3)
        try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("a")])
        _ = try await box.next(timeout: 10, "the signal that starts a rest")
        // Replies wait out the rest, as signals do; none is lost, each is its own.
        for i: Int32 in 1...5 {
            let sum = try await callSample("Add", [.int32(i), .int32(10)])
            XCTAssertEqual(sum, [.int32(i + 10)])
        }
        client.restBetweenReads(0)
        try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("b")])
        let b = try await box.next(timeout: 10, "a signal after resting was turned off")
        XCTAssertEqual(b.text, "b")
        let sum = try await callSample("Add", [.int32(2), .int32(2)])
        XCTAssertEqual(sum, [.int32(4)])
    }

    /// A follower that stops resting (its crowd has thinned) reads what waits at once,
    /// not at the end of the rest under way.
    func testTurningTheRestOffEndsTheRestUnderWay() async throws {
        let box = try await arrivals(MatchRule(path: "/rest", member: "Tick"))
        client.restBetweenReads(3600)
        try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("a")])
        _ = try await box.next(timeout: 10, "the signal that starts an hour's rest")
        try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("b")])
        // Passed on to the client's socket once dbus-daemon answers this.
        _ = try await server.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                  method: "GetId")
        client.restBetweenReads(0)
        let b = try await box.next(timeout: 10, "the signal that waited in the rest, once the rest is off")
        XCTAssertEqual(b.text, "b")
        try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string("c")])
        let c = try await box.next(timeout: 10, "a signal after the rest was turned off")
        XCTAssertEqual(c.text, "c")
    }

    /// A rest ended early does not end a later one when its own time comes: the
    /// follower that turned its rest off and on again still reads in bursts.
    func testARestEndedEarlyDoesNotCutTheNextShort() async throws {
        let box = try await arrivals(MatchRule(path: "/rest", member: "Tick"))
        func tick(_ text: String) throws {
            try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string(text)])
        }
        client.restBetweenReads(1)
        try tick("a")
        _ = try await box.next(timeout: 10, "the signal that starts a rest of a second")
        client.restBetweenReads(0) // ends it; its timer is still due within the second
        client.restBetweenReads(3600)
        try tick("b")
        _ = try await box.next(timeout: 10, "the signal that starts an hour's rest")
        try tick("c")
        _ = try await server.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                  method: "GetId")
        do {
            let early = try await box.next(timeout: 3, "a signal")
            XCTFail("'\(early.text)' came while the hour's rest should still hold it: the first rest's timer ended it")
        } catch is TimedOut {}
        client.restBetweenReads(0)
        let c = try await box.next(timeout: 10, "the signal that waited, once the rest is off")
        XCTAssertEqual(c.text, "c")
    }
}
