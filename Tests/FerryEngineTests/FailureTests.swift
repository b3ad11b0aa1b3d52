import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

final class FailureTests: EngineTestCase {
    func test404FailsWithHttpErrorAndWritesNothing() throws {
        server.add(path: "/gone", body: TestData.bytes(count: 1_000))
        server.set(.status(404), on: "/gone")
        let part = partPath("gone.part")

        let outcome = run(request(1, "/gone", part: part))

        XCTAssertEqual(outcome, .failed(.http(status: 404, "HTTP 404 Not Found"), bytesOnDisk: 0))
        XCTAssertEqual(contents(part), [], "the error body is not written")
        XCTAssertEqual(responses(1).map(\.status), [404], "the error response is reported (for its status)")
        XCTAssertNil(responses(1).first?.retryAfter)
        XCTAssertTrue(log.events(for: 1).compactMap(\.progress).isEmpty)
        assertWellFormedEvents(1)
    }

    func testRetryAfterIsPassedOn() throws {
        server.set(.status(503), on: "/busy")
        server.set(.retryAfter("120"), on: "/busy")
        XCTAssertEqual(run(request(1, "/busy")), .failed(.http(status: 503, "HTTP 503 Service Unavailable"), bytesOnDisk: 0))
        XCTAssertEqual(responses(1).first?.status, 503)
        XCTAssertEqual(responses(1).first?.retryAfter, 120)

        let inAMinute = Date().addingTimeInterval(60)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        server.set(.retryAfter(formatter.string(from: inAMinute)), on: "/busy")
        _ = run(request(2, "/busy"))
        let wait = try XCTUnwrap(responses(2).first?.retryAfter)
        XCTAssertTrue((50...61).contains(wait), "\(wait)")
    }

    func test500WhileResumingKeepsThePartFileThenRetrySucceeds() throws {
        let body = TestData.bytes(count: 500_000, seed: 40)
        server.add(path: "/f", body: body)
        server.set(.failFirst(1, status: 503), on: "/f")
        let part = partPath("f.part")
        try write(Array(body[..<100_000]), to: part)

        let first = run(request(1, "/f", part: part, offset: 100_000, ifRange: "\"v1\""))
        XCTAssertEqual(first, .failed(.http(status: 503, "HTTP 503 Service Unavailable"), bytesOnDisk: 100_000))
        XCTAssertEqual(contents(part), Array(body[..<100_000]))

        let second = run(request(2, "/f", part: part, offset: 100_000, ifRange: "\"v1\""))
        XCTAssertEqual(second, .succeeded(bytesOnDisk: 500_000, sha256: nil))
        XCTAssertEqual(contents(part), body)
    }

    func testStallFailsWithTimeout() throws {
        server.add(path: "/stall", body: TestData.bytes(count: 1_000_000))
        server.set(.stallAfter(bytes: 100_000), on: "/stall")
        let started = Date()

        let outcome = run(request(1, "/stall", requestTimeout: 1), timeout: 20)

        guard case .failed(.timeout(let message), let onDisk)? = outcome else {
            return XCTFail("expected a timeout, got \(String(describing: outcome))")
        }
        XCTAssertEqual(onDisk, 100_000)
        XCTAssertTrue(message.contains("No data"), message)
        // On time: curl's own check (its speed is an average over 5 s) took about 7 s.
        XCTAssertLessThan(Date().timeIntervalSince(started), 4)
    }

    func testRedirectToFtpIsRefused() throws {
        server.set(.redirect(to: "ftp://127.0.0.1/file.bin"), on: "/ftp")
        let outcome = run(request(1, "/ftp"))
        guard case .failed(.network(let message), 0)? = outcome else {
            return XCTFail("expected a network failure, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("ftp"), message)
        // The redirect's own status comes first, so the core knows not to retry.
        XCTAssertEqual(responses(1).map(\.status), [302])
    }

    func testRedirectLoopFailsWithTooManyRedirects() throws {
        server.set(.redirect(to: "/loop"), on: "/loop")
        let outcome = run(request(1, "/loop"))
        guard case .failed(.tooManyRedirects, 0)? = outcome else {
            return XCTFail("expected tooManyRedirects, got \(String(describing: outcome))")
        }
        XCTAssertEqual(server.requests(for: "/loop").count, 11, "the first request and 10 redirects")
    }

    func testConnectionRefused() throws {
        // A port that was just free: bind a server, note its port, stop it.
        let gone = TestHTTPServer()
        try gone.start()
        let url = gone.url("/x")
        let port = gone.port
        gone.stop()
        engine.start(EngineRequest(id: 1, url: url, partPath: partPath()))
        let outcome = log.outcome(of: 1, timeout: 20)
        XCTAssertEqual(outcome, .failed(.network("Connection refused by 127.0.0.1:\(port)"), bytesOnDisk: 0))
    }

    func testUnsupportedSchemeIsRefused() throws {
        engine.start(EngineRequest(id: 1, url: "file:///etc/passwd", partPath: partPath()))
        let outcome = log.outcome(of: 1, timeout: 20)
        guard case .failed(.network, 0)? = outcome else {
            return XCTFail("expected a network failure, got \(String(describing: outcome))")
        }
        XCTAssertEqual(contents(partPath()), [])
    }

    func testDiskFullFailsWithDiskError() throws {
        guard FileManager.default.fileExists(atPath: "/dev/full") else { throw XCTSkip("no /dev/full") }
        server.add(path: "/f", body: TestData.bytes(count: 300_000))

        let outcome = run(request(1, "/f", part: "/dev/full"))

        XCTAssertEqual(outcome, .failed(.disk("No space left on device while writing /dev/full"), bytesOnDisk: 0))
    }

    func testUnwritableDirectoryFailsWithDiskError() throws {
        server.add(path: "/f", body: TestData.bytes(count: 1_000))
        let part: String
        if geteuid() == 0 {
            // root ignores directory permissions: use a "directory" that is a file.
            let notADirectory = partPath("plain-file")
            try write([1], to: notADirectory)
            part = notADirectory + "/f.part"
        } else {
            let readOnly = directory.appendingPathComponent("ro")
            try FileManager.default.createDirectory(at: readOnly, withIntermediateDirectories: true)
            XCTAssertEqual(chmod(readOnly.path, 0o555), 0)
            part = readOnly.appendingPathComponent("f.part").path
        }

        let outcome = run(request(1, "/f", part: part))

        guard case .failed(.disk(let message), 0)? = outcome else {
            return XCTFail("expected a disk failure, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains(part), message)
        XCTAssertTrue(message.hasPrefix("Permission denied") || message.hasPrefix("Not a directory"), message)
        XCTAssertTrue(server.requests.isEmpty, "nothing is fetched without a file to write to")
    }

    func testMessagesNeverContainHeaderValues() throws {
        server.set(.status(401), on: "/secret")
        let outcome = run(request(1, "/secret", headers: [("Authorization", "Bearer hunter2"), ("Cookie", "s=hunter2")]))
        guard case .failed(let error, _)? = outcome else { return XCTFail("expected a failure") }
        XCTAssertEqual(error, .http(status: 401, "HTTP 401 Unauthorized"))
        XCTAssertFalse(error.message.contains("hunter2"))
    }
}
