import FerryCore
@testable import FerryEngine
import FerryTestSupport
import Foundation
import Logging
import XCTest

/// What the engine makes of the portal's answers and what it asks it about.
final class DesktopProxiesTests: XCTestCase {
    func testTheFirstProxyLibcurlCanUseIsTakenAndDirectMeansNone() {
        XCTAssertEqual(DesktopProxies.choice(["http://proxy.example:3128"]), "http://proxy.example:3128")
        XCTAssertEqual(DesktopProxies.choice(["HTTPS://proxy.example:443", "direct://"]), "https://proxy.example:443")
        // GLib's SOCKS (version 5; the proxy resolves the name, as a desktop browser's would).
        XCTAssertEqual(DesktopProxies.choice(["socks://10.0.0.1:1080"]), "socks5h://10.0.0.1:1080")
        XCTAssertEqual(DesktopProxies.choice(["socks4a://10.0.0.1:1080"]), "socks4a://10.0.0.1:1080")
        XCTAssertNil(DesktopProxies.choice(["direct://"]))
        XCTAssertNil(DesktopProxies.choice(["direct://", "http://proxy.example:3128"]), "the desktop's order")
        XCTAssertNil(DesktopProxies.choice([]))
        // Schemes libcurl has no proxy of, and broken entries, are passed over.
        XCTAssertEqual(DesktopProxies.choice(["ftp://proxy.example", "http://", "http:// spaced", "http://a\nb", "http://ok:1"]), "http://ok:1")
        XCTAssertNil(DesktopProxies.choice(["http://" + String(repeating: "a", count: 3000)]))
        XCTAssertNil(DesktopProxies.choice(Array(repeating: "ftp://x", count: 40) + ["http://late:1"]), "only the first 32 are looked at")
    }

    func testTheQuestionIsTheOriginWithoutCredentialsPathOrQuery() {
        XCTAssertEqual(DesktopProxies.origin(of: "https://user:secret@Example.COM:8443/a/b?c=d#e"), "https://example.com:8443/")
        XCTAssertEqual(DesktopProxies.origin(of: "http://example.com?q=1"), "http://example.com/")
        XCTAssertEqual(DesktopProxies.origin(of: "HTTP://[::1]:80/x"), "http://[::1]:80/")
        XCTAssertNil(DesktopProxies.origin(of: "file:///etc/passwd"))
        XCTAssertNil(DesktopProxies.origin(of: "http:///nohost"))
    }
}

/// A desktop whose answers the test gives, one question at a time.
private final class HeldLookup: DesktopProxyLookup, @unchecked Sendable {
    // @unchecked Sendable: the fields are under `condition`.
    private let condition = NSCondition()
    private var questions: [(origin: String, answer: @Sendable (DesktopProxyAnswer) -> Void)] = []

    func lookup(_ origin: String, answer: @escaping @Sendable (DesktopProxyAnswer) -> Void) {
        condition.lock()
        questions.append((origin, answer))
        condition.broadcast()
        condition.unlock()
    }

    var count: Int {
        condition.lock(); defer { condition.unlock() }
        return questions.count
    }

    /// Waits (bounded) until `n` questions came.
    func waitForQuestions(_ n: Int, timeout: TimeInterval = 10) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock(); defer { condition.unlock() }
        while questions.count < n {
            if !condition.wait(until: deadline) { return questions.count >= n }
        }
        return true
    }

    /// Waits (bounded) for question `n` (from 0) and answers it.
    func answer(_ n: Int, _ answer: DesktopProxyAnswer, timeout: TimeInterval = 10) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        while questions.count <= n {
            if !condition.wait(until: deadline) { condition.unlock(); return nil }
        }
        let question = questions[n]
        condition.unlock()
        question.answer(answer)
        return question.origin
    }
}

/// The engine's use of the desktop's answers, with a real engine and server.
final class DesktopProxyEngineTests: EngineTestCase {
    private var desktop: HeldLookup!
    /// Nothing listens on the discard port of loopback.
    private let unreachable = "http://127.0.0.1:9"

    override func setUpWithError() throws {
        try super.setUpWithError()
        engine.shutdown()
        desktop = HeldLookup()
        engine = CurlEngine(desktopProxies: desktop)
        engine.setEventHandler { [log] event in log!.append(event) }
    }

    private func proxiedRequest(_ id: TransferID, _ path: String) -> EngineRequest {
        EngineRequest(id: id, url: unreachable + path, partPath: partPath("\(id).part"), requestTimeout: 30)
    }

