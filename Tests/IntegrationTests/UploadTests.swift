import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// `Session.Upload` through the real ferryd: the bytes the server receives, progress,
/// the answer, retries, pause and a SIGKILL in the middle.
final class UploadTests: FerryTestCase {
    /// Writes a deterministic file of `size` bytes into the work directory.
    func makeFile(_ name: String, size: Int, seed: UInt64 = 7) throws -> (path: String, body: [UInt8]) {
        let body = TestData.bytes(count: size, seed: seed)
        let path = work + "/" + name
        try Data(body).write(to: URL(fileURLWithPath: path))
        return (path, body)
    }

    /// Starts an upload of a 1 MiB file to `path`, paced by its session's speed limit
    /// (slow enough to act on while it runs), and waits until it has sent some.
    func startPacedUpload(_ name: String, to path: String) async throws -> (BusSession, FerryTransfer, body: [UInt8]) {
        let (file, body) = try makeFile(name, size: 1024 * 1024)
        server.set(.acceptUploads(), on: path)
        let s = try await session("com.example.Up", ["speed-limit": .uint64(256 * 1024)])
        let t = try await s.upload(server.url(path), file: file)
        try await signals.wait("Progress on \(t.path)", timeout: 10) { $0.contains { $0.path == t.path && $0.member == "Progress" } }
        return (s, t, body)
    }

    func response(_ t: FerryTransfer) async throws -> [UInt8] {
        let r = try await call(t.path, StandardNames.properties, "Get", [.string(BusClient.transferInterface), .string("Response")])
        return r.first?.bytes ?? []
    }

