import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

final class PauseResumeTests: FerryTestCase {
    var size: Int { stalledSize }
    var cut: Int { stalledCut }

    /// Bytes that arrived before the server stalled are reported: a Progress signal
    /// with them comes while it stalls, and BytesTransferred shows them.
    func testStalledDownloadReportsTheBytesItHas() async throws {
        let dest = work + "/stalled.bin"
        let (t, _) = try await startStalledDownload("/stalled.bin", dest: dest)
        try await signals.wait("a Progress with the \(cut) bytes received before the stall", timeout: 10) { s in
            s.contains { $0.path == t.path && $0.member == "Progress" && $0.args[1].int64 == Int64(self.cut) }
        }
        let info = try await t.info()
        XCTAssertEqual(info.bytesTransferred, Int64(cut))
        XCTAssertEqual(info.bytesExpected, Int64(size))
        XCTAssertEqual(info.state, "running")
        // Paused, it still says how much it has.
        _ = try await t.pause()
        let paused = try await t.info()
        XCTAssertEqual(paused.bytesTransferred, Int64(cut))
    }

    /// Pause keeps the partial file and gives resume data; Resume continues with a
    /// validated range request and ends with the right file.
    func testPauseAndResumeContinuesWithValidatedRange() async throws {
        let dest = work + "/big.bin"
        let (t, body) = try await startStalledDownload("/big.bin", dest: dest)
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty, "resume data from a server with ranges and an ETag")
        try await waitForState(t, "paused")
        var info = try await t.info()
        XCTAssertEqual(info.state, "paused")
        XCTAssertTrue(info.resumable)
        XCTAssertEqual(fileSize(dest + ".part"), cut, "the .part file keeps its bytes")
        XCTAssertFalse(exists(dest), "the final name never holds a partial file")
        XCTAssertEqual(Array((FileManager.default.contents(atPath: dest + ".part") ?? Data()).prefix(cut)), Array(body.prefix(cut)))

        let requestsBefore = server.requests(for: "/big.bin").count
        try await t.resume()
        info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        XCTAssertFalse(exists(dest + ".part"))
        XCTAssertEqual(info.bytesTransferred, Int64(size))

