import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// Uploads: PUT and POST multipart streamed from a descriptor, checked byte for byte
/// by the server's SHA-256 of what it received.
final class UploadTests: EngineTestCase {
    private var sources: [EngineUpload] = []

    override func tearDown() {
        for source in sources { source.closeSource() }
        sources = []
        super.tearDown()
    }

    private func sourceFile(_ bytes: [UInt8], name: String = "photo.jpg") throws -> String {
        let path = directory.appendingPathComponent(name).path
        try write(bytes, to: path)
        return path
    }

    private func open(_ path: String, method: String = "PUT", body: EngineUpload.Body = .raw,
                      contentType: String? = nil, responseDestination: String? = nil) throws -> EngineUpload {
        let source = try EngineUpload.open(path: path, method: method, body: body, contentType: contentType,
                                           responseDestination: responseDestination)
        sources.append(source)
        return source
    }

    private func uploadRequest(_ id: TransferID, _ path: String, _ source: EngineUpload, speedLimit: UInt64 = 0) -> EngineRequest {
        var r = EngineRequest(id: id, url: server.url(path), partPath: "", speedLimit: speedLimit, requestTimeout: 30)
        r.upload = source
        return r
    }

    /// A server that takes the file and never answers: the upload fails after its
    /// `request-timeout` (curl's own check counted the bytes sent in its 5 s average
    /// and fired about 3× late).
    func testAnUnansweredUploadTimesOutOnTime() throws {
        server.set(.neverAnswer, on: "/silent")
        let source = try open(try sourceFile(TestData.bytes(count: 1_000, seed: 72)))
        var r = uploadRequest(1, "/silent", source)
        r.requestTimeout = 2
        let started = Date()

        let outcome = run(r, timeout: 30)

        guard case .failed(.timeout(let message), _)? = outcome else {
            return XCTFail("expected a timeout, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("No data from 127.0.0.1:\(server.port) for 2 s"), message)
        XCTAssertLessThan(Date().timeIntervalSince(started), 4.5)
        XCTAssertEqual(server.uploads(for: "/silent").count, 1, "the file was sent")
    }

    func testPutArrivesByteExact() throws {
        let bytes = TestData.bytes(count: 3_000_123, seed: 70)
        server.set(.acceptUploads(), on: "/up")
        let source = try open(try sourceFile(bytes), contentType: "image/jpeg")

        let outcome = run(uploadRequest(1, "/up", source))

        XCTAssertEqual(outcome, .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        let received = try XCTUnwrap(server.requests(for: "/up").last)
        XCTAssertEqual(received.method, "PUT")
        XCTAssertEqual(received.header("Content-Type"), "image/jpeg")
        XCTAssertEqual(received.upload?.byteCount, bytes.count)
        XCTAssertEqual(received.upload?.sha256, TestData.sha256Hex(bytes))
        let response = try XCTUnwrap(responses(1).first)
        XCTAssertEqual(response.status, 201)
        XCTAssertEqual(response.body.map { String(decoding: $0, as: UTF8.self) },
                       "received \(bytes.count) bytes, sha256 \(TestData.sha256Hex(bytes))\n")
        assertWellFormedEvents(1, upload: true)
    }

    func testPostMultipartArrivesByteExactWithItsFields() throws {
        let bytes = TestData.bytes(count: 1_500_000, seed: 71)
        server.set(.acceptUploads(status: 200), on: "/form")
        let body = EngineUpload.Body.multipart(field: "upload", fields: [.init(name: "title", value: "Holiday 2026")])
        let source = try open(try sourceFile(bytes, name: "beach.png"), method: "POST", body: body, contentType: "image/png")

        XCTAssertEqual(run(uploadRequest(1, "/form", source)), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))

        let received = try XCTUnwrap(server.requests(for: "/form").last)
        XCTAssertEqual(received.method, "POST")
        XCTAssertTrue(received.header("Content-Type")?.hasPrefix("multipart/form-data; boundary=") ?? false)
        let upload = try XCTUnwrap(received.upload)
        XCTAssertEqual(upload.parts.map(\.name), ["title", "upload"])
        XCTAssertEqual(upload.part("title")?.value, "Holiday 2026")
        let file = try XCTUnwrap(upload.part("upload"))
        XCTAssertEqual(file.fileName, "beach.png")
        XCTAssertEqual(file.contentType, "image/png")
        XCTAssertEqual(file.byteCount, bytes.count)
        XCTAssertEqual(file.sha256, TestData.sha256Hex(bytes))
    }

    func testRawPostSendsTheFileAsTheBody() throws {
        let bytes = TestData.bytes(count: 200_000, seed: 72)
        server.set(.acceptUploads(), on: "/raw")
        let source = try open(try sourceFile(bytes), method: "POST")

        XCTAssertEqual(run(uploadRequest(1, "/raw", source)), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        let received = try XCTUnwrap(server.requests(for: "/raw").last)
        XCTAssertEqual(received.method, "POST")
        XCTAssertEqual(received.header("Content-Type"), "application/octet-stream")
        XCTAssertEqual(received.upload?.sha256, TestData.sha256Hex(bytes))
    }

    /// A speed limit holds from an upload's first bytes: one smaller than libcurl's
    /// upload buffer (512 KiB) is paced too, not sent in one go.
    func testASmallUploadKeepsToTheSpeedLimit() throws {
        let bytes = TestData.bytes(count: 300 * 1024, seed: 74)
        server.set(.acceptUploads(), on: "/small")
        let source = try open(try sourceFile(bytes))
        let started = Date()
        XCTAssertEqual(run(uploadRequest(1, "/small", source, speedLimit: 100 * 1024), timeout: 60),
                       .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        // 300 KiB at 100 KiB/s takes ~3 s (the first quarter second's worth goes at once);
        // unlimited on loopback it takes milliseconds.
        XCTAssertGreaterThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(server.uploads(for: "/small").last?.sha256, TestData.sha256Hex(bytes))
    }

    func testProgressCountsBytesSent() throws {
        let bytes = TestData.bytes(count: 2 << 20, seed: 73)
        server.set(.acceptUploads(), on: "/up")
        let source = try open(try sourceFile(bytes))

        // 2 MiB at 1 MiB/s: about two seconds of progress events.
        XCTAssertEqual(run(uploadRequest(1, "/up", source, speedLimit: 1 << 20), timeout: 60),
                       .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))

        let events = log.events(for: 1)
        let progress = events.compactMap(\.progress)
        XCTAssertGreaterThanOrEqual(progress.count, 3, "progress while sending")
        XCTAssertEqual(progress.map(\.bytesWritten).reduce(0, +), Int64(bytes.count))
        XCTAssertEqual(progress.last?.totalOnDisk, Int64(bytes.count))
        XCTAssertTrue(progress.allSatisfy { $0.expected == Int64(bytes.count) })
        XCTAssertEqual(zip(progress, progress.dropFirst()).filter { $0.totalOnDisk >= $1.totalOnDisk }.count, 0, "counts grow")
        // The answer comes after the body: the response event follows the progress.
        let responseIndex = try XCTUnwrap(events.firstIndex { $0.response != nil })
        XCTAssertGreaterThan(responseIndex, try XCTUnwrap(events.lastIndex { $0.progress != nil }))
        XCTAssertEqual(server.uploads(for: "/up").last?.sha256, TestData.sha256Hex(bytes))
    }

    func testServerErrorThenRetryFromTheStart() throws {
        let bytes = TestData.bytes(count: 1_000_000, seed: 74)
        server.set(.acceptUploads(), on: "/up")
        server.set(.failFirst(1, status: 500), on: "/up")
        let source = try open(try sourceFile(bytes))

        let first = run(uploadRequest(1, "/up", source))
        guard case .failed(.http(let status, _), _)? = first else {
            return XCTFail("expected an HTTP failure, got \(String(describing: first))")
        }
        XCTAssertEqual(status, 500)
        XCTAssertEqual(responses(1).first?.status, 500)

        // The same descriptor serves the retry, from byte 0.
        XCTAssertEqual(run(uploadRequest(2, "/up", source)), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))
        let uploads = server.uploads(for: "/up")
        XCTAssertEqual(uploads.count, 2)
        XCTAssertEqual(uploads.last?.byteCount, bytes.count)
        XCTAssertEqual(uploads.last?.sha256, TestData.sha256Hex(bytes))
    }

    func testFileChangedAfterOpeningIsRefused() throws {
        let path = try sourceFile(TestData.bytes(count: 100_000, seed: 75))
        server.set(.acceptUploads(), on: "/up")
        let source = try open(path)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([1, 2, 3]))
        try handle.close()

        let outcome = run(uploadRequest(1, "/up", source))

        guard case .failed(.fileNotFound(let message), _)? = outcome else {
            return XCTFail("expected the changed file to be refused, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("changed") && message.contains("100003"), message)
        XCTAssertTrue(server.requests(for: "/up").isEmpty, "nothing was sent")
    }

    func testFileModifiedWhileSendingStopsTheUpload() throws {
        let original = TestData.bytes(count: 4 << 20, seed: 76)
        let path = try sourceFile(original)
        server.set(.acceptUploads(), on: "/up")
        let source = try open(path)
        engine.start(uploadRequest(1, "/up", source, speedLimit: 1 << 20))
        XCTAssertTrue(log.wait(timeout: 20) { $0.contains { $0.progress != nil } }, "sending started")

        // Same size, other bytes, a later modification time.
        let fd = Glibc.open(path, O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var ts = [timespec(tv_sec: time(nil) + 5, tv_nsec: 0), timespec(tv_sec: time(nil) + 5, tv_nsec: 0)]
        _ = TestData.bytes(count: 4096, seed: 77).withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, 3 << 20) }
        XCTAssertEqual(futimens(fd, &ts), 0)
        close(fd)

        let outcome = log.outcome(of: 1, timeout: 30)
        guard case .failed(.fileNotFound(let message), let sent)? = outcome else {
            return XCTFail("expected the modified file to stop the upload, got \(String(describing: outcome))")
        }
        XCTAssertTrue(message.contains("modified"), message)
        XCTAssertLessThan(sent, Int64(original.count))
        XCTAssertFalse(server.uploads(for: "/up").contains { $0.byteCount == original.count }, "no whole body arrived")
    }

    func testRedirectedUploadResendsTheWholeFileFromItsStart() throws {
        // A 307 makes libcurl rewind the body and send it again to the new place: the
        // chunks read ahead for the first request are dropped and the file read anew.
        let bytes = TestData.bytes(count: 1_700_000, seed: 78)
        server.set(.redirect(to: "/up", status: 307), on: "/moved")
        server.set(.acceptUploads(), on: "/up")
        let source = try open(try sourceFile(bytes))

        XCTAssertEqual(run(uploadRequest(1, "/moved", source)), .succeeded(bytesOnDisk: Int64(bytes.count), sha256: nil))

        XCTAssertEqual(server.requests(for: "/moved").count, 1)
        let received = try XCTUnwrap(server.uploads(for: "/up").last)
        XCTAssertEqual(received.byteCount, bytes.count)
        XCTAssertEqual(received.sha256, TestData.sha256Hex(bytes))
    }

    func testStopMidUploadReportsBytesSent() throws {
        let bytes = TestData.bytes(count: 4 << 20, seed: 80)
        server.set(.acceptUploads(), on: "/up")
        let source = try open(try sourceFile(bytes))
        engine.start(uploadRequest(1, "/up", source, speedLimit: 1 << 20))
        XCTAssertTrue(log.wait(timeout: 20) { $0.contains { $0.progress != nil } }, "sending started")

        engine.stop(1)

        guard case .stopped(let sent)? = log.outcome(of: 1, timeout: 20) else { return XCTFail("not stopped") }
        XCTAssertGreaterThan(sent, 0)
        XCTAssertLessThan(sent, Int64(bytes.count))
        XCTAssertEqual(log.events(for: 1).compactMap(\.progress).last?.totalOnDisk, sent)
        XCTAssertFalse(server.uploads(for: "/up").contains { $0.byteCount == bytes.count })
    }

    func testResponseIsSavedToItsDestination() throws {
        let answer = TestData.bytes(count: 200_000, seed: 78)
        server.set(.acceptUploads(status: 200, body: answer), on: "/up")
        let destination = directory.appendingPathComponent("answer.json").path
        let source = try open(try sourceFile([1, 2, 3, 4]), responseDestination: destination)

        let steps = StepLog()
        DurableFiles.observe { steps.append($0) }
        defer { DurableFiles.observe(nil) }
        XCTAssertEqual(run(uploadRequest(1, "/up", source)), .succeeded(bytesOnDisk: 4, sha256: nil))
        XCTAssertEqual(contents(destination), answer)
        XCTAssertNil(responses(1).first?.body, "saved, not kept in memory")
        XCTAssertEqual(steps.all.filter { $0.mentions(destination) || $0 == .syncFolder(directory.path) },
                       [.syncFile(destination), .syncFolder(directory.path)], "synced with its folder before the upload completed")
    }

    /// A missing `response-destination` is made by the successful answer only, not
    /// before: a refused upload leaves no empty file there.
    func testAMissingDestinationIsMadeOnlyByASuccessfulAnswer() throws {
        server.set(.acceptUploads(status: 403, body: Array("no".utf8)), on: "/refuse")
        server.set(.acceptUploads(status: 201, body: Array("yes".utf8)), on: "/take")
        let destination = directory.appendingPathComponent("new-receipt.txt").path
        let refused = try open(try sourceFile([1, 2, 3]), responseDestination: destination)
        guard case .failed(.http(403, _), _)? = run(uploadRequest(1, "/refuse", refused)) else { return XCTFail("not refused") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination), "no empty receipt")
        let taken = try open(try sourceFile([1, 2, 3], name: "again.jpg"), responseDestination: destination)
        XCTAssertEqual(run(uploadRequest(2, "/take", taken)), .succeeded(bytesOnDisk: 3, sha256: nil))
        XCTAssertEqual(contents(destination), Array("yes".utf8))
    }

    /// The destination's folder became one where no file can be made since the call: the
    /// upload fails with `Disk` before anything is sent (the server must not take an
    /// upload whose answer cannot be kept), whether a receipt is there or not. Root makes
    /// files in any folder: as root, this test runs itself again as `nobody`.
    func testAFolderThatTakesNoFileFailsTheUploadBeforeSending() throws {
        if geteuid() == 0 { return try runAgainAsNobody("testAFolderThatTakesNoFileFailsTheUploadBeforeSending") }
        server.set(.acceptUploads(status: 201, body: Array("yes".utf8)), on: "/up")
        let folder = directory.appendingPathComponent("receipts").path
        XCTAssertEqual(mkdir(folder, 0o755), 0)
        try write(Array("old".utf8), to: folder + "/there.txt")
        XCTAssertEqual(chmod(folder, 0o555), 0)
        defer { chmod(folder, 0o755) }
        for (id, name) in [(TransferID(1), "there.txt"), (TransferID(2), "missing.txt")] {
            let source = try open(try sourceFile([1, 2, 3], name: "\(name).src"), responseDestination: folder + "/" + name)
            guard case .failed(.disk(let message), 0)? = run(uploadRequest(id, "/up", source)) else { return XCTFail("\(name): not a disk failure") }
            XCTAssertTrue(message.contains(name), message)
        }
        XCTAssertTrue(server.uploads(for: "/up").isEmpty, "nothing was sent")
        XCTAssertEqual(contents(folder + "/there.txt"), Array("old".utf8))
    }

    /// Runs this class's test `name` in a new process of this test binary as `nobody`
    /// (for what root is never refused), and asserts that it passed there. Skips where
    /// `runuser` is missing or `nobody` cannot reach the binary.
    private func runAgainAsNobody(_ name: String) throws {
        let runuser = "/usr/sbin/runuser"
        let binary = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: runuser), "no runuser to run as nobody")
        func run(_ arguments: [String], output: String? = nil) throws -> Int32 {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: runuser)
            p.arguments = ["-u", "nobody", "--"] + arguments
            if let output {
                FileManager.default.createFile(atPath: output, contents: nil)
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
                p.standardOutput = handle
                p.standardError = handle
            }
            try p.run()
            p.waitUntilExit()
            return p.terminationStatus
        }
        try XCTSkipUnless(try run(["test", "-x", binary]) == 0, "nobody cannot run \(binary)")
        // Its own temporary folder (HOME and TMPDIR), which nobody owns.
        let home = directory.appendingPathComponent("nobody").path
        XCTAssertEqual(mkdir(home, 0o700), 0)
        XCTAssertEqual(chown(home, 65534, 65534), 0)
        _ = chmod(directory.path, 0o755)
        let output = directory.appendingPathComponent("nobody.log").path
        let status = try run(["env", "HOME=\(home)", "TMPDIR=\(home)", binary, "FerryEngineTests.UploadTests/\(name)"], output: output)
        let log = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        XCTAssertEqual(status, 0, log)
        XCTAssertTrue(log.contains("Executed 1 test, with 0 failures"), log)
        XCTAssertFalse(log.contains("skipped"), log)
    }

    func testResponseKeptInMemoryIsCappedAt64KiB() throws {
        let answer = TestData.bytes(count: 200_000, seed: 79)
        server.set(.acceptUploads(status: 200, body: answer), on: "/up")
        let source = try open(try sourceFile([5, 6, 7]))

        XCTAssertEqual(run(uploadRequest(1, "/up", source)), .succeeded(bytesOnDisk: 3, sha256: nil))
        XCTAssertEqual(responses(1).first?.body, Array(answer[..<(64 * 1024)]))
    }

    func testMissingFileIsFileNotFound() {
        XCTAssertThrowsError(try EngineUpload.open(path: directory.appendingPathComponent("nope").path)) { error in
            guard case CoreError.fileNotFound(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("no file"), message)
        }
    }
}
