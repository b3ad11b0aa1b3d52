import FerryInterface
import Foundation
import XCTest
@testable import FerryCore

/// The `metalink` option in the core (fake engine): the first attempt fetches the
/// document, the next ones the file from its URLs, checked against its hash.
final class MetalinkPhaseTests: XCTestCase {
    let metalinkURL = "https://example.com/file.meta4"

    func document(_ body: [UInt8], urls: [String]) -> [UInt8] {
        let sources = urls.enumerated().map { "<url priority=\"\($0.offset + 1)\">\($0.element)</url>" }.joined()
        return Array("""
        <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="named.iso">
        <size>\(body.count)</size><hash type="sha-256">\(CoreHarness.sha256Hex(body))</hash>\(sources)
        </file></metalink>
        """.utf8)
    }

    /// Plays the document's attempt: a 200 and the document in the file the request named.
    func serveDocument(_ h: CoreHarness, _ t: TransferID, _ doc: [UInt8]) throws {
        let request = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(request.url, metalinkURL)
        XCTAssertEqual(request.bodyLimit?.bytes, 4 * 1024 * 1024, "the document is fetched bounded")
        XCTAssertNotEqual(request.partPath, h.destination(t) + ".part", "not into the file's part")
        h.send(.response(t, EngineResponse(status: 200, expectedTotal: Int64(doc.count), effectiveURL: metalinkURL)))
        h.writePart(t, doc, path: request.partPath)
        h.send(.completed(t, .succeeded(bytesOnDisk: Int64(doc.count), sha256: nil)))
        XCTAssertFalse(h.exists(request.partPath), "the document's file is removed once read")
    }

    func testDocumentThenFileFromItsBestURLThenTheNextAfterAMismatch() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let body = Array("the real file".utf8)
        let t = try h.download(s, metalinkURL) { $0.metalink = self.metalinkURL }
        try serveDocument(h, t, document(body, urls: ["https://a.example/f", "https://b.example/f"]))
        XCTAssertEqual(h.state(t), .running, "back in the queue and started again at once")
        let first = try XCTUnwrap(h.engine.lastRequest(t))
        XCTAssertEqual(first.url, "https://a.example/f")
        XCTAssertTrue(first.computeSHA256, "the document's sha-256 is checked")
        XCTAssertEqual(h.snapshot(t)?.bytesExpected, Int64(body.count))
        XCTAssertTrue(h.destination(t).hasSuffix("/named.iso"), h.destination(t))

        h.succeed(t, body: Array("the real fil3".utf8), computeSHA: true) // same size, another hash
        XCTAssertEqual(h.state(t), .running, "a mismatch moves on to the next URL")
        XCTAssertEqual(h.engine.lastRequest(t)?.url, "https://b.example/f")
        h.succeed(t, body: body, computeSHA: true)
        XCTAssertEqual(h.state(t), .completed)
        XCTAssertEqual(h.snapshot(t)?.sha256, CoreHarness.sha256Hex(body))
    }

    func testBadDocumentFailsWithInvalidMetalink() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, metalinkURL) { $0.metalink = self.metalinkURL }
        try serveDocument(h, t, Array("<!DOCTYPE x [<!ENTITY a \"b\">]><metalink/>".utf8))
        let snap = try XCTUnwrap(h.snapshot(t))
        XCTAssertEqual(snap.state, .failed)
        XCTAssertEqual(snap.errorName, "org.ferry.Ferry1.Error.InvalidMetalink")
        XCTAssertEqual(h.engine.started.filter { $0.id == t }.count, 1, "no file request")
    }

    func testDocumentDisagreeingWithTheSha256OptionFails() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s, metalinkURL) {
            $0.metalink = self.metalinkURL
            $0.sha256 = String(repeating: "0", count: 64)
        }
        try serveDocument(h, t, document(Array("x".utf8), urls: ["https://a.example/f"]))
        XCTAssertEqual(h.snapshot(t)?.errorName, "org.ferry.Ferry1.Error.InvalidMetalink")
    }

    func testOptionMustBeAnHTTPURL() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        for bad in ["ftp://example.com/x.meta4", "", "no url"] {
            XCTAssertFerryError(try h.download(s) { $0.metalink = bad }, { if case .invalidArgument = $0 { return true } else { return false } }, bad)
        }
    }

    /// The document is parsed off the core's queue: meanwhile the transfer runs and the
    /// core answers; paused meanwhile, it never takes the document, and `Resume` fetches
    /// the document again; cancelled and removed meanwhile, the document is dropped.
    func testADocumentParsedAfterAPauseOrARemoveIsDropped() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let body = Array("the real file".utf8)
        let doc = document(body, urls: ["https://a.example/f"])
        let paused = try h.download(s, metalinkURL) { $0.metalink = self.metalinkURL }
        let removed = try h.download(s, metalinkURL) { $0.metalink = self.metalinkURL }
        h.metalinkReads.hold = true
        try serveDocument(h, paused, doc)
        try serveDocument(h, removed, doc)
        XCTAssertEqual(h.state(paused), .running, "running while its document is read")
        let other = try h.download(s, "https://example.com/other.bin")
        XCTAssertEqual(h.state(other), .running, "the core answers and schedules meanwhile")

        _ = try h.sync { try $0.pause(paused) }
        try h.sync { try $0.cancel(removed); try $0.remove(removed) }
        XCTAssertEqual(h.metalinkReads.release(), 2)
        h.sync { _ in }
        XCTAssertEqual(h.state(paused), .paused)
        XCTAssertNil(h.snapshot(removed))
        XCTAssertEqual(h.engine.started.filter { $0.id == paused }.count, 1, "no file request from a dropped document")
        XCTAssertFalse(h.destination(paused).hasSuffix("/named.iso"), "nor its name")

        // Resumed: the document is fetched again and this time taken.
        h.metalinkReads.hold = false
        try h.sync { try $0.resume(paused) }
        try serveDocument(h, paused, doc)
        XCTAssertEqual(h.engine.lastRequest(paused)?.url, "https://a.example/f")
        h.succeed(paused, body: body, computeSHA: true)
        XCTAssertEqual(h.state(paused), .completed)
    }

    /// A proxy that wants credentials (HTTP 407) refuses every source alike, since they
    /// all go through it: the download fails, keeps the bytes it has, and does not move
    /// to the next URL (which would start the file over).
    func testAProxyRefusingCredentialsDoesNotMoveToTheNextURL() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let body = Array("the real file".utf8)
        let t = try h.download(s, metalinkURL) { $0.metalink = self.metalinkURL }
        try serveDocument(h, t, document(body, urls: ["https://a.example/f", "https://b.example/f"]))
        h.writePart(t, Array(body.prefix(6)))
        h.fail(t, .http(status: 407, "The proxy proxy.example:3128 refused a tunnel to a.example:443 with HTTP 407 Proxy Authentication Required"),
               bytes: 6)
        XCTAssertEqual(h.state(t), .failed)
        XCTAssertEqual(h.snapshot(t)?.httpStatus, 407)
        XCTAssertEqual(h.engine.lastRequest(t)?.url, "https://a.example/f", "no other source tried")
        XCTAssertTrue(h.exists(h.destination(t) + ".part"), "the bytes it has stay")
    }
}
