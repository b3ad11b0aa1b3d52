import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// `forgetConnections`: after the machine moved to another network, no connection made
/// before is used again (one may be dead without a word), save that of a request that
/// goes on.
final class NetworkMoveTests: EngineTestCase {
    private var sources: [EngineUpload] = []

    override func tearDown() {
        for source in sources { source.closeSource() }
        sources = []
        super.tearDown()
    }

    private func connection(_ path: String) throws -> Int {
        let request = try XCTUnwrap(server.requests(for: path).last, "no request for \(path)")
        XCTAssertGreaterThan(request.connection, 0)
        return request.connection
    }

    func testAfterAMoveAnIdleConnectionIsNotUsedAgain() throws {
        for (i, path) in ["/before", "/again", "/after"].enumerated() {
            server.add(path: path, body: TestData.bytes(count: 5_000, seed: UInt64(120 + i)))
        }
        XCTAssertEqual(run(request(1, "/before")), .succeeded(bytesOnDisk: 5_000, sha256: nil))
        XCTAssertEqual(run(request(2, "/again")), .succeeded(bytesOnDisk: 5_000, sha256: nil))
        XCTAssertEqual(try connection("/again"), try connection("/before"), "an idle connection is used again as a rule")

        engine.forgetConnections()
        XCTAssertEqual(run(request(3, "/after")), .succeeded(bytesOnDisk: 5_000, sha256: nil))
        XCTAssertNotEqual(try connection("/after"), try connection("/before"), "a connection of the old network was used")
        XCTAssertEqual(contents(partPath("3.part")), TestData.bytes(count: 5_000, seed: 122))
    }

    /// A POST whose answer is awaited keeps its connection (the core does not stop it:
    /// sent again, the server could act twice) and gets its answer; no other request
    /// goes on that connection, then or after.
    func testARequestGoingOnKeepsItsConnection() throws {
        let bytes = TestData.bytes(count: 20_000, seed: 125)
        server.set(.acceptUploads(), on: "/form")
        server.set(.holdAnswers, on: "/form")
        server.add(path: "/other", body: TestData.bytes(count: 1_000, seed: 126))
        let path = directory.appendingPathComponent("form.bin").path
        try write(bytes, to: path)
        let source = try EngineUpload.open(path: path, method: "POST", body: .raw, contentType: nil, responseDestination: nil)
        sources.append(source)
        var post = EngineRequest(id: 1, url: server.url("/form"), partPath: "", requestTimeout: 30)
        post.upload = source
        engine.start(post)
        let deadline = Date().addingTimeInterval(20)
        while !server.isHoldingAnswer(for: "/form") && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertTrue(server.isHoldingAnswer(for: "/form"), "the POST arrived, its answer held")

        engine.forgetConnections()
        // Taken after the move (commands are taken in order): by its end the move was made.
        XCTAssertEqual(run(request(2, "/other")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        // Plain http is never multiplexed: meanwhile new connections are used again.
        let meanwhile = try connection("/other")
        XCTAssertEqual(run(request(5, "/other")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        XCTAssertEqual(try connection("/other"), meanwhile)
        XCTAssertTrue(server.isHoldingAnswer(for: "/form"))
        server.release("/form")

        XCTAssertEqual(log.outcome(of: 1, timeout: 20), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        XCTAssertEqual(server.uploads(for: "/form").count, 1, "sent once")
        // Its connection, idle now, is of the old network: not used again.
        XCTAssertEqual(run(request(3, "/other")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        XCTAssertNotEqual(try connection("/other"), try connection("/form"), "went on the POST's connection")
        // The old network's connections gone, connections are used again as a rule.
        let fresh = try connection("/other")
        XCTAssertEqual(run(request(4, "/other")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        XCTAssertEqual(try connection("/other"), fresh)
    }

    /// A download going on over HTTP/1.1 (one the core keeps: stopped, it would start
    /// over) keeps its connection and finishes; meanwhile new requests reuse new
    /// connections as usual (an HTTP/1.1 connection in use takes no other request), and
    /// its connection is not used again once it is done.
    func testADownloadGoingOnOverHTTP1KeepsItsConnectionAndLeavesReuseAlone() throws {
        let body = TestData.bytes(count: 150_000, seed: 127)
        server.add(path: "/long", body: body)
        server.set(.slow(bytesPerSecond: 50_000), on: "/long")
        server.add(path: "/small", body: TestData.bytes(count: 1_000, seed: 128))
        engine.start(request(1, "/long"))
        XCTAssertTrue(log.wait(timeout: 20) { events in events.contains { $0.transferID == 1 && $0.progress != nil } }, "some bytes arrive")

        engine.forgetConnections()
        XCTAssertEqual(run(request(2, "/small")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        let fresh = try connection("/small")
        XCTAssertEqual(run(request(3, "/small")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        XCTAssertEqual(try connection("/small"), fresh, "a connection made after the move is used again")
        XCTAssertFalse(log.events(for: 1).contains { if case .completed = $0 { return true }; return false },
                       "the download still went on meanwhile (else this says nothing)")

        XCTAssertEqual(log.outcome(of: 1, timeout: 20), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil))
        XCTAssertEqual(contents(partPath("1.part")), body)
        XCTAssertEqual(server.requests(for: "/long").count, 1)
        let old = try connection("/long")
        XCTAssertEqual(run(request(4, "/small")), .succeeded(bytesOnDisk: 1_000, sha256: nil))
        XCTAssertNotEqual(try connection("/small"), old, "went on the old network's connection after its download")
    }
}
