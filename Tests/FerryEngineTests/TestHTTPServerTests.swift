import FerryTestSupport
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

/// The test server itself, seen through an independent client (URLSession).
final class TestHTTPServerTests: XCTestCase {
    private var server: TestHTTPServer!
    private let body = TestData.bytes(count: 100_000, seed: 60)

    override func setUpWithError() throws {
        server = TestHTTPServer()
        try server.start()
        server.add(path: "/f", body: body, etag: "\"e1\"", lastModified: "Mon, 02 Jun 2025 08:00:00 GMT")
    }

    override func tearDown() {
        server.stop()
        super.tearDown()
    }

    private func fetch(_ path: String, method: String = "GET", headers: [String: String] = [:],
                       file: StaticString = #filePath, line: UInt = #line) throws -> (HTTPURLResponse, [UInt8]) {
        var request = URLRequest(url: URL(string: server.url(path))!)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: (HTTPURLResponse, [UInt8])?
        let task = URLSession.shared.dataTask(with: request) { data, response, _ in
            if let response = response as? HTTPURLResponse { result = (response, [UInt8](data ?? Data())) }
            done.signal()
        }
        task.resume()
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success, file: file, line: line)
        return try XCTUnwrap(result, file: file, line: line)
    }

    func testGetServesTheBodyWithValidators() throws {
        let (response, data) = try fetch("/f")
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(data, body)
        XCTAssertEqual(response.value(forHTTPHeaderField: "Content-Length"), "100000")
        XCTAssertEqual(response.value(forHTTPHeaderField: "ETag"), "\"e1\"")
        XCTAssertEqual(response.value(forHTTPHeaderField: "Accept-Ranges"), "bytes")
    }

    func testHeadSendsHeadersOnly() throws {
        let (response, data) = try fetch("/f", method: "HEAD")
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.value(forHTTPHeaderField: "Content-Length"), "100000")
        XCTAssertEqual(data, [])
        XCTAssertEqual(server.requests.last?.method, "HEAD")
    }

    func testRanges() throws {
        let (closed, closedData) = try fetch("/f", headers: ["Range": "bytes=10-19"])
        XCTAssertEqual(closed.statusCode, 206)
        XCTAssertEqual(closed.value(forHTTPHeaderField: "Content-Range"), "bytes 10-19/100000")
        XCTAssertEqual(closedData, Array(body[10...19]))

        let (open, openData) = try fetch("/f", headers: ["Range": "bytes=99990-"])
        XCTAssertEqual(open.statusCode, 206)
        XCTAssertEqual(openData, Array(body[99990...]))

        let (suffix, suffixData) = try fetch("/f", headers: ["Range": "bytes=-5"])
        XCTAssertEqual(suffix.value(forHTTPHeaderField: "Content-Range"), "bytes 99995-99999/100000")
        XCTAssertEqual(suffixData, Array(body[99995...]))

        let (beyond, _) = try fetch("/f", headers: ["Range": "bytes=100000-"])
        XCTAssertEqual(beyond.statusCode, 416)
        XCTAssertEqual(beyond.value(forHTTPHeaderField: "Content-Range"), "bytes */100000")
    }

    func testIfRange() throws {
        let (match, _) = try fetch("/f", headers: ["Range": "bytes=10-", "If-Range": "\"e1\""])
        XCTAssertEqual(match.statusCode, 206)
        let (date, _) = try fetch("/f", headers: ["Range": "bytes=10-", "If-Range": "Mon, 02 Jun 2025 08:00:00 GMT"])
        XCTAssertEqual(date.statusCode, 206)
        let (stale, staleData) = try fetch("/f", headers: ["Range": "bytes=10-", "If-Range": "\"old\""])
        XCTAssertEqual(stale.statusCode, 200)
        XCTAssertEqual(staleData, body)
        XCTAssertEqual(server.requests(for: "/f").last?.header("If-Range"), "\"old\"")
    }

    func testNoRangeSupportIgnoresRange() throws {
        server.add(path: "/plain", body: body, supportsRanges: false)
        let (response, data) = try fetch("/plain", headers: ["Range": "bytes=10-"])
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertNil(response.value(forHTTPHeaderField: "Accept-Ranges"))
        XCTAssertEqual(data, body)
    }

    func testFailFirstThenServe() throws {
        server.set(.failFirst(2, status: 500), on: "/f")
        XCTAssertEqual(try fetch("/f").0.statusCode, 500)
        XCTAssertEqual(try fetch("/f").0.statusCode, 500)
        XCTAssertEqual(try fetch("/f").0.statusCode, 200)
        XCTAssertEqual(try fetch("/missing").0.statusCode, 404)
    }

    func testChangingTheResourceChangesTheETag() throws {
        server.add(path: "/f", body: [1, 2, 3], etag: "\"e2\"")
        let (response, data) = try fetch("/f")
        XCTAssertEqual(response.value(forHTTPHeaderField: "ETag"), "\"e2\"")
        XCTAssertEqual(data, [1, 2, 3])
    }
}
