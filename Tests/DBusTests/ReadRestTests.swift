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

    func testSignalsThatComeDuringARestAreReadTogetherWhenItEnds() async throws {
        let rest = 1.0
        let box = try await arrivals(MatchRule(path: "/rest", member: "Tick"))
        client.restBetweenReads(rest)
        func tick(_ text: String) throws {
            try server.emitSignal(path: "/rest", interface: "org.ferry.Test.Sig", name: "Tick", arguments: [.string(text)])
        }
        try tick("first")
        let first = try await box.next(timeout: 10, "the first signal")
        XCTAssertEqual(first.text, "first")
        // The client rests now. 300 signals of about 150 bytes, some 45 KB: more
        // than one read of libdbus's brings in.
        let padding = String(repeating: "x", count: 100)
        let count = 300
        for i in 0..<count { try tick("\(i) \(padding)") }
        var later: [Arrival] = []
        for _ in 0..<count { later.append(try await box.next(timeout: 10 + rest, "a signal sent during the rest")) }

        XCTAssertEqual(later.map { $0.text }, (0..<count).map { "\($0) \(padding)" }, "every signal, in order")
        XCTAssertGreaterThanOrEqual(later[0].time - first.time, rest * 0.9,
                                    "what came during the rest waited for its end")
        let gaps = zip(later.dropFirst(), later).map { $0.time - $1.time }
        XCTAssertLessThan(gaps.max() ?? 0, rest,
                          "all that waited was read at once, not a read per rest")
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
