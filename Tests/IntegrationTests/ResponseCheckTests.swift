import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Replies that must not end as a completed download, and failures that must say
/// what actually happened.
final class ResponseCheckTests: FerryTestCase {
    private func reply(_ head: String, body: [UInt8] = []) -> [UInt8] { Array(head.utf8) + body }

    private func failed(_ url: String, dest: String, _ configuration: [String: DBusValue] = ["retries": .uint32(0)],
                        options: [String: DBusValue] = [:]) async throws -> TransferInfo {
        let s = try await session("com.example.Checks", configuration)
        let t = try await s.download(url, options: ["destination": .string(dest)].merging(options) { $1 })
        return try await finish(t)
    }

    /// A Content-Length that cannot be true ("1e23", more than 63 bits) and a body
    /// shorter than its Content-Length fail with Network; no final file appears.
    func testImpossibleOrUnmetContentLengthIsANetworkFailure() async throws {
        let ten = Array("0123456789".utf8)
        let raw = try RawResponseServer(replies: [
            "/exp": reply("HTTP/1.1 200 OK\r\nContent-Length: 1e23\r\nConnection: close\r\n\r\n", body: ten),
            "/huge": reply("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\nConnection: close\r\n\r\n", body: ten),
            "/short": reply("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n", body: ten),
        ])
        defer { raw.stop() }
        for name in ["exp", "huge", "short"] {
            let dest = work + "/\(name).bin"
            let info = try await failed(raw.url("/\(name)"), dest: dest)
            XCTAssertEqual(info.state, "failed", "\(name): \(info.errorMessage)")
            XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network", "\(name): \(info.errorMessage)")
            XCTAssertFalse(exists(dest), "\(name): no final file")
        }
    }

    /// A reply without a status line says so, not "Only http and https URLs are supported".
    func testHTTP09OrGarbageSaysWhatHappened() async throws {
        let raw = try RawResponseServer(replies: [
            "/old": reply("hello, this is not HTTP\r\n\r\n"),
            "/ssh": reply("SSH-2.0-OpenSSH_9.2\r\n\r\n"),
        ])
        defer { raw.stop() }
        for name in ["old", "ssh"] {
            let info = try await failed(raw.url("/\(name)"), dest: work + "/\(name).bin")
            XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network", info.errorMessage)
            XCTAssertFalse(info.errorMessage.contains("Only http and https"), info.errorMessage)
            XCTAssertTrue(info.errorMessage.contains("status line"), info.errorMessage)
            XCTAssertTrue(info.errorMessage.contains("127.0.0.1:\(raw.port)"), "names the server: \(info.errorMessage)")
        }
    }

    /// A proxy that refuses the connection is named as the proxy, not as the server.
    func testRefusedProxyIsNamed() async throws {
        serve("/via-proxy.bin", size: 1000)
        let info = try await failed(server.url("/via-proxy.bin"), dest: work + "/p.bin",
                                    ["retries": .uint32(0), "proxy": .string("http://127.0.0.1:9")])
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network", info.errorMessage)
        XCTAssertTrue(info.errorMessage.contains("proxy 127.0.0.1:9"), info.errorMessage)
        XCTAssertFalse(info.errorMessage.hasPrefix("Connection refused by 127.0.0.1:\(server.port)"), info.errorMessage)
    }