    /// A request that waits for its origin's answer when the network moves is asked
    /// about again, and the new network's answer decides; the old one's, coming later,
    /// is not kept for the requests after.
    func testAMoveWhileTheQuestionIsOutAsksAgainAndTheNewNetworksAnswerDecides() {
        let body = TestData.bytes(count: 40_000, seed: 7)
        server.add(path: "/moved.bin", body: body)
        server.add(path: "/next.bin", body: TestData.bytes(count: 1_000, seed: 8))
        engine.start(proxiedRequest(1, "/moved.bin"))
        XCTAssertTrue(desktop.waitForQuestions(1), "the request asked the desktop")
        engine.forgetConnections()
        XCTAssertEqual(desktop.answer(1, .proxies([server.url("")])), "http://127.0.0.1:9/", "asked again after the move")
        XCTAssertEqual(log.outcome(of: 1, timeout: 30), .succeeded(bytesOnDisk: 40_000, sha256: nil))
        XCTAssertEqual(server.requests(for: "/moved.bin").map(\.viaProxy), [true], "went through the new network's proxy")
        XCTAssertEqual(contents(partPath("1.part")), body)
        // The old network's answer (direct, where nothing listens) comes last.
        XCTAssertEqual(desktop.answer(0, .proxies(["direct://"])), "http://127.0.0.1:9/")
        XCTAssertEqual(run(proxiedRequest(2, "/next.bin")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        XCTAssertEqual(server.requests(for: "/next.bin").map(\.viaProxy), [true])
        XCTAssertEqual(desktop.count, 2)
    }

    /// While nothing is asked after a failed question, an origin whose answer is known
    /// keeps its proxy; only the others go direct.
    func testAfterAFailedQuestionAKnownOriginKeepsItsProxy() {
        server.add(path: "/known.bin", body: TestData.bytes(count: 2_000, seed: 3))
        server.add(path: "/again.bin", body: TestData.bytes(count: 2_000, seed: 4))
        server.add(path: "/other.bin", body: TestData.bytes(count: 2_000, seed: 5))
        engine.start(proxiedRequest(1, "/known.bin"))
        XCTAssertEqual(desktop.answer(0, .proxies([server.url("")])), "http://127.0.0.1:9/")
        XCTAssertEqual(log.outcome(of: 1, timeout: 30), .succeeded(bytesOnDisk: 2_000, sha256: nil))
        engine.start(request(2, "/other.bin"))
        XCTAssertEqual(desktop.answer(1, .failed("org.freedesktop.DBus.Error.NoReply: timed out")), server.url("/"))
        XCTAssertEqual(log.outcome(of: 2, timeout: 30), .succeeded(bytesOnDisk: 2_000, sha256: nil))
        XCTAssertEqual(run(proxiedRequest(3, "/again.bin")), .succeeded(bytesOnDisk: 2_000, sha256: nil))
        XCTAssertEqual(server.requests(for: "/again.bin").map(\.viaProxy), [true])
        XCTAssertEqual(desktop.count, 2)
    }

    /// A question that fails (the portal timed out) sends the request direct, and the
    /// next request of the same origin just after does not wait on the desktop again.
    func testAFailedQuestionGoesDirectAndIsNotAskedAgainAtOnce() {
        server.add(path: "/a.bin", body: TestData.bytes(count: 10_000, seed: 1))
        server.add(path: "/b.bin", body: TestData.bytes(count: 10_000, seed: 2))
        engine.start(request(1, "/a.bin"))
        XCTAssertEqual(desktop.answer(0, .failed("org.freedesktop.DBus.Error.NoReply: timed out")), server.url("/"))
        XCTAssertEqual(log.outcome(of: 1, timeout: 30), .succeeded(bytesOnDisk: 10_000, sha256: nil))
        XCTAssertEqual(run(request(2, "/b.bin")), .succeeded(bytesOnDisk: 10_000, sha256: nil))
        XCTAssertEqual(desktop.count, 1)
        XCTAssertEqual(server.requests(for: "/b.bin").map(\.viaProxy), [false])
    }
}

/// The table of answers over time (its clock given), without an engine.
final class DesktopProxiesTimeTests: XCTestCase {
    private struct NoDesktop: DesktopProxyLookup {
        func lookup(_ origin: String, answer: @escaping @Sendable (DesktopProxyAnswer) -> Void) {}
    }

    private func table() -> DesktopProxies {
        var address = 0
        return DesktopProxies(lookup: NoDesktop(), inbox: EngineInbox(multi: &address), logger: Logger(label: "test"))
    }

    /// An origin whose minute is over is asked again; if that question fails, it keeps
    /// its last answer (behind a proxy, direct would fail) until the next question.
    func testAFailedQuestionForAKnownOriginKeepsItsLastAnswer() {
        let desktop = table()
        let origin = "https://files.example/"
        _ = desktop.answered(origin, generation: 0, .proxies(["http://proxy.example:3128"]), now: 0)
        XCTAssertEqual(desktop.proxy(for: origin, now: 1), .some("http://proxy.example:3128"))
        let later = DesktopProxies.keptFor + 1
        XCTAssertNil(desktop.proxy(for: origin, now: later), "asked again after its minute")
        let (proxy, _) = desktop.answered(origin, generation: 0, .failed("NoReply"), now: later)
        XCTAssertEqual(proxy, "http://proxy.example:3128")
        XCTAssertEqual(desktop.proxy(for: origin, now: later + 1), .some("http://proxy.example:3128"))
        XCTAssertEqual(desktop.proxy(for: "https://other.example/", now: later + 1), .some(nil), "nothing is asked meanwhile: direct")
        XCTAssertNil(desktop.proxy(for: origin, now: later + DesktopProxies.failedFor + 1), "asked again after the wait")
    }

    /// Failures in a row wait twice as long each time, up to five minutes; an answer
    /// starts the count over.
    func testFailuresInARowWaitLongerAndAnAnswerStartsOver() {
        let desktop = table()
        var now: UInt64 = 0
        var waits: [UInt64] = []
        for _ in 0..<8 {
            _ = desktop.answered("https://a.example/", generation: 0, .failed("NoReply"), now: now)
            var wait: UInt64 = 0
            while desktop.proxy(for: "https://b.example/", now: now + wait) != nil { wait += 1_000_000_000 }
            waits.append(wait / 1_000_000_000)
            now += wait
        }
        XCTAssertEqual(waits, [5, 10, 20, 40, 80, 160, 300, 300])
        _ = desktop.answered("https://a.example/", generation: 0, .proxies(["direct://"]), now: now)
        _ = desktop.answered("https://c.example/", generation: 0, .failed("NoReply"), now: now)
        XCTAssertNil(desktop.proxy(for: "https://b.example/", now: now + DesktopProxies.failedFor), "5 s again")
    }
}
