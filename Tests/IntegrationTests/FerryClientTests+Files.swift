@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

/// FerryClient's downloads as files: Metalink, bytes and digest, open files in and out.
extension FerryClientTests {
    /// `DownloadOptions.metalink` (v1.2): the file comes from the document's URL,
    /// checked against its SHA-256; a document with entities ends the task with
    /// `.invalidMetalink`, and nothing is saved.
    func testAMetalinkDownloadAndAHostileDocument() async throws {
        let body = serve("/c/ml.bin", size: 70_000, seed: 9)
        let doc = """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="ml.bin"><size>\(body.count)</size>
            <hash type="sha-256">\(TestData.sha256Hex(body))</hash><url>\(server.url("/c/ml.bin"))</url></file></metalink>
            """
        server.add(path: "/c/ml.meta4", body: Array(doc.utf8))
        server.add(path: "/c/evil.meta4", body: Array("<!DOCTYPE m [<!ENTITY a \"b\">]><metalink>&a;</metalink>".utf8))
        let session = FerrySession(configuration: configuration("org.example.Metalink"))
        defer { session.detach() }
        var options = DownloadOptions()
        options.metalink = URL(string: server.url("/c/ml.meta4"))
        let task = try await session.download(from: options.metalink!, to: URL(fileURLWithPath: work + "/ml.bin"), options: options)
        let result = try await task.value
        XCTAssertEqual(result.location?.path, work + "/ml.bin")
        XCTAssertEqual(result.sha256, TestData.sha256Hex(body), "checked against the document's hash")
        assertFile(work + "/ml.bin", equals: body)

        options.metalink = URL(string: server.url("/c/evil.meta4"))
        let evil = try await session.download(from: options.metalink!, to: URL(fileURLWithPath: work + "/evil.bin"), options: options)
        do {
            _ = try await evil.value
            XCTFail("a document with entities is refused")
        } catch let error as FerryError {
            guard case .invalidMetalink(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("DOCTYPE"), message)
        }
        XCTAssertFalse(exists(work + "/evil.bin"))
    }

    /// A download with the `sha256` option ends with its bytes and its checked digest,
    /// the same whether heard live, replayed to a later run, or settled from its
    /// properties (its event acknowledged before).
    func testADownloadEndsWithItsBytesAndDigest() async throws {
        let body = serve("/c/digest.bin", size: 120_000)
        let digest = TestData.sha256Hex(body)
        let id = "org.example.Digest"
        var options = DownloadOptions()
        options.sha256 = digest

        let session = FerrySession(configuration: configuration(id))
        let live = try await session.download(from: URL(string: server.url("/c/digest.bin"))!,
                                              to: URL(fileURLWithPath: work + "/live.bin"), options: options)
        let r = try await withDeadline(20, "the download") { try await live.value }
        XCTAssertEqual(r, FerryTaskResult(location: URL(fileURLWithPath: work + "/live.bin"), bytes: 120_000, sha256: digest))

        options.startsSuspended = true
        let away = try await session.download(from: URL(string: server.url("/c/digest.bin"))!,
                                              to: URL(fileURLWithPath: work + "/away.bin"), options: options)
        session.detach()
        try await client.transfer(id: away.id).resume()
        _ = try await signals.completed("/org/ferry/Ferry1/transfer/\(away.id)")
        let again = FerrySession(configuration: configuration(id))
        let replayed = try await again.allTasks().first { $0.id == away.id }?.value
        XCTAssertEqual(replayed, FerryTaskResult(location: URL(fileURLWithPath: work + "/away.bin"), bytes: 120_000, sha256: digest))
        again.detach()

        let settled = try await settledValues(id)
        XCTAssertEqual(settled.map(\.bytes), [120_000, 120_000])
        XCTAssertEqual(settled.map(\.sha256), [digest, digest])
    }

    /// A sandboxed app's way: a download into a file it opened (from the file chooser
    /// portal) and an upload from one; the app keeps and closes its own descriptors.
    func testDownloadIntoAndUploadFromOpenFiles() async throws {
        let body = serve("/c/fd.bin", size: 150_000)
        server.set(.acceptUploads(status: 200, body: Array("stored".utf8)), on: "/c/fd-up")
        let session = FerrySession(configuration: configuration("org.example.Fd"))
        defer { session.detach() }

        let target = work + "/chosen.bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: Data("old contents".utf8)))
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: target))
        let down = try await session.download(from: URL(string: server.url("/c/fd.bin"))!, into: out)
        let r = try await withDeadline(20, "the download into a descriptor") { try await down.value }
        XCTAssertEqual(r, FerryTaskResult(location: nil, bytes: 150_000))
        assertFile(target, equals: body)
        try out.close() // still the app's: closing it works

        let source = work + "/to-send.bin"
        let sent = Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        try sent.write(to: URL(fileURLWithPath: source))
        let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: source))
        let up = try await session.upload(from: input, to: URL(string: server.url("/c/fd-up"))!)
        let u = try await withDeadline(20, "the upload from a descriptor") { try await up.value }
        XCTAssertEqual(u, FerryTaskResult(location: nil, response: Data("stored".utf8), bytes: 70_000))
        XCTAssertEqual(server.uploads(for: "/c/fd-up").map(\.sha256), [TestData.sha256Hex(sent)])
        try input.close()
    }
}