    /// A response header over libcurl's limit is named as such (not "Out of memory"),
    /// and is not tried again: the same request gets the same header.
    func testAnOversizedResponseHeaderIsNamedAndNotRetried() async throws {
        let raw = try RawResponseServer(replies: [
            "/big": reply("HTTP/1.1 200 OK\r\nX-Big: " + String(repeating: "a", count: 1 << 20)
                          + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n", body: Array("hi".utf8)),
        ])
        defer { raw.stop() }
        let info = try await failed(raw.url("/big"), dest: work + "/big.bin", ["retries": .uint32(3)])
        XCTAssertEqual(info.state, "failed", info.errorMessage)
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network", info.errorMessage)
        XCTAssertTrue(info.errorMessage.contains("response header larger"), info.errorMessage)
        XCTAssertFalse(info.errorMessage.contains("memory"), info.errorMessage)
        XCTAssertEqual(info.attempts, 1, "not retried: \(info.errorMessage)")
    }

    /// A SOCKS proxy whose own name does not resolve is named as the proxy, not as the
    /// server (libcurl reports it as the host's name).
    func testAnUnresolvableSocksProxyIsNamed() async throws {
        serve("/socks.bin", size: 1000)
        for scheme in ["socks5h", "socks5"] {
            let info = try await failed(server.url("/socks.bin"), dest: work + "/\(scheme).bin",
                                        ["retries": .uint32(0), "proxy": .string("\(scheme)://proxy.invalid:1080")])
            XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network", info.errorMessage)
            XCTAssertTrue(info.errorMessage.contains("proxy proxy.invalid:1080"), "\(scheme): \(info.errorMessage)")
            XCTAssertFalse(info.errorMessage.contains("127.0.0.1"), "\(scheme): \(info.errorMessage)")
        }
    }

    /// A failed transfer that got no byte leaves no empty `.part` file behind.
    func testFailureWithoutDataLeavesNoEmptyPartFile() async throws {
        server.set(.status(404), on: "/missing.bin")
        let info = try await failed(server.url("/missing.bin"), dest: work + "/missing.bin")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Http", info.errorMessage)
        XCTAssertEqual(partFiles(in: work), [], "no .part file is left")
    }

    /// Every header the caller set stays with the origin it was meant for: on a
    /// redirect to another host (here another port) none of them is sent there.
    func testCallerHeadersAreDroppedOnARedirectToAnotherOrigin() async throws {
        let other = TestHTTPServer()
        try other.start()
        defer { other.stop() }
        let body = TestData.bytes(count: 50_000, seed: 9)
        other.add(path: "/elsewhere.bin", body: body)
        server.set(.redirect(to: other.url("/elsewhere.bin")), on: "/start.bin")
        serve("/same.bin", size: 1000)
        server.set(.redirect(to: "/same.bin"), on: "/here.bin")

        let s = try await session("com.example.Redirects", ["headers": .dictionary(key: "s", value: "s", [.init(.string("X-Session-Token"), .string("s3cret-session"))])])
        let headers: [String: DBusValue] = ["headers": .dictionary(key: "s", value: "s", [.init(.string("X-Api-Key"), .string("s3cret-key"))])]
        let t = try await s.download(server.url("/start.bin"), options: headers.merging(["destination": .string(work + "/r.bin")]) { $1 })
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/r.bin", equals: body)
        let first = try XCTUnwrap(server.requests(for: "/start.bin").first)
        XCTAssertEqual(first.header("X-Api-Key"), "s3cret-key", "the first origin gets the caller's headers")
        for request in other.requests(for: "/elsewhere.bin") {
            XCTAssertNil(request.header("X-Api-Key"), "the other origin never sees the API key")
            XCTAssertNil(request.header("X-Session-Token"), "the other origin never sees the session's headers")
        }
        XCTAssertFalse(other.requests(for: "/elsewhere.bin").isEmpty)

        // Within one origin they go along as before.
        let same = try await s.download(server.url("/here.bin"), options: headers.merging(["destination": .string(work + "/h.bin")]) { $1 })
        let sameInfo = try await finish(same)
        XCTAssertEqual(sameInfo.state, "completed", sameInfo.errorMessage)
        XCTAssertEqual(server.requests(for: "/same.bin").last?.header("X-Api-Key"), "s3cret-key")
    }

    /// The same for a download on several connections (curl would follow the first
    /// request's redirect with the headers, and the range requests went to the new
    /// origin with all of them, Authorization too) and for an upload (not followed).
    func testSegmentedDownloadsAndUploadsKeepHeadersWithTheirOrigin() async throws {
        let other = TestHTTPServer()
        try other.start()
        defer { other.stop() }
        let body = TestData.bytes(count: 6 << 20, seed: 19)
        other.add(path: "/asset.bin", body: body)
        other.set(.slow(bytesPerSecond: 8_000_000), on: "/asset.bin")
        server.set(.redirect(to: other.url("/asset.bin")), on: "/release.bin")
        other.set(.acceptUploads(), on: "/store")
        server.set(.redirect(to: other.url("/store"), status: 307), on: "/upload")

        let s = try await session("com.example.Redirects2", ["headers": .stringDict(["X-Session-Key": "SESSION-SECRET"])])
        let headers: [String: DBusValue] = ["headers": .stringDict(["Authorization": "token GH-SECRET", "X-Api-Key": "s3cret-key"])]
        let t = try await s.download(server.url("/release.bin"), options: headers.merging([
            "destination": .string(work + "/asset.bin"), "connections": .uint32(4)]) { $1 })
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/asset.bin", equals: body)
        XCTAssertEqual(server.requests(for: "/release.bin").first?.header("X-Api-Key"), "s3cret-key")
        let elsewhere = other.requests(for: "/asset.bin")
        XCTAssertGreaterThan(elsewhere.filter { $0.header("Range") != nil }.count, 0, "it did use ranges")
        for request in elsewhere {
            for name in ["Authorization", "X-Api-Key", "X-Session-Key"] {
                XCTAssertNil(request.header(name), "\(name) went to the other origin (\(request.header("Range") ?? "no range"))")
            }
        }

        let file = work + "/photo.jpg"
        try Data(repeating: 7, count: 20_000).write(to: URL(fileURLWithPath: file))
        let up = try await s.upload(server.url("/upload"), file: file, options: headers)
        let upInfo = try await finish(up)
        XCTAssertEqual(upInfo.state, "failed")
        XCTAssertTrue(upInfo.errorMessage.contains("another origin"), upInfo.errorMessage)
        XCTAssertTrue(other.requests(for: "/store").isEmpty, "nothing, and no header, went to the other origin")
    }
}