    func testPutArrivesByteExactWithProgressAndResponse() async throws {
        let (file, body) = try makeFile("up.bin", size: 3 * 1024 * 1024 + 17)
        server.set(.acceptUploads(), on: "/put")
        let s = try await session()
        let t = try await s.upload(server.url("/put"), file: file, options: ["description": .string("a put")])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.kind, "upload")
        XCTAssertEqual(info.destination, file)
        XCTAssertEqual(info.httpStatus, 201)
        XCTAssertEqual(info.bytesTransferred, Int64(body.count))
        XCTAssertEqual(info.bytesExpected, Int64(body.count))
        let received = server.uploads(for: "/put")
        XCTAssertEqual(received.count, 1)
        XCTAssertEqual(received.first?.byteCount, body.count)
        XCTAssertEqual(received.first?.sha256, TestData.sha256Hex(Data(body)))
        XCTAssertEqual(server.requests(for: "/put").first?.method, "PUT")
        let answer = String(decoding: try await response(t), as: UTF8.self)
        XCTAssertTrue(answer.contains(TestData.sha256Hex(Data(body))), answer)
        let progress = signals.signals(path: t.path, member: "Progress")
        XCTAssertFalse(progress.isEmpty)
        XCTAssertEqual(progress.last?.args[1].int64, Int64(body.count))
        XCTAssertEqual(progress.last?.args[2].int64, Int64(body.count))
        // The source file is untouched.
        assertFile(file, equals: body)
        let events = try await s.pendingEvents()
        XCTAssertEqual(events.filter { $0.transferPath == t.path }.map(\.kind), ["finished"])
    }

    func testUploadRateCountsWhileRunning() async throws {
        let (file, _) = try makeFile("rate.bin", size: 2 * 1024 * 1024)
        server.set(.acceptUploads(), on: "/rate")
        // Slow enough to act on while it runs: the session's speed limit paces the sending.
        let s = try await session("com.example.Up", ["speed-limit": .uint64(512 * 1024)])
        let t = try await s.upload(server.url("/rate"), file: file)
        let deadline = Date().addingTimeInterval(15)
        var rate: UInt64 = 0, downloadRate: UInt64 = 0
        while Date() < deadline, rate == 0 {
            let m = try await client.managerProperties()
            rate = m["UploadRate"]?.uint64 ?? 0
            downloadRate = m["DownloadRate"]?.uint64 ?? 0
            if try await t.info().isFinal { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        XCTAssertGreaterThan(rate, 0, "UploadRate while an upload runs")
        XCTAssertEqual(downloadRate, 0, "an upload is not a download")
        try await t.cancel()
    }

    func testPostMultipartWithFieldsAndResponseDestination() async throws {
        let (file, body) = try makeFile("photo.jpg", size: 300_000)
        server.set(.acceptUploads(status: 200, body: Array("thanks".utf8)), on: "/form")
        // A session whose other requests are JSON: its Content-Type does not reach the form.
        let s = try await session("com.example.Api", ["headers": .stringDict(["Content-Type": "application/json"])])
        let answerPath = work + "/answer.txt"
        let t = try await s.upload(server.url("/form"), file: file, options: [
            "method": .string("POST"), "form-field": .string("picture"), "content-type": .string("image/jpeg"),
            "form-values": .stringDict(["title": "holiday"]), "response-destination": .string(answerPath),
        ])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        let received = try XCTUnwrap(server.uploads(for: "/form").first)
        let types = server.requests(for: "/form").first?.headers.filter { $0.name.lowercased() == "content-type" }.map(\.value) ?? []
        XCTAssertEqual(types.count, 1, "one Content-Type: \(types)")
        XCTAssertTrue(types.first?.hasPrefix("multipart/form-data; boundary=") ?? false, "\(types)")
        let part = try XCTUnwrap(received.part("picture"))
        XCTAssertEqual(part.fileName, "photo.jpg")
        XCTAssertEqual(part.contentType, "image/jpeg")
        XCTAssertEqual(part.sha256, TestData.sha256Hex(Data(body)))
        XCTAssertEqual(received.part("title")?.value, "holiday")
        XCTAssertEqual(try String(contentsOfFile: answerPath, encoding: .utf8), "thanks")
        let stored = try await response(t)
        XCTAssertEqual(stored, [], "with response-destination the answer is in the file, not the property")
        let events = try await s.pendingEvents()
        XCTAssertEqual(events.first { $0.transferPath == t.path }?.details["location"]?.string, answerPath)
    }

    func testServerErrorIsRetriedFromZeroThenFailsWithHttpOn4xx() async throws {
        let (file, body) = try makeFile("retry.bin", size: 200_000)
        server.set(.acceptUploads(), on: "/flaky")
        server.set(.failFirst(1, status: 500), on: "/flaky")
        let s = try await session()
        let t = try await s.upload(server.url("/flaky"), file: file)
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.attempts, 2)
        XCTAssertEqual(server.uploads(for: "/flaky").last?.sha256, TestData.sha256Hex(Data(body)))

        server.set(.status(403), on: "/forbidden")
        let denied = try await s.upload(server.url("/forbidden"), file: file)
        let failed = try await finish(denied)
        XCTAssertEqual(failed.state, "failed")
        XCTAssertEqual(failed.errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertEqual(failed.httpStatus, 403)
        XCTAssertEqual(failed.attempts, 1, "a 4xx is not retried")
    }

    func testMissingFileAndBadOptionsAreRefused() async throws {
        let s = try await session()
        await assertBusError("org.ferry.Ferry1.Error.FileNotFound", "missing file") {
            _ = try await s.upload(self.server.url("/x"), file: self.work + "/absent.bin")
        }
        let (file, _) = try makeFile("ok.bin", size: 10)
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "relative path") {
            _ = try await s.upload(self.server.url("/x"), file: "ok.bin")
        }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "Content-Type as a header") {
            _ = try await s.upload(self.server.url("/x"), file: file, options: ["headers": .stringDict(["content-type": "text/csv"])])
        }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "form-field with PUT") {
            _ = try await s.upload(self.server.url("/x"), file: file, options: ["form-field": .string("f")])
        }
        await assertBusError("org.ferry.Ferry1.Error.InvalidDestination", "relative response-destination") {
            _ = try await s.upload(self.server.url("/x"), file: file, options: ["response-destination": .string("a.txt")])
        }
        await assertBusError("org.ferry.Ferry1.Error.InvalidDestination", "response-destination in a missing directory") {
            _ = try await s.upload(self.server.url("/x"), file: file, options: ["response-destination": .string(self.work + "/no/a.txt")])
        }
        let transfers = try await s.listTransfers()
        XCTAssertEqual(transfers.count, 0)
        XCTAssertEqual(server.requests.count, 0)
    }

    /// Each waiting upload holds its file open. ferryd raises its soft open-file limit
    /// to the hard one, and past what that leaves for uploads `Upload` is refused with
    /// `LimitExceeded`: downloads keep working, and a finished upload makes room again.
    func testWaitingUploadsCannotTakeEveryFileDescriptor() async throws {
        try await stopFerryd()
        try await startFerryd(wrapper: ["/usr/bin/prlimit", "--nofile=100:320", "--"])
        let pid = try XCTUnwrap(ferryd?.pid)
        let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        let openFiles = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }.map(String.init) ?? ""
        XCTAssertEqual(openFiles.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).prefix(2), ["320", "320"],
                       "the soft limit raised to the hard one: \(openFiles)")

        server.set(.acceptUploads(), on: "/many")
        let s = try await session()
        let queued = try await fillTheDescriptorBudget(refusalNaming: "open-file limit") { i in
            let (file, _) = try makeFile("photo\(i).jpg", size: 100)
            return try await s.upload(server.url("/many"), file: file, options: ["start": .boolean(false)])
        }

        let body = serve("/while.bin", size: 100_000)
        let d = try await s.download(server.url("/while.bin"), options: ["destination": .string(work + "/while.bin")])
        let info = try await finish(d)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/while.bin", equals: body)

        try await queued[0].resume()
        let sent = try await finish(queued[0])
        XCTAssertEqual(sent.state, "completed", sent.errorMessage)
        let (file, _) = try makeFile("one-more.jpg", size: 100)
        _ = try await s.upload(server.url("/many"), file: file, options: ["start": .boolean(false)])
        await assertDaemonAlive()
    }

    /// `response-destination` keeps what it held until a successful answer comes: an
    /// upload refused by the server makes none where there was none, and leaves the last
    /// receipt as it was; the next good
    /// answer replaces it whole, and a private receipt (0600) stays private.
    func testAFailedUploadLeavesTheResponseDestinationAsItWas() async throws {
        let (file, _) = try makeFile("doc.pdf", size: 20_000)
        let receipt = work + "/receipt.json"
        server.set(.acceptUploads(status: 403, body: Array("forbidden".utf8)), on: "/refuse")
        let s = try await session()
        // None yet: a refused upload makes none (not an empty one).
        let first = try await s.upload(server.url("/refuse"), file: file, options: ["response-destination": .string(receipt)])
        let refusedFirst = try await finish(first)
        XCTAssertEqual(refusedFirst.state, "failed")
        XCTAssertFalse(exists(receipt), "no receipt made by a refused upload")

        try Data("{\"previous\": true}".utf8).write(to: URL(fileURLWithPath: receipt))
        XCTAssertEqual(chmod(receipt, 0o600), 0)
        let refused = try await s.upload(server.url("/refuse"), file: file, options: ["response-destination": .string(receipt)])
        let failed = try await finish(refused)
        XCTAssertEqual(failed.state, "failed")
        XCTAssertEqual(try String(contentsOfFile: receipt, encoding: .utf8), "{\"previous\": true}")

        server.set(.acceptUploads(status: 200, body: Array("ok".utf8)), on: "/take")
        let taken = try await s.upload(server.url("/take"), file: file, options: ["response-destination": .string(receipt)])
        let done = try await finish(taken)
        XCTAssertEqual(done.state, "completed", done.errorMessage)
        XCTAssertEqual(try String(contentsOfFile: receipt, encoding: .utf8), "ok")
        var st = stat()
        XCTAssertEqual(stat(receipt, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600, "the receipt keeps its permissions")
    }

    func testFileChangedAfterTheCallFailsWithoutSendingIt() async throws {
        let (file, _) = try makeFile("changing.bin", size: 50_000)
        server.set(.acceptUploads(), on: "/chg")
        let s = try await session()
        let t = try await s.upload(server.url("/chg"), file: file, options: ["start": .boolean(false)])
        // The file grows after Upload answered.
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: file))
        handle.seekToEndOfFile()
        handle.write(Data("more".utf8))
        try handle.close()
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.FileNotFound")
        XCTAssertTrue(info.errorMessage.contains("changed"), info.errorMessage)
        XCTAssertEqual(server.uploads(for: "/chg").count, 0, "nothing of the changed file was sent")
    }

    func testAStalledFileHoldsUpOnlyItsOwnUploadAndCancelEndsIt() async throws {
        // The file to upload is on a FUSE mount whose reads do not come back (a hung
        // sshfs or document portal): ferryd's other transfers go on, and Cancel works.
        let (backing, _) = try makeFile("backing.bin", size: 2 * 1024 * 1024)
        let mount: StallingMount
        do {
            mount = try StallingMount(backing: backing, in: URL(fileURLWithPath: work))
        } catch let unavailable as StallingMount.Unavailable {
            throw XCTSkip(unavailable.reason)
        }
        // Before ferryd is stopped: its reader is let go, then the mount goes.
        addTeardownBlock {
            mount.release()
            mount.unmount()
        }
        server.set(.acceptUploads(), on: "/up")
        let body = serve("/other.bin", size: 300_000, seed: 31)
        let s = try await session()
        let upload = try await s.upload(server.url("/up"), file: mount.file)
        XCTAssertTrue(mount.waitForStalledRead(timeout: 20), "ferryd reads the file")

        let download = try await s.download(server.url("/other.bin"))
        let info = try await finish(download)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(info.destination, equals: body)

        try await upload.cancel()
        let ended = try await finish(upload)
        XCTAssertEqual(ended.state, "cancelled")
        XCTAssertTrue(server.uploads(for: "/up").isEmpty, "nothing of the stalled file was sent")
    }

    func testPauseGivesNoResumeDataAndResumeSendsFromZero() async throws {
        let (_, t, body) = try await startPacedUpload("pause.bin", to: "/pause")
        let resumeData = try await t.pause()
        XCTAssertEqual(resumeData, [], "an upload cannot continue in the middle")
        try await waitForState(t, "paused")
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(server.uploads(for: "/pause").last?.byteCount, body.count)
        XCTAssertEqual(server.uploads(for: "/pause").last?.sha256, TestData.sha256Hex(Data(body)))
    }

    func testSIGKILLDuringUploadRestartsItAndReportsOnce() async throws {
        let (s, t, body) = try await startPacedUpload("kill.bin", to: "/kill")
        try await killAndRestart()
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.kind, "upload")
        let complete = server.uploads(for: "/kill").filter { $0.byteCount == body.count }
        XCTAssertEqual(complete.last?.sha256, TestData.sha256Hex(Data(body)))
        let events = try await s.pendingEvents().filter { $0.transferPath == t.path }
        XCTAssertEqual(events.map(\.kind), ["finished"], "one completion event")
        XCTAssertEqual(signals.signals(path: t.path, member: "Completed").count, 1)
    }

    /// A POST whose body reached the server, killed with ferryd before its answer came:
    /// the server may have acted on it, so the restarted ferryd does not send it again on
    /// its own. The attempt counts as failed; with `retries` 0 the upload fails with
    /// `Network`, having reached the server once (a `Resume` would send it again).
    func testSIGKILLWhileAPOSTAwaitsItsAnswerDoesNotSendItAgain() async throws {
        let (file, _) = try makeFile("form.bin", size: 50_000)
        server.set(.neverAnswer, on: "/form")
        // Without retries, and a request-timeout that ends a second attempt quickly if
        // one were made.
        let s = try await session("com.example.Post", ["retries": .uint32(0), "request-timeout": .double(5)])
        let t = try await s.upload(server.url("/form"), file: file, options: ["method": .string("POST")])
        try await waitUntilAsync("the server to have the whole POST") { server.uploads(for: "/form").count == 1 }
        try await killAndRestart()
        let info = try await finish(t, timeout: 30)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network", info.errorMessage)
        XCTAssertEqual(info.attempts, 1)
        XCTAssertEqual(server.requests(for: "/form").count, 1, "the POST reached the server once")
    }

    /// `source-fd` in place of a path: the bytes come from the descriptor, and ferryd
    /// closes its copy once the upload is over (its descriptor count comes back).
    func testSourceDescriptorUploadsAndIsClosedAfterwards() async throws {
        let (file, body) = try makeFile("fd.bin", size: 100_000)
        server.set(.acceptUploads(), on: "/fd")
        let s = try await session()
        guard let pid = ferryd?.pid else { return XCTFail("ferryd is not running") }
        func targets() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []).compactMap {
                try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")
            }
        }
        // Descriptors of the uploaded file only (others, like curl's sockets, come and go).
        func descriptors() -> Int { targets().filter { $0 == file }.count }
        /// The count once it is `expected`, or after 2 s: the call's message (which holds
        /// its own copy of a received descriptor) is freed just after the answer is sent.
        func descriptors(settlingAt expected: Int) async -> Int {
            let deadline = Date().addingTimeInterval(2)
            var count = descriptors()
            while count != expected && Date() < deadline {
                try? await Task.sleep(nanoseconds: 10_000_000)
                count = descriptors()
            }
            return count
        }
        let before = descriptors()
        XCTAssertEqual(before, 0)
        let fd = open(file, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let r = try await call(s.path, BusClient.sessionInterface, "Upload",
                               [.string(server.url("/fd")), .string(""), .vardict(["source-fd": .unixFD(fd), "start": .boolean(false)])])
        let t = client.transfer(id: UInt64(r.first?.string?.split(separator: "/").last ?? "") ?? 0)
        let held = await descriptors(settlingAt: 1)
        XCTAssertEqual(held, 1, "ferryd holds the descriptor while the upload is to come: \(targets())")
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, "")
        XCTAssertEqual(server.uploads(for: "/fd").first?.sha256, TestData.sha256Hex(Data(body)))
        let afterUpload = await descriptors(settlingAt: before)
        XCTAssertEqual(afterUpload, before, "the received descriptor was closed: \(targets())")
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "a path and source-fd") {
            try await self.call(s.path, BusClient.sessionInterface, "Upload",
                                [.string(self.server.url("/fd")), .string(file), .vardict(["source-fd": .unixFD(fd)])])
        }
        // A descriptor that names the file but cannot read it (O_PATH) is refused at the
        // call, not found out part-way through the upload.
        let pathOnly = open(file, 0o10000000 | O_CLOEXEC) // O_PATH
        XCTAssertGreaterThanOrEqual(pathOnly, 0)
        defer { close(pathOnly) }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "an O_PATH source-fd") {
            try await self.call(s.path, BusClient.sessionInterface, "Upload",
                                [.string(self.server.url("/fd")), .string(""), .vardict(["source-fd": .unixFD(pathOnly)])])
        }
        // Descriptor options follow the rule of every option: no variant inside the variant.
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "a source-fd inside a second variant") {
            try await self.call(s.path, BusClient.sessionInterface, "Upload",
                                [.string(self.server.url("/fd")), .string(""), .vardict(["source-fd": .variant(.unixFD(fd))])])
        }
        let writable = open(work + "/into.bin", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        XCTAssertGreaterThanOrEqual(writable, 0)
        defer { close(writable) }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "a destination-fd inside a second variant") {
            try await self.call(s.path, BusClient.sessionInterface, "Download",
                                [.string(self.server.url("/fd")), .vardict(["destination-fd": .variant(.unixFD(writable))])])
        }
        let afterRefusal = await descriptors(settlingAt: before)
        XCTAssertEqual(afterRefusal, before, "a refused descriptor was closed: \(targets())")
    }
}