        let later = server.requests(for: "/big.bin").dropFirst(requestsBefore)
        XCTAssertEqual(later.count, 1, "one request after Resume")
        XCTAssertEqual(later.first?.header("Range"), "bytes=\(cut)-")
        XCTAssertEqual(later.first?.header("If-Range"), "\"v1\"")
        let resumed = signals.signals(path: t.path, member: "ResumedAtOffset")
        XCTAssertEqual(resumed.count, 1)
        XCTAssertEqual(resumed.first?.args[0].int64, Int64(cut))
        XCTAssertEqual(resumed.first?.args[1].int64, Int64(size))
        // ResumedAtOffset comes before the Progress signals of the resumed attempt and before Finished.
        let members = signals.signals(path: t.path).filter { $0.interface == BusClient.transferInterface }.map(\.member)
        XCTAssertEqual(members.suffix(2), ["Finished", "Completed"], "\(members)")
        let resumedAt = members.firstIndex(of: "ResumedAtOffset") ?? -1
        XCTAssertLessThan(resumedAt, members.firstIndex(of: "Finished") ?? -1)
        XCTAssertEqual(members.filter { $0 == "Completed" }.count, 1, "one Completed in all: \(members)")
    }

    /// The file changed on the server while paused: the download starts over and ends
    /// with the new body.
    func testResumeAfterETagChangeRestartsWithNewBody() async throws {
        let dest = work + "/changing.bin"
        let (t, _) = try await startStalledDownload("/changing.bin", dest: dest)
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty)
        let newBody = serve("/changing.bin", size: size - 1000, seed: 99, etag: "\"v2\"")
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: newBody)
        XCTAssertEqual(info.bytesTransferred, Int64(newBody.count))
        XCTAssertEqual(info.bytesExpected, Int64(newBody.count))
        let last = server.requests(for: "/changing.bin").last
        XCTAssertEqual(last?.header("If-Range"), "\"v1\"", "the resumed request carried the old validator")
        XCTAssertEqual(signals.signals(path: t.path, member: "ResumedAtOffset").count, 0, "nothing was resumed")
    }

    /// No range support: Pause gives empty resume data and Resume starts over, still
    /// ending with a correct file.
    func testPauseWithoutRangeSupportStartsOver() async throws {
        let dest = work + "/norange.bin"
        let (t, body) = try await startStalledDownload("/norange.bin", dest: dest, ranges: false)
        let data = try await t.pause()
        XCTAssertEqual(data, [], "no resume data when the server cannot resume")
        try await waitForState(t, "paused")
        let paused = try await t.info()
        XCTAssertFalse(paused.resumable)
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        XCTAssertFalse(exists(dest + ".part"))
    }

    /// ResumeDownload makes a new transfer from resume data; it continues the file.
    func testResumeDownloadFromResumeDataInNewTransfer() async throws {
        let dest = work + "/rd.bin"
        let (t, body) = try await startStalledDownload("/rd.bin", dest: dest)
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty)
        let s = try await session()
        let requestsBefore = server.requests(for: "/rd.bin").count
        let t2 = try await s.resumeDownload(data)
        XCTAssertNotEqual(t2.path, t.path, "a new transfer")
        let info = try await finish(t2)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, dest)
        XCTAssertEqual(info.url, server.url("/rd.bin"))
        assertFile(dest, equals: body)
        let later = server.requests(for: "/rd.bin").dropFirst(requestsBefore)
        XCTAssertEqual(later.first?.header("Range"), "bytes=\(cut)-")
        XCTAssertEqual(signals.signals(path: t2.path, member: "ResumedAtOffset").first?.args[0].int64, Int64(cut))
    }

    /// Any client may call Pause on any transfer, so the resume data must not show what
    /// the URL's `user:password@` holds: it is sealed, readable only by ferryd. It still
    /// works after ferryd restarts (the key is kept), and the credentials reach the server.
    func testResumeDataHidesTheURLAndOutlivesARestart() async throws {
        let dest = work + "/private.bin"
        let password = "pw-\(UUID().uuidString)"
        let body = serve("/private.bin", size: stalledSize)
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: "/private.bin")
        let port = URL(string: server.url("/"))!.port!
        let s = try await session()
        let t = try await s.download("http://ruser:\(password)@127.0.0.1:\(port)/private.bin",
                                     options: ["destination": .string(dest)])
        try await waitForState(t, "running")
        try await waitForFileSize(dest + ".part", atLeast: stalledCut)
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty, "resume data from a server with ranges and an ETag")
        let text = String(decoding: data, as: UTF8.self)
        for visible in [password, "ruser", "private.bin", "127.0.0.1", dest] {
            XCTAssertFalse(text.contains(visible), "the resume data shows '\(visible)'")
        }
        XCTAssertFalse(data.starts(with: Array("FRD1".utf8)), "not the readable format of Ferry 0.1")

        try await stopFerryd()
        try await startFerryd()
        let requestsBefore = server.requests(for: "/private.bin").count
        let t2 = try await session("com.example.After").resumeDownload(data)
        let info = try await finish(t2)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        let later = server.requests(for: "/private.bin").dropFirst(requestsBefore)
        XCTAssertEqual(later.first?.header("Range"), "bytes=\(cut)-", "it continued the partial file")
        XCTAssertEqual(later.first?.header("Authorization"), "Basic " + Data("ruser:\(password)".utf8).base64EncodedString(),
                       "the URL's credentials still went to the server")
    }

    /// Resume data whose original transfer has failed since (a dead link) takes the
    /// partial file over: the old transfer becomes cancelled, the daemon stays up.
    func testResumeDownloadTakesOverFromAFailedTransfer() async throws {
        let dest = work + "/takeover.bin"
        let (t, body) = try await startStalledDownload("/takeover.bin", dest: dest)
        let data = try await t.pause()
        XCTAssertFalse(data.isEmpty)
        try await resumeIntoA404(t, at: "/gone.bin")

        let t2 = try await session().resumeDownload(data)
        let info = try await finish(t2)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        let old = try await t.info()
        XCTAssertEqual(old.state, "cancelled", "the failed transfer gave its partial file up")
        let alive = try await client.bus.nameHasOwner(BusClient.busName)
        XCTAssertTrue(alive, "ferryd is still running")
    }

    /// A failed transfer can be cancelled: its partial file goes.
    func testCancelOnFailedTransferDeletesItsPartialFile() async throws {
        let dest = work + "/dead.bin"
        let (t, _) = try await startStalledDownload("/dead.bin", dest: dest)
        _ = try await t.pause()
        try await resumeIntoA404(t, at: "/dead-link.bin")
        XCTAssertTrue(exists(dest + ".part"), "a failed transfer keeps its partial file")
        try await t.cancel()
        try await waitForState(t, "cancelled")
        XCTAssertFalse(exists(dest + ".part"))
    }

    /// Damaged resume data is refused with InvalidResumeData, and nothing is created.
    func testCorruptResumeDataIsRefused() async throws {
        let dest = work + "/bad.bin"
        let (t, _) = try await startStalledDownload("/bad.bin", dest: dest)
        let data = try await t.pause()
        let s = try await session()
        let before = try await client.listTransfers().map(\.path)
        var flipped = data
        for i in stride(from: 0, to: flipped.count, by: 7) { flipped[i] ^= 0x5A }
        for bad in [[UInt8](), [1, 2, 3], Array("{\"url\":\"http://x/\"}".utf8), flipped, Array(data.prefix(data.count / 2))] {
            await assertBusError("org.ferry.Ferry1.Error.InvalidResumeData", "ResumeDownload(\(bad.count) bytes)") {
                try await s.resumeDownload(bad)
            }
        }
        let after = try await client.listTransfers().map(\.path)
        XCTAssertEqual(after, before, "refused calls create nothing")
        let state = try await t.info().state
        XCTAssertEqual(state, "paused", "the paused transfer is untouched")
        XCTAssertEqual(fileSize(dest + ".part"), cut)
    }

    /// Cancel stops for good: the .part file goes, the state is cancelled, Completed
    /// carries Cancelled, and a `cancelled` event waits.
    func testCancelDeletesPartialFile() async throws {
        let dest = work + "/cancel.bin"
        let (t, _) = try await startStalledDownload("/cancel.bin", dest: dest)
        XCTAssertTrue(exists(dest + ".part"))
        try await t.cancel()
        let (serial, errorName, _) = try await signals.completed(t.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.Cancelled")
        let info = try await t.info()
        XCTAssertEqual(info.state, "cancelled")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Cancelled")
        XCTAssertFalse(exists(dest + ".part"), "the partial file is deleted")
        XCTAssertFalse(exists(dest))
        XCTAssertEqual(partFiles(in: work), [])
        let s = try await session()
        let event = try await s.pendingEvents().first { $0.serial == serial }
        XCTAssertEqual(event?.kind, "cancelled")
        XCTAssertEqual(event?.transferPath, t.path)
        XCTAssertEqual(event?.details["error-name"]?.string, "org.ferry.Ferry1.Error.Cancelled")
        XCTAssertEqual(signals.signals(path: t.path, member: "Finished").count, 0)
    }

    /// Remove forgets a finished transfer (its object goes, the file stays); on a
    /// running one it is refused with InvalidState.
    func testRemove() async throws {
        let dest = work + "/keep.bin"
        let body = serve("/keep.bin", size: 4096)
        let s = try await session()
        let done = try await s.download(server.url("/keep.bin"), options: ["destination": .string(dest)])
        try await finish(done)
        let (running, _) = try await startStalledDownload("/run.bin", dest: work + "/run.bin")

        await assertBusError("org.ferry.Ferry1.Error.InvalidState", "Remove on a running transfer") { try await running.remove() }
        let runningState = try await running.info().state
        XCTAssertEqual(runningState, "running")

        try await done.remove()
        assertFile(dest, equals: body)
        let listed = try await client.listTransfers().map(\.path)
        XCTAssertFalse(listed.contains(done.path))
        XCTAssertTrue(listed.contains(running.path))
        await assertBusError("org.ferry.Ferry1.Error.NoSuchTransfer", "Get on a removed transfer") { try await done.info() }
        await assertBusError("org.ferry.Ferry1.Error.NoSuchTransfer", "Pause on a removed transfer") { try await done.pause() }
    }

    /// SetUrl points a paused download at a new URL serving the same file; it keeps its bytes.
    func testSetUrlOnPausedTransferKeepsBytes() async throws {
        let dest = work + "/moved.bin"
        let (t, body) = try await startStalledDownload("/old.bin", dest: dest)
        _ = try await t.pause()
        server.add(path: "/new.bin", body: body, etag: "\"v1\"")
        try await t.setURL(server.url("/new.bin"))
        let url = try await t.info().url
        XCTAssertEqual(url, server.url("/new.bin"))
        try await t.resume()
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
        XCTAssertEqual(server.requests(for: "/new.bin").first?.header("Range"), "bytes=\(cut)-")
    }

    /// Points the paused `t` at `path`, which answers 404, resumes it and waits until
    /// it has failed.
    private func resumeIntoA404(_ t: FerryTransfer, at path: String) async throws {
        server.add(path: path, body: [1])
        server.set(.status(404), on: path)
        try await t.setURL(server.url(path))
        let mark = signals.mark
        try await t.resume()
        try await waitForState(t, ["failed"], since: mark)
    }
}
