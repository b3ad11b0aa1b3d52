import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The `metalink` option (v1.2) on the real ferryd: the loopback server serves a
/// Metalink 4 document and the file at several mirror paths.
final class MetalinkTests: FerryTestCase {
    static let namespace = "urn:ietf:params:xml:ns:metalink"

    /// A Metalink 4 document for `body` with these `(url, priority)` sources.
    func document(name: String, body: [UInt8], pieceLength: Int, urls: [(String, Int)]) -> [UInt8] {
        var pieces = ""
        var start = 0
        while start < body.count {
            let end = min(start + pieceLength, body.count)
            pieces += "      <hash>\(TestData.sha256Hex(Array(body[start..<end])))</hash>\n"
            start = end
        }
        let sources = urls.map { "    <url priority=\"\($0.1)\">\($0.0)</url>" }.joined(separator: "\n")
        return Array("""
        <?xml version="1.0" encoding="UTF-8"?>
        <metalink xmlns="\(Self.namespace)">
          <generator>FerryTests</generator>
          <file name="\(name)">
            <size>\(body.count)</size>
            <hash type="sha-256">\(TestData.sha256Hex(body))</hash>
            <pieces length="\(pieceLength)" type="sha-256">
        \(pieces)    </pieces>
        \(sources)
          </file>
        </metalink>
        """.utf8)
    }

