import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A session's `proxy` carries every request of the session, whatever ferryd's own
/// environment says about hosts to reach directly (`no_proxy`): single-connection and
/// ranged downloads and uploads alike, since all of them are set up in one place.
///
/// The test server is the proxy here (it serves a request in absolute form as its own
/// path); the URLs name a port where nothing listens, so a request that went around the
/// proxy would fail to connect.
final class ProxyTests: FerryTestCase {
    /// Nothing listens on the discard port of loopback.
    private let unreachableOrigin = "http://127.0.0.1:9"

    override func setUp() async throws {
        try await super.setUp()
        try await stopFerryd()
        try await startFerryd(extraEnvironment: ["no_proxy": "*", "NO_PROXY": "*"])
    }

    private func proxiedSession() async throws -> BusSession {
        try await session("com.example.Proxied", ["proxy": .string(server.url("")), "retries": .uint32(0)])
    }

    /// Every request the server saw for `path` came to it as a proxy.
    private func assertAllProxied(_ path: String, atLeast count: Int, file: StaticString = #filePath, line: UInt = #line) {
        let requests = server.requests(for: path)
        XCTAssertGreaterThanOrEqual(requests.count, count, "requests for \(path) reached the proxy", file: file, line: line)
        for request in requests {
            XCTAssertTrue(request.viaProxy, "\(request.method) \(request.uri) came through the proxy", file: file, line: line)
        }
    }

    func testASingleConnectionDownloadGoesThroughTheSessionProxy() async throws {
        let body = serve("/one.bin", size: 200_000)
        let s = try await proxiedSession()
        let t = try await s.download(unreachableOrigin + "/one.bin", options: ["destination": .string(work + "/one.bin")])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/one.bin", equals: body)
        assertAllProxied("/one.bin", atLeast: 1)
    }

    func testEveryRangeOfASegmentedDownloadGoesThroughTheSessionProxy() async throws {
        let body = serve("/ranges.bin", size: 8 << 20)
        // Slow enough that the download is split before the first connection ends it.
        server.set(.slow(bytesPerSecond: 4 << 20), on: "/ranges.bin")
        let s = try await proxiedSession()
        let t = try await s.download(unreachableOrigin + "/ranges.bin",
                                     options: ["destination": .string(work + "/ranges.bin"), "connections": .uint32(4)])
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/ranges.bin", equals: body)
        let ranged = server.requests(for: "/ranges.bin").filter { $0.header("Range") != nil }
        XCTAssertGreaterThanOrEqual(ranged.count, 2, "the file came in several ranges")
        assertAllProxied("/ranges.bin", atLeast: 2)
    }

    func testUploadsGoThroughTheSessionProxy() async throws {
        server.set(.acceptUploads(), on: "/put")
        server.set(.acceptUploads(), on: "/form")
        let content = TestData.bytes(count: 300_000, seed: 4)
        let source = work + "/up.bin"
        FileManager.default.createFile(atPath: source, contents: Data(content))
        let s = try await proxiedSession()
        let put = try await s.upload(unreachableOrigin + "/put", file: source)
        let form = try await s.upload(unreachableOrigin + "/form", file: source,
                                      options: ["method": .string("POST"), "form-field": .string("file")])
        for (name, t) in [("PUT", put), ("POST", form)] {
            let info = try await finish(t)
            XCTAssertEqual(info.state, "completed", "\(name): \(info.errorMessage)")
        }
        XCTAssertEqual(server.uploads(for: "/put").first?.sha256, TestData.sha256Hex(content), "the PUT body arrived whole")
        XCTAssertEqual(server.uploads(for: "/form").first?.part("file")?.sha256, TestData.sha256Hex(content),
                       "the form's file part arrived whole")
        assertAllProxied("/put", atLeast: 1)
        assertAllProxied("/form", atLeast: 1)
    }
}
