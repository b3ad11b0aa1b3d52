import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// An upload whose file is on a FUSE mount that does not answer reads (a document
/// portal or sshfs that hangs, or a server written to stall): the read waits in the
/// kernel, and no signal ends it. Only that upload may wait; the engine's other
/// transfers go on, and a stop ends the stalled one.
final class StalledSourceTests: EngineTestCase {
    private var mount: StallingMount?
    private var sources: [EngineUpload] = []

    override func tearDown() {
        // Reads still waiting are answered before the engine is shut down, and the
        // mount goes before the directory that holds it.
        mount?.release()
        for source in sources { source.closeSource() }
        sources = []
        mount?.unmount()
        mount = nil
        super.tearDown()
    }

    /// Mounts a `StallingMount` whose file holds `bytes` (skips where FUSE cannot be mounted).
    private func mountStalling(_ bytes: [UInt8]) throws {
        let backing = directory.appendingPathComponent("backing.bin").path
        try write(bytes, to: backing)
        do {
            mount = try StallingMount(backing: backing, in: directory)
        } catch let unavailable as StallingMount.Unavailable {
            throw XCTSkip(unavailable.reason)
        }
    }

    func testAStalledSourceHoldsUpOnlyItsOwnUpload() throws {
        let bytes = TestData.bytes(count: 3 << 20, seed: 301)
        try mountStalling(bytes)
        server.set(.acceptUploads(), on: "/up")
        let body = TestData.bytes(count: 256 * 1024, seed: 302)
        server.add(path: "/other", body: body)

        let stalled = try EngineUpload.open(path: mount!.file)
        sources.append(stalled)
        var upload = EngineRequest(id: 1, url: server.url("/up"), partPath: "", requestTimeout: 60)
        upload.upload = stalled
        engine.start(upload)
        // The file system has the read: the upload is now waiting on it.
        XCTAssertTrue(mount!.waitForStalledRead(timeout: 20), "the upload reads its file")

        // Another transfer runs to its end meanwhile.
        engine.start(request(2, "/other"))
        XCTAssertEqual(log.outcome(of: 2, timeout: 20), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil),
                       "a download finishes while an upload's file stalls")
        XCTAssertTrue(contents(partPath("2.part")) == body, "the download's file holds the body")

        // The stalled upload stops when asked, having sent nothing.
        engine.stop(1)
        XCTAssertEqual(log.outcome(of: 1, timeout: 20), .stopped(bytesOnDisk: 0))
        XCTAssertTrue(server.uploads(for: "/up").isEmpty, "nothing of the stalled file was sent")

        // Once the file system answers, an upload from it arrives whole; the stopped
        // attempt's late chunk goes nowhere.
        mount!.release()
        let again = try EngineUpload.open(path: mount!.file)
        sources.append(again)
        var retry = EngineRequest(id: 3, url: server.url("/up"), partPath: "", requestTimeout: 60)
        retry.upload = again
        XCTAssertEqual(run(retry), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        let received = server.uploads(for: "/up")
        XCTAssertEqual(received.count, 1)
        XCTAssertEqual(received.first?.sha256, TestData.sha256Hex(bytes))
        XCTAssertEqual(log.events(for: 1).filter(\.isCompleted).count, 1, "the stopped upload ended once")
    }

    /// A download over several connections whose part file is on a mount that does not
    /// answer: only that download waits (its file is looked at and made by a file job),
    /// and a stop ends it once the file system answers, without leaving the file it made.
    func testAStalledPartFileHoldsUpOnlyItsOwnSegmentedDownload() throws {
        let part = try stopWhileThePartFileStalls(named: "big.bin.part")
        XCTAssertFalse(FileManager.default.fileExists(atPath: part), "the stopped download's empty file is not left")
    }

    /// The same where the file system then refuses the file: the stop is what the
    /// download ends with, not the failure (a `Pause` ends paused).
    func testAStopWhileThePartFileStallsIsAStopEvenWhenTheFileIsThenRefused() throws {
        _ = try stopWhileThePartFileStalls(named: "refused.bin.part")
    }

    /// Starts a 4-connection download with its part file in the mount's slow folder,
    /// checks that another download finishes meanwhile, stops it, releases the mount.
    private func stopWhileThePartFileStalls(named name: String, file: StaticString = #filePath,
                                            line: UInt = #line) throws -> String {
        try mountStalling([0])
        server.add(path: "/big", body: TestData.bytes(count: 3 << 20, seed: 311))
        let body = TestData.bytes(count: 256 * 1024, seed: 312)
        server.add(path: "/other", body: body)

        let part = mount!.slowFolder + "/" + name
        var segmented = request(1, "/big", part: part)
        segmented.connections = 4
        engine.start(segmented)
        XCTAssertTrue(mount!.waitForStalledRead(timeout: 20), "the file system has the part file's look-up",
                      file: file, line: line)

        engine.start(request(2, "/other"))
        XCTAssertEqual(log.outcome(of: 2, timeout: 20), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil),
                       "a download finishes while another's part file stalls", file: file, line: line)
        XCTAssertTrue(contents(partPath("2.part")) == body, "the download's file holds the body", file: file, line: line)

        engine.stop(1)
        mount!.release()
        XCTAssertEqual(log.outcome(of: 1, timeout: 20), .stopped(bytesOnDisk: 0), file: file, line: line)
        XCTAssertTrue(server.requests(for: "/big").isEmpty, "nothing was asked of the server", file: file, line: line)
        // A later download's end shows the engine went on; the stopped one ended once.
        XCTAssertEqual(run(request(3, "/other")), .succeeded(bytesOnDisk: Int64(body.count), sha256: nil), file: file, line: line)
        XCTAssertEqual(log.events(for: 1).filter(\.isCompleted).count, 1, "the stopped download ended once", file: file, line: line)
        return part
    }

    func testAFileOnFUSEArrivesWholeThroughARedirectAndAsAFormPart() throws {
        // Read ahead on the attempt's queue: a 307 rewinds the body (the chunks read for
        // the first request are dropped), and a multipart body pauses and resumes too.
        let bytes = TestData.bytes(count: 2_500_000, seed: 303)
        try mountStalling(bytes)
        mount!.release()
        server.set(.redirect(to: "/up", status: 307), on: "/moved")
        server.set(.acceptUploads(), on: "/up")
        server.set(.acceptUploads(status: 200), on: "/form")

        let raw = try EngineUpload.open(path: mount!.file)
        sources.append(raw)
        var put = EngineRequest(id: 1, url: server.url("/moved"), partPath: "", requestTimeout: 60)
        put.upload = raw
        XCTAssertEqual(run(put), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        XCTAssertEqual(server.uploads(for: "/up").last?.sha256, TestData.sha256Hex(bytes))

        let form = try EngineUpload.open(path: mount!.file, method: "POST",
                                         body: .multipart(field: "upload", fields: [.init(name: "title", value: "from FUSE")]))
        sources.append(form)
        var post = EngineRequest(id: 2, url: server.url("/form"), partPath: "", requestTimeout: 60)
        post.upload = form
        XCTAssertEqual(run(post), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        let part = try XCTUnwrap(server.uploads(for: "/form").last?.part("upload"))
        XCTAssertEqual(part.byteCount, bytes.count)
        XCTAssertEqual(part.sha256, TestData.sha256Hex(bytes))
    }
}
