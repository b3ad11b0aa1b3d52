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
    /// signals of about 150 bytes meanwhile and collects them: checks they all came,
    /// in order, none before the rest ended; returns how many rests came between two
    /// of them (each rest between two signals means a new read).
    private func restsWhileReading(count: Int, rest: Double) async throws -> Int {
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
        var later: [Arrival] = []
        for _ in 0..<count { later.append(try await box.next(timeout: 10 + rest, "a signal sent during the rest")) }

        XCTAssertEqual(later.map { $0.text }, (0..<count).map { "\($0) \(padding)" }, "every signal, in order")
        XCTAssertGreaterThanOrEqual(later[0].time - first.time, rest * 0.9,
                                    "what came during the rest waited for its end")
        return zip(later.dropFirst(), later).filter { $0.time - $1.time >= rest * 0.9 }.count
    }

    func testWhatCameDuringARestIsReadInOneGoWhenItEnds() async throws {
        // 50 signals, some 7.5 KB: three of libdbus's reads, and less than a socketful.
        let rests = try await restsWhileReading(count: 50, rest: 0.3)
        XCTAssertEqual(rests, 0, "all that waited was read before the next rest, not one libdbus read per rest")
    }

    func testAStreamLargerThanTheSocketIsReadWithoutARestPerSocketful() async throws {
        // 3,000 signals, some 450 KB: a dozen times what the socket holds (dbus-daemon
        // keeps the rest and writes it as room is made), some 160 of libdbus's reads.
        // A read that found plenty is followed by the next without a rest: none on a
        // quiet machine, a few when dbus-daemon is short of CPU and refills slowly.
        let rests = try await restsWhileReading(count: 3000, rest: 0.2)
        XCTAssertLessThanOrEqual(rests, 20, "read on while the socket kept filling, not a little per rest")
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
}
