import XCTest
@testable import FerryCore

/// Retries after transient failures (fake clock), Retry-After and the resource-timeout.
final class RetryTests: XCTestCase {
    private let url = "https://example.com/file.bin"

    /// A running transfer that got a resumable response and wrote `count` bytes.
    private func started(_ h: CoreHarness, _ s: SessionID, bytes count: Int = 6) throws -> TransferID {
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)))
        h.writePart(t, Array(repeating: 1, count: count))
        h.send(.progress(t, bytesWritten: Int64(count), totalOnDisk: Int64(count), expected: 100))
        return t
    }

    /// A resumable answer that came over HTTP/2.
    private var multiplexedAnswer: EngineResponse {
        var r = EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)
        r.multiplexed = true
        return r
    }

    /// A session allowing no retry, whose origin answered a first download over HTTP/2.
    private func onAMultiplexingOrigin(engineReportsUnansweredStreams: Bool = false) throws -> (CoreHarness, SessionID) {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60),
                            engineReportsUnansweredStreams: engineReportsUnansweredStreams)
        let s = try h.openSession { $0.retries = 0 }
        h.send(.response(try h.download(s), multiplexedAnswer))
        return (h, s)
    }

    // MARK: - A shared connection that goes away

    /// A stream of a shared (HTTP/2) connection whose connection goes away is tried again
    /// at once, its retries untouched (here none are allowed); a server that keeps
    /// dropping its connections gets three such tries, then the failure counts.
    func testALostSharedConnectionIsTriedAgainAtOnceWithoutARetry() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 0 }
        let t = try h.download(s)
        let multiplexed = multiplexedAnswer
        for attempt in 1...3 {
            h.send(.response(t, multiplexed))
            h.fail(t, .network("The connection to example.com:443 was reset"))
            XCTAssertEqual(h.state(t), .running, "attempt \(attempt): started again at once, no wait")
            XCTAssertEqual(h.engine.started.filter { $0.id == t }.count, attempt + 1)
        }
        h.send(.response(t, multiplexed))
        h.fail(t, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(t), .failed, "the fourth loss counts: no retries are allowed")
    }

    /// A request sent as a stream to an origin known to answer over HTTP/2 whose
    /// connection goes before its answer (still queued at the server) is tried again at
    /// once too, its retries untouched; where the origin answers over HTTP/1.1 the same
    /// failure counts.
    func testAStreamLostBeforeItsAnswerIsTriedAgainAtOnceOnAMultiplexingOrigin() throws {
        let (h, s) = try onAMultiplexingOrigin()
        let unanswered = try h.download(s)
        XCTAssertEqual(h.state(unanswered), .running)
        h.fail(unanswered, .network("The connection to example.com:443 closed after 0 bytes"))
        XCTAssertEqual(h.state(unanswered), .running, "started again at once, no wait, no retry used")
        XCTAssertEqual(h.engine.started.filter { $0.id == unanswered }.count, 2)

        // The origin now answers over HTTP/1.1: an unanswered request's loss is its own.
        let plain = try h.download(s)
        h.send(.response(plain, EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)))
        let later = try h.download(s)
        h.fail(later, .network("The connection to example.com:443 closed after 0 bytes"))
        XCTAssertEqual(h.state(later), .failed, "no retries are allowed")
    }

    /// On an origin that has answered nothing yet, a request the engine says went out as
    /// an HTTP/2 stream (`unansweredStream`) and whose connection went is tried again at
    /// once; without that word the same loss counts. The word is the attempt's only: the
    /// origin gets no more transfers at once until an answer says it multiplexes.
    func testAStreamLostBeforeAnOriginsFirstAnswerIsTriedAgainAtOnce() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 0 }
        let transfers = try (0..<8).map { _ in try h.download(s) }
        XCTAssertEqual(transfers.filter { h.state($0) == .running }.count, 6, "an unknown origin: one transfer per connection")
        let first = transfers[0]
        h.send(.unansweredStream(first))
        h.fail(first, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(first), .running, "started again at once, no wait, no retry used")
        XCTAssertEqual(h.engine.started.filter { $0.id == first }.count, 2)
        XCTAssertEqual(transfers.filter { h.state($0) == .running }.count, 6, "still one transfer per connection")
        h.send(.unansweredStream(transfers[1]))
        h.fail(transfers[1], .timeout("Nothing came from example.com:443 for 60 s"))
        XCTAssertEqual(h.state(transfers[1]), .failed, "a stall is no connection loss: it counts (no retries are allowed)")

        h.fail(transfers[2], .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(transfers[2]), .failed, "no word of a stream: its own failure, and no retries are allowed")
    }

    /// With an engine that tells of unanswered streams itself, only the attempt says
    /// whether its request was a stream: on an origin that answers over HTTP/2, a
    /// failure with no such word (a refused connection, a redirect to a host that is
    /// down) counts, and is not tried again at once; one the engine says was an
    /// unanswered stream is, as is one whose answer came over HTTP/2.
    func testWithAnEngineThatTellsOnlyItsWordMakesARequestAStream() throws {
        let (h, s) = try onAMultiplexingOrigin(engineReportsUnansweredStreams: true)
        let refused = try h.download(s)
        h.fail(refused, .network("Could not connect to example.com:443: Connection refused"))
        XCTAssertEqual(h.state(refused), .failed, "no stream went out: its own failure (no retries are allowed)")
        let lost = try h.download(s)
        h.send(.unansweredStream(lost))
        h.fail(lost, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(lost), .running, "an unanswered stream: started again at once")
        h.send(.response(lost, multiplexedAnswer))
        h.fail(lost, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(lost), .running, "an answered stream: started again at once")
        XCTAssertEqual(h.engine.started.filter { $0.id == lost }.count, 3)
    }

    /// Requests the engine does not tell of (a download over ranges: here one with a
    /// mirror) keep the origin's mark: on an origin that answers over HTTP/2 their lost
    /// connection is tried again at once. A Metalink document fetched as a stream is tried
    /// again at once when its connection goes before the answer, or during its body.
    func testWithAnEngineThatTellsRangedDownloadsAndDocumentsStillCountAsStreams() throws {
        let (h, s) = try onAMultiplexingOrigin(engineReportsUnansweredStreams: true)
        let mirrored = try h.download(s, "https://example.com/other.bin") { $0.mirrors = ["https://mirror.example/other.bin"] }
        h.fail(mirrored, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(mirrored), .running, "a ranged download on a multiplexing origin: started again at once")

        let document = "https://example.com/file.meta4"
        let t = try h.download(s, document) { $0.metalink = document }
        h.send(.unansweredStream(t))
        h.fail(t, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(t), .running, "the document's unanswered stream: fetched again at once")
        var answer = EngineResponse(status: 200, expectedTotal: 1000, effectiveURL: document)
        answer.multiplexed = true
        h.send(.response(t, answer))
        h.fail(t, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(t), .running, "the document's answered stream: fetched again at once")
        XCTAssertEqual(h.engine.started.filter { $0.id == t }.count, 3)
    }

    /// Only an answer from the transfer's own origin says whether that origin
    /// multiplexes: an HTTP/2 answer from where a redirect led (another host, or another
    /// port of the same host) leaves the origin at one transfer per connection; the
    /// origin's own HTTP/2 answer, once its URL is written differently by libcurl, lets
    /// the waiting transfers start as streams.
    func testAnHTTP2AnswerFromARedirectTargetDoesNotMakeTheOriginMultiplex() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let transfers = try (0..<8).map { _ in try h.download(s) }
        let running = { transfers.filter { h.state($0) == .running }.count }
        XCTAssertEqual(running(), 6, "an unknown origin: one transfer per connection")
        let targets = ["https://cdn.example.net/file.bin", "https://example.com:8443/file.bin", "http://example.com/file.bin"]
        for (t, target) in zip(transfers, targets) {
            var redirected = EngineResponse(status: 200, expectedTotal: 100, effectiveURL: target)
            redirected.multiplexed = true
            h.send(.response(t, redirected))
            XCTAssertEqual(running(), 6, "\(target) answered over HTTP/2, not example.com:443")
        }
        var own = EngineResponse(status: 200, expectedTotal: 100, effectiveURL: "https://EXAMPLE.com:443/file.bin")
        own.multiplexed = true
        h.send(.response(transfers[3], own))
        XCTAssertEqual(running(), 8, "the origin itself answered over HTTP/2: the rest start as streams")
    }

    /// A response the engine made up (a ranged download whose file was whole on disk, or
    /// whose mirror answered first and keeps the URL's validator) says nothing of how the
    /// origin answers: it neither unmarks a multiplexing origin nor ends the attempt's
    /// standing as a stream. A ranged answer over HTTP/2 keeps both.
    func testAMadeUpResponseLeavesTheOriginAndTheStreamAsTheyWere() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 0 }
        let transfers = try (0..<8).map { _ in try h.download(s) }
        let running = { transfers.filter { h.state($0) == .running }.count }
        var own = EngineResponse(status: 200, expectedTotal: 100, effectiveURL: url)
        own.multiplexed = true
        h.send(.response(transfers[0], own))
        XCTAssertEqual(running(), 8, "the origin answered over HTTP/2")

        let mirrored = try h.download(s, url) { $0.mirrors = ["https://mirror.example/file.bin"] }
        var madeUp = EngineResponse(status: 206, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)
        madeUp.answeredOnConnection = false
        h.send(.response(mirrored, madeUp))
        let more = try (0..<4).map { _ in try h.download(s) }
        XCTAssertEqual(more.filter { h.state($0) == .running }.count, 4, "the origin is still taken to multiplex")
        h.fail(mirrored, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(mirrored), .running, "still a stream: tried again at once")

        var ranged = EngineResponse(status: 206, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)
        ranged.multiplexed = true
        h.send(.response(mirrored, ranged))
        h.fail(mirrored, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(mirrored), .running, "answered over HTTP/2: tried again at once")
    }

    /// A POST upload whose HTTP/2 connection goes away, answered or still waiting for its
    /// answer, is not sent again at once: the server may have acted on it, so the loss
    /// counts as on HTTP/1.1 (here no retries are allowed: it fails). A PUT in the same
    /// place is sent again, its retries untouched.
    func testALostStreamOfAPOSTUploadCountsAsAFailedAttempt() throws {
        let (h, s) = try onAMultiplexingOrigin(engineReportsUnansweredStreams: true)
        var created = EngineResponse(status: 201, expectedTotal: 0, effectiveURL: "https://example.com/up/form.bin")
        created.multiplexed = true

        let answered = try h.upload(s, method: "POST")
        h.send(.response(answered, created))
        h.fail(answered, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(answered), .failed, "answered: the server acted on it; not sent again")
        XCTAssertEqual(h.engine.started.filter { $0.id == answered }.count, 1)

        let unanswered = try h.upload(s, method: "POST")
        h.send(.unansweredStream(unanswered))
        h.fail(unanswered, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(unanswered), .failed, "sent, no answer yet: the server may be acting on it")
        XCTAssertEqual(h.engine.started.filter { $0.id == unanswered }.count, 1)

        let put = try h.upload(s, method: "PUT")
        h.send(.response(put, created))
        h.fail(put, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(put), .running, "a PUT twice is the same PUT: sent again at once")
        XCTAssertEqual(h.engine.started.filter { $0.id == put }.count, 2)
    }

    /// A POST the server answered with success (2xx) whose answer was then cut is not
    /// tried again even where `retries` allows it: the server took it, and a second POST
    /// could act twice. A POST whose connection went before any answer, or answered 503,
    /// waits to retry as any upload; so does a PUT answered 201 and cut.
    func testAPOSTAnsweredWithSuccessIsNotRetried() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 3 }
        let cut = CoreError.network("The connection to example.com:443 closed after 1000 of 1000 bytes")
        let answered = try h.upload(s, method: "POST")
        h.send(.response(answered, EngineResponse(status: 201, expectedTotal: 1000, effectiveURL: "https://example.com/up/form.bin")))
        h.fail(answered, cut)
        XCTAssertEqual(h.state(answered), .failed, "the server took it: not sent again")
        XCTAssertEqual(h.snapshot(answered)?.httpStatus, 201)

        let unanswered = try h.upload(s, method: "POST")
        h.fail(unanswered, cut)
        XCTAssertEqual(h.state(unanswered), .waiting, "no answer: it waits to retry, as retries allow")
        let busy = try h.upload(s, method: "POST")
        h.send(.response(busy, EngineResponse(status: 503, expectedTotal: 1000, effectiveURL: "https://example.com/up/form.bin")))
        h.fail(busy, .http(status: 503, "Service Unavailable"))
        XCTAssertEqual(h.state(busy), .waiting, "a 503 did not take it: it waits to retry")
        let put = try h.upload(s, method: "PUT")
        h.send(.response(put, EngineResponse(status: 201, expectedTotal: 1000, effectiveURL: "https://example.com/up/form.bin")))
        h.fail(put, cut)
        XCTAssertEqual(h.state(put), .waiting, "a PUT twice is the same PUT: it waits to retry")
    }

    /// ferryd killed (or stopped with its session) while a POST was running: the server
    /// may have received it, so after the restart its attempt counts as failed and the
    /// session's retries decide. A PUT (the same effect twice) is sent again at once, as
    /// every other transfer that was running.
    func testAPOSTCutByARestartCountsAsAFailedAttempt() throws {
        for crashed in [true, false] {
            let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
            let none = try h.openSession("com.example.None") { $0.retries = 0 }
            let some = try h.openSession("com.example.Some") { $0.retries = 2 }
            let post = try h.upload(none, method: "POST")
            let retried = try h.upload(some, "https://example.com/up/other.bin", method: "POST")
            let put = try h.upload(none, "https://example.com/up/put.bin", method: "PUT")
            h.send(.progress(post, bytesWritten: 1000, totalOnDisk: 1000, expected: 1000))
            XCTAssertEqual([post, retried, put].map { h.state($0) }, [.running, .running, .running])

            let h2 = h.restarted(crashed: crashed)
            XCTAssertEqual(h2.state(post), .failed, "no retries: not sent again (crashed: \(crashed))")
            XCTAssertEqual(h2.snapshot(post)?.errorName, CoreError.network("").name)
            XCTAssertEqual(h2.state(retried), .waiting, "it waits to retry, one of its two spent")
            XCTAssertEqual(h2.snapshot(retried)?.waitingReason, "retry")
            XCTAssertEqual(h2.state(put), .running, "a PUT goes on at once")
            XCTAssertEqual(h2.engine.startedIDs, [put])
            XCTAssertEqual(h2.snapshot(put)?.errorName, "")
        }
    }

    /// Killed again after the restore and before the start (the bus name not yet taken):
    /// the POST is still known to have been under way, not taken for a queued one.
    func testAPOSTCutByARestartStaysCutUntilTheStartCountsIt() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 0 }
        let post = try h.upload(s, method: "POST")
        XCTAssertEqual(h.state(post), .running)
        let restoredOnly = CoreHarness(start: false, store: h.store, restore: true, clock: h.clock, root: h.root)
        let h3 = restoredOnly.restarted(crashed: true)
        XCTAssertEqual(h3.state(post), .failed)
        XCTAssertEqual(h3.engine.startedIDs, [])
    }

    /// Without a shared connection (HTTP/1.1) a network failure is an ordinary one.
    func testANetworkFailureOnItsOwnConnectionCountsAsBefore() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.retries = 0 }
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: 100, acceptsRanges: true, effectiveURL: url)))
        h.fail(t, .network("The connection to example.com:443 was reset"))
        XCTAssertEqual(h.state(t), .failed)
    }

    // MARK: - The policy

    func testClassification() {
        for transient: CoreError in [.network("refused"), .network("reset"), .network("dns"), .timeout("stalled"),
                                      .http(status: 408, "x"), .http(status: 429, "x"), .http(status: 500, "x"),
                                      .http(status: 503, "x"), .http(status: 599, "x")] {
            XCTAssertTrue(RetryPolicy.isTransient(transient), "\(transient)")
        }
        for permanent: CoreError in [.http(status: 404, "x"), .http(status: 403, "x"), .http(status: 400, "x"),
                                      .http(status: 410, "x"), .http(status: 416, "x"), .tls("x"), .checksumMismatch("x"),
                                      .tooManyRedirects("x"), .disk("x"), .cancelled("x")] {
            XCTAssertFalse(RetryPolicy.isTransient(permanent), "\(permanent)")
        }
    }

    func testBackoffDoublesWithJitterUpToCap() {
        nonisolated(unsafe) var r = 0.0 // set and read on this test's thread only
        let p = RetryPolicy.exponentialBackoff(base: 2, cap: 30, jitter: 0.5, random: { r })
        r = 0.5 // the middle: no spread
        XCTAssertEqual(p.decide(.network("x"), 1, 9), .retry(afterSeconds: 2))
        XCTAssertEqual(p.decide(.network("x"), 2, 9), .retry(afterSeconds: 4))
        XCTAssertEqual(p.decide(.network("x"), 4, 9), .retry(afterSeconds: 16))
        XCTAssertEqual(p.decide(.network("x"), 9, 9), .retry(afterSeconds: 30), "capped")
        r = 0 // lowest
        XCTAssertEqual(p.decide(.network("x"), 2, 9), .retry(afterSeconds: 2))
        r = 0.999_999 // highest, still capped
        XCTAssertEqual(p.decide(.network("x"), 9, 9), .retry(afterSeconds: 30))
        XCTAssertEqual(p.decide(.network("x"), 10, 9), .fail, "retries used up")
        XCTAssertEqual(p.decide(.http(status: 404, "x"), 1, 9), .fail)
        // The daemon's policy spreads by ±20 %.
        let standard = RetryPolicy.standard(base: 10, cap: 1000)
        for _ in 0..<50 {
            guard case .retry(let s) = standard.decide(.timeout("x"), 1, 5) else { return XCTFail("no retry") }
            XCTAssertTrue((8...12).contains(s), "\(s)")
        }
    }

    func testDefaultEnvironmentRetries() {
        if case .fail = CoreEnvironment().retryPolicy.decide(.network("x"), 1, 5) { XCTFail("retries are on by default") }
    }

    // MARK: - In the core

    func testTransientFailureWaitsThenContinuesFromTheBytesOnDisk() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession() // retries: 5 by default
        let t = try started(h, s, bytes: 6)
        h.fail(t, .network("The connection to example.com:443 was reset"), bytes: 6)
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.snapshot(t)?.waitingReason, "retry")
        XCTAssertEqual(h.snapshot(t)?.errorName, CoreError.network("").name, "the last failure, while it waits to try again")
        XCTAssertEqual(h.snapshot(t)?.errorMessage, "The connection to example.com:443 was reset")
        XCTAssertTrue(h.observer.completions.isEmpty)
        h.advanceAndWake(seconds: 1.9)
        XCTAssertEqual(h.state(t), .waiting, "not before the backoff")
        h.advanceAndWake(seconds: 0.2)
        XCTAssertEqual(h.state(t), .running)
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(request.offset, 6, "continues after the bytes on disk")
        XCTAssertEqual(request.ifRange, "\"v1\"")
        // Second failure: twice the wait.
        h.fail(t, .timeout("No data for 60 seconds"), bytes: 6)
        let waitStart = h.clock.now
        XCTAssertEqual(h.sync { $0.transfers[t]?.notBefore }, waitStart + 4_000_000)
        h.advanceAndWake(seconds: 4)
        h.succeed(t, body: Array(repeating: 1, count: 100))
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "", "completed: no failure")
        XCTAssertEqual(h.snapshot(t)?.errorMessage, "")
        XCTAssertEqual(h.snapshot(t)?.attempts, 3)
        XCTAssertEqual(h.observer.completions.map(\.2), [""])
    }

    func testPermanentFailuresFailAtOnce() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession()
        let cases: [(CoreError, String)] = [
            (.http(status: 404, "Not Found"), "Http"), (.http(status: 403, "Forbidden"), "Http"),
            (.tls("bad certificate"), "Tls"), (.tooManyRedirects("loop"), "TooManyRedirects"),
            (.disk("No space left on device"), "Disk"),
        ]
        for (error, name) in cases {
            let t = try h.download(s)
            h.fail(t, error)
            XCTAssertEqual(h.state(t), .failed, "\(error)")
            XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error." + name)
            XCTAssertEqual(h.snapshot(t)?.attempts, 1)
        }
    }

    func testAFinalResponseMakesTheFailureFinal() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession()
        // A redirect to file:// that the engine refuses: reported as a 302, then Network.
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 302, effectiveURL: "file:///etc/passwd")))
        h.fail(t, .network("Redirected to a file: URL; only http and https are allowed"))
        XCTAssertEqual(h.state(t), .failed, "not retried")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Network")
        XCTAssertEqual(h.snapshot(t)?.attempts, 1)
        // A 503 before a network error is still worth a retry.
        let u = try h.download(s)
        h.send(.response(u, EngineResponse(status: 503, effectiveURL: url)))
        h.fail(u, .network("The connection closed"))
        XCTAssertEqual(h.state(u), .waiting)
        // The status is forgotten with the attempt.
        h.advanceAndWake(seconds: 2)
        h.fail(u, .network("reset"))
        XCTAssertEqual(h.state(u), .waiting)
    }

    func testRetriesUpToTheSessionSettingThenFailAndResumeStartsAFreshSet() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 1, cap: 1))
        let s = try h.openSession { $0.retries = 2 }
        let t = try h.download(s)
        for _ in 0..<2 {
            h.fail(t, .http(status: 503, "Service Unavailable"))
            XCTAssertEqual(h.state(t), .waiting)
            h.advanceAndWake(seconds: 1)
        }
        h.fail(t, .http(status: 503, "Service Unavailable"))
        XCTAssertEqual(h.state(t), .failed, "2 retries, 3 attempts")
        XCTAssertEqual(h.snapshot(t)?.attempts, 3)
        XCTAssertEqual(h.snapshot(t)?.httpStatus, 503)
        XCTAssertEqual(h.observer.completions.map(\.2), ["org.ferry.Ferry1.Error.Http"])
        try h.sync { try $0.resume(t) }
        h.fail(t, .http(status: 503, "Service Unavailable"))
        XCTAssertEqual(h.state(t), .waiting, "a client's Resume brings a fresh set of retries")
    }

    func testRetryAfterIsHonoured() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession()
        let t = try started(h, s)
        h.fail(t, .network("dropped"), bytes: 6)
        h.advanceAndWake(seconds: 2)
        // The resumed attempt meets a 503 with Retry-After: 120.
        h.send(.response(t, EngineResponse(status: 503, etag: "\"error-page\"", expectedTotal: 57, effectiveURL: url,
                                           retryAfter: 120)))
        XCTAssertEqual(h.snapshot(t)?.bytesExpected, 100, "a failing response changes nothing the download knows")
        h.fail(t, .http(status: 503, "Service Unavailable"), bytes: 6)
        XCTAssertEqual(h.state(t), .waiting)
        XCTAssertEqual(h.sync { $0.transfers[t]?.notBefore }, h.clock.now + 120_000_000, "120 s, not the 4 s backoff")
        h.advanceAndWake(seconds: 119)
        XCTAssertEqual(h.state(t), .waiting)
        h.advanceAndWake(seconds: 1)
        XCTAssertEqual(h.state(t), .running)
        XCTAssertEqual(h.engine.lastRequest(t)?.ifRange, "\"v1\"", "the error page's ETag is not the file's")
        // A Retry-After shorter than the backoff does not shorten it.
        h.send(.response(t, EngineResponse(status: 429, effectiveURL: url, retryAfter: 0.5)))
        h.fail(t, .http(status: 429, "Too Many Requests"), bytes: 6)
        XCTAssertEqual(h.sync { $0.transfers[t]?.notBefore }, h.clock.now + 8_000_000)
    }

    func testRetryAfterBeyondTheResourceTimeoutFailsNow() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.resourceTimeout = 60 }
        let t = try h.download(s)
        h.send(.response(t, EngineResponse(status: 503, effectiveURL: url, retryAfter: 3600)))
        h.fail(t, .http(status: 503, "Service Unavailable"))
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Http")
    }

    // MARK: - Resource timeout

    func testResourceTimeoutFailsARunningTransfer() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession { $0.resourceTimeout = 30 }
        let t = try started(h, s)
        h.advanceAndWake(seconds: 29)
        XCTAssertEqual(h.state(t), .running)
        h.advanceAndWake(seconds: 1)
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Timeout")
        XCTAssertTrue(h.snapshot(t)?.errorMessage.contains("resource-timeout") ?? false)
        XCTAssertEqual(h.engine.stopped, [t], "its attempt is stopped")
        h.send(.completed(t, .stopped(bytesOnDisk: 6)))
        XCTAssertTrue(h.exists(h.destination(t) + ".part"), "the partial file stays for Resume")
        XCTAssertEqual(h.observer.completions.count, 1)
    }

    func testResourceTimeoutCountsRetriesIncluded() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 10, cap: 10))
        let s = try h.openSession { $0.resourceTimeout = 25; $0.retries = 10 }
        let t = try h.download(s)
        h.fail(t, .network("refused"))
        h.advanceAndWake(seconds: 10)
        h.fail(t, .network("refused"))
        XCTAssertEqual(h.state(t), .waiting, "retry due at 20 s, before 25 s")
        h.advanceAndWake(seconds: 10)
        h.fail(t, .network("refused"))
        XCTAssertEqual(h.state(t), .failed, "the next retry (30 s) would come after the resource-timeout")
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Network", "with the last real error")
        // Waiting when the deadline passes fails with Timeout.
        let u = try h.download(s)
        h.fail(u, .network("refused"))
        XCTAssertEqual(h.state(u), .waiting)
        h.advanceAndWake(seconds: 26)
        XCTAssertEqual(h.state(u), .failed)
        XCTAssertEqual(h.snapshot(u)?.errorName, "org.ferry.Ferry1.Error.Timeout")
    }

    func testResourceTimeoutRealTimer() throws {
        // The deadline timer itself (real time, tiny timeout), waited for with a bound.
        let h = CoreHarness()
        let s = try h.openSession { $0.resourceTimeout = 0.001 }
        let failed = expectation(description: "failed by its deadline timer")
        var t: TransferID = 0
        h.sync { _ in
            h.observer.onEvent = { if $0 == .transferChanged(t, .failed) { failed.fulfill() } }
        }
        t = try h.download(s)
        h.clock.advance(seconds: 1)
        wait(for: [failed], timeout: 5)
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.Timeout")
    }

    func testRetryWaitSurvivesRestart() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 30, cap: 30))
        let s = try h.openSession { $0.retries = 1 }
        let t = try started(h, s)
        h.fail(t, .network("reset"), bytes: 6)
        let h2 = h.restarted()
        XCTAssertEqual(h2.state(t), .waiting)
        XCTAssertEqual(h2.snapshot(t)?.waitingReason, "retry")
        h2.clock.advance(seconds: 30)
        h2.sync { $0.wakeDueTransfers() }
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 6)
        h2.fail(t, .network("reset"), bytes: 6)
        XCTAssertEqual(h2.state(t), .failed, "the retries used before the restart count")
    }

    /// A download that failed, waited (its Error set), ran again and was cut off by a
    /// crash while its file was moved into place completes at the restart with no
    /// Error: a completed transfer has no failure (FerryClient read one as a failure).
    func testARetriedDownloadFinishedAtARestartHasNoError() throws {
        let h = CoreHarness(retryPolicy: .exponentialBackoff(base: 2, cap: 60))
        let s = try h.openSession()
        let t = try h.download(s)
        let answer = EngineResponse(status: 200, etag: "\"f\"", expectedTotal: 5, acceptsRanges: true,
                                    effectiveURL: "https://example.com/file.bin")
        h.send(.response(t, answer))
        h.fail(t, .network("reset"), bytes: 0)
        XCTAssertFalse(h.snapshot(t)!.errorName.isEmpty)
        h.advanceAndWake(seconds: 5)
        XCTAssertEqual(h.state(t), .running)
        h.send(.response(t, answer))
        h.writePart(t, Array("hello".utf8))
        // The store as a crash leaves it between the row naming the move and the move's end.
        var row = try XCTUnwrap(try h.store.load().transfers.first { $0.snapshot.id == t })
        row.finishingPath = h.destination(t)
        row.etag = "\"f\""
        row.snapshot.bytesExpected = 5
        row.snapshot.bytesTransferred = 5
        XCTAssertFalse(row.snapshot.errorName.isEmpty, "the stored row carries the retry's error")
        try h.store.write([.saveTransfer(row)])
        try FileManager.default.moveItem(atPath: h.destination(t) + ".part", toPath: h.destination(t))
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .completed)
        XCTAssertEqual(h2.snapshot(t)?.errorName, "", "a completed transfer has no Error")
        XCTAssertEqual(h2.snapshot(t)?.errorMessage, "")
    }
}