    /// The file comes from the document's URLs, its pieces checked with the document's
    /// hashes: the best mirror corrupts piece 2 (fetched again from another), the next
    /// answers 404. The file arrives byte-exact under the document's name, its Sha256 is
    /// the document's, the bad piece is fetched again without restarting the file, and
    /// the log names the corrupting mirror.
    func testFileArrivesFromTheMirrorsByteExactPastACorruptOneAndA404() async throws {
        let pieceLength = 65_536
        let body = TestData.bytes(count: 1_000_000, seed: 41)
        let paths = ["/m1/file.bin", "/m3/file.bin", "/m4/file.bin"]
        for path in paths { server.add(path: path, body: body) }
        server.set(.corruptByte(at: 2 * pieceLength + 17), on: "/m1/file.bin") // piece 2
        // /m2/file.bin is not served: 404.
        let meta = document(name: "release-1.0.iso", body: body, pieceLength: pieceLength, urls: [
            (server.url("/m4/file.bin"), 4), (server.url("/m1/file.bin"), 1),
            (server.url("/m3/file.bin"), 3), (server.url("/m2/file.bin"), 2),
        ])
        server.add(path: "/release.meta4", body: meta)

        let s = try await session()
        let t = try await s.download(server.url("/release.meta4"), options: [
            "destination": .string(work + "/"), "metalink": .string(server.url("/release.meta4")),
        ])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, work + "/release-1.0.iso", "a directory destination takes the document's file name")
        assertFile(work + "/release-1.0.iso", equals: body)
        XCTAssertEqual(info.sha256.lowercased(), TestData.sha256Hex(body), "Sha256 is the document's, checked")
        XCTAssertEqual(server.requests(for: "/release.meta4").count, 1)
        XCTAssertFalse(server.requests(for: "/m1/file.bin").isEmpty, "the best URL is asked")
        let served = paths.flatMap { server.requests(for: $0) }.reduce(0) { $0 + $1.bodyBytesSent }
        XCTAssertLessThanOrEqual(served - body.count, 2 * pieceLength, "the bad piece is fetched again, not the whole file: \(served) bytes for \(body.count)")
        XCTAssertEqual(info.pieceLength, UInt64(pieceLength), "Pieces shows the document's")
        XCTAssertEqual(info.mirrors.count, 3, "Mirrors shows the document's other URLs: \(info.mirrors)")
        let log = ferryd?.log ?? ""
        XCTAssertTrue(log.contains("source \(server.url("/m1/file.bin")) dropped: piece"), "the log names the bad mirror")
        assertNothingLeftBehind()
    }

    /// Killed with SIGKILL once the document was read and the file asked for, ferryd
    /// restarts with the transfer, reads the document again, and the file arrives.
    func testSurvivesSIGKILLAfterTheDocument() async throws {
        let body = serve("/k/f.bin", size: 200_000, seed: 17)
        server.add(path: "/k/f.meta4", body: document(name: "f.bin", body: body, pieceLength: 65_536,
                                                      urls: [(server.url("/k/f.bin"), 1)]))
        server.set(.holdAnswers, on: "/k/f.bin")
        let s = try await session()
        let dest = work + "/killed.bin"
        let t = try await s.download(server.url("/k/f.meta4"), options: [
            "destination": .string(dest), "metalink": .string(server.url("/k/f.meta4")),
        ])
        try await waitUntilAsync("the file asked for, its answer held") { server.isHoldingAnswer(for: "/k/f.bin") }
        XCTAssertEqual(server.requests(for: "/k/f.meta4").count, 1)
        try await killFerryd()
        server.clearBehaviours(on: "/k/f.bin")
        server.release("/k/f.bin")
        try await startFerryd()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        XCTAssertEqual(server.requests(for: "/k/f.meta4").count, 2, "the document is read again after the restart")
    }

    /// A metalink download is never merged (dedupe) with a plain download of its URL
    /// under way: the plain one gets the document, the metalink one the file.
    func testAMetalinkDownloadIsNotMergedWithAPlainOneOfItsURL() async throws {
        let body = serve("/d/f.bin", size: 100_000, seed: 23)
        let meta = document(name: "f.bin", body: body, pieceLength: 16_384, urls: [(server.url("/d/f.bin"), 1)])
        server.add(path: "/d/f.meta4", body: meta)
        server.set(.holdAnswers, on: "/d/f.meta4")
        let s = try await session()
        let plain = try await s.download(server.url("/d/f.meta4"), options: ["destination": .string(work + "/plain.meta4")])
        try await waitUntilAsync("the plain download's request, its answer held") { server.isHoldingAnswer(for: "/d/f.meta4") }
        let metalink = try await s.download(server.url("/d/f.meta4"), options: [
            "destination": .string(work + "/ml.bin"), "metalink": .string(server.url("/d/f.meta4")),
        ])
        server.clearBehaviours(on: "/d/f.meta4")
        server.release("/d/f.meta4")
        let plainInfo = try await finish(plain)
        let metalinkInfo = try await finish(metalink)
        XCTAssertEqual(plainInfo.state, "completed", plainInfo.errorMessage)
        XCTAssertEqual(metalinkInfo.state, "completed", metalinkInfo.errorMessage)
        assertFile(work + "/plain.meta4", equals: meta)
        assertFile(work + "/ml.bin", equals: body)
    }

    /// A document with a DOCTYPE and nested entities ("billion laughs"), and one over
    /// 4 MiB, fail the transfer with InvalidMetalink; nothing is written to the final
    /// name and no mirror is asked. The oversize one is stopped by its Content-Length,
    /// and when it has none, once 4 MiB have come.
    func testHostileDocumentsFailWithInvalidMetalink() async throws {
        let body = serve("/f.bin", size: 5000)
        var entities = "<!ENTITY lol0 \"lol\">"
        for i in 1...9 { entities += "<!ENTITY lol\(i) \"" + String(repeating: "&lol\(i - 1);", count: 10) + "\">" }
        let laughs = """
        <?xml version="1.0"?>
        <!DOCTYPE metalink [\(entities)]>
        <metalink xmlns="\(Self.namespace)"><file name="f.bin"><identity>&lol9;</identity>
        <url>\(server.url("/f.bin"))</url></file></metalink>
        """
        server.add(path: "/laughs.meta4", body: Array(laughs.utf8))
        let good = document(name: "f.bin", body: body, pieceLength: 4096, urls: [(server.url("/f.bin"), 1)])
        var padded = good
        padded.insert(contentsOf: Array(repeating: UInt8(ascii: " "), count: 5 * 1024 * 1024), at: good.count - 20)
        server.add(path: "/big.meta4", body: padded)
        // Without a Content-Length (ended by closing): stopped once past 4 MiB.
        let raw = try RawResponseServer(replies: [
            "/unsized.meta4": Array("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".utf8) + padded,
        ])
        defer { raw.stop() }

        let s = try await session("com.example.Test", ["retries": .uint32(0)])
        for (url, expected) in [(server.url("/laughs.meta4"), "DOCTYPE"), (server.url("/big.meta4"), "4 MiB"),
                                (raw.url("/unsized.meta4"), "4 MiB")] {
            let path = URL(string: url)!.path
            let dest = work + "/out-\(path.dropFirst().prefix(3)).bin"
            let t = try await s.download(url, options: [
                "destination": .string(dest), "metalink": .string(url),
            ])
            let (_, errorName, errorMessage) = try await signals.completed(t.path)
            XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.InvalidMetalink", "\(path): \(errorMessage)")
            XCTAssertTrue(errorMessage.contains(expected), "\(path): the message says why: \(errorMessage)")
            let info = try await t.info()
            XCTAssertEqual(info.state, "failed")
            XCTAssertFalse(exists(dest), "\(path): nothing at the final name")
            XCTAssertFalse(exists(dest + ".part"), "\(path): no partial file")
        }
        XCTAssertEqual(server.requests(for: "/f.bin").count, 0, "no mirror of a refused document is asked")
        assertNothingLeftBehind()
    }

    /// No partial file and no fetched document (`.ferry-…`) is left in the work folder.
    func assertNothingLeftBehind(file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(partFiles(in: work), [], "no partial file is left", file: file, line: line)
        let hidden = (try? FileManager.default.contentsOfDirectory(atPath: work))?.filter { $0.hasPrefix(".ferry-") } ?? []
        XCTAssertEqual(hidden, [], "the fetched documents are removed", file: file, line: line)
    }

    /// `ferry get --metalink URL -d DIR --wait` saves the file under the document's name;
    /// with a hostile document it exits 1 naming InvalidMetalink; with a URL too, it is
    /// refused before anything is asked.
    func testCLIGetMetalink() async throws {
        let body = serve("/cli/f.bin", size: 40_000, seed: 3)
        server.add(path: "/cli/f.meta4", body: document(name: "from-doc.bin", body: body, pieceLength: 16_384,
                                                        urls: [(server.url("/cli/f.bin"), 1)]))
        server.add(path: "/cli/evil.meta4", body: Array("<?xml version=\"1.0\"?><!DOCTYPE m SYSTEM \"file:///etc/passwd\"><metalink/>".utf8))
        let dir = work + "/cli"
        let r = try ferry(["get", "--metalink", server.url("/cli/f.meta4"), "-d", dir, "--wait"])
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        assertFile(dir + "/from-doc.bin", equals: body)

        let bad = try ferry(["get", "--metalink", server.url("/cli/evil.meta4"), "-o", work + "/evil.bin", "--wait"])
        XCTAssertEqual(bad.status, 1, "stdout: \(bad.stdout)\nstderr: \(bad.stderr)")
        XCTAssertTrue((bad.stdout + bad.stderr).contains("DOCTYPE"), bad.stderr)
        XCTAssertFalse(exists(work + "/evil.bin"))

        let both = try ferry(["get", "--metalink", server.url("/cli/f.meta4"), server.url("/cli/f.bin")])
        XCTAssertNotEqual(both.status, 0)
        XCTAssertTrue(both.stderr.contains("--metalink takes no other URL"), both.stderr)
    }

    /// `metalink` must be an http(s) URL: anything else is InvalidArgument at the call,
    /// and no transfer is made.
    func testMetalinkOptionIsValidated() async throws {
        let s = try await session()
        for bad in ["ftp://example.org/x.meta4", "not a url", "", "file:///etc/passwd"] {
            await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", bad) {
                try await s.download(self.server.url("/x.bin"), options: ["metalink": .string(bad)])
            }
        }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "wrong type") {
            try await s.download(self.server.url("/x.bin"), options: ["metalink": .boolean(true)])
        }
        let transfers = try await s.listTransfers()
        XCTAssertEqual(transfers.count, 0, "a refused Download makes nothing")
        XCTAssertEqual(server.requests.count, 0)
    }
}
