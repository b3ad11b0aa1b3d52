import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

final class DownloadTests: FerryTestCase {
    /// The whole story of one download: right bytes in the right place, no partial
    /// file, final properties, signals in the contract's order, a pending event.
    func testDownloadEndToEnd() async throws {
        let body = serve("/file.bin", size: 300_000)
        let s = try await session()
        let dest = work + "/out.bin"
        let before = UInt64(Date().timeIntervalSince1970 * 1_000_000)
        let t = try await s.download(server.url("/file.bin"), options: ["destination": .string(dest), "description": .string("a test file")])
        XCTAssertNotNil(t.path.range(of: #"^/org/ferry/Ferry1/transfer/[0-9]+$"#, options: .regularExpression), t.path)
        let (serial, errorName, errorMessage) = try await signals.completed(t.path)
        XCTAssertEqual(errorName, "", errorMessage)

        assertFile(dest, equals: body)
        XCTAssertEqual(partFiles(in: work), [], "no .part file is left")
        let info = try await t.info()
        XCTAssertEqual(info.state, "completed")
        XCTAssertEqual(info.kind, "download")
        XCTAssertEqual(info.url, server.url("/file.bin"))
        XCTAssertEqual(info.description, "a test file")
        XCTAssertEqual(info.destination, dest)
        XCTAssertEqual(info.bytesTransferred, Int64(body.count))
        XCTAssertEqual(info.bytesExpected, Int64(body.count))
        XCTAssertEqual(info.errorName, "")
        XCTAssertEqual(info.httpStatus, 200)
        // Hashing costs as much CPU as the download itself, so ferryd hashes only
        // when asked to verify (the sha256 option, see FailureTests.testSha256Option).
        XCTAssertEqual(info.sha256, "", "Sha256 stays empty when no checksum was asked for")
        XCTAssertGreaterThanOrEqual(info.created, before - 1_000_000)
        XCTAssertGreaterThanOrEqual(info.started, info.created)
        XCTAssertGreaterThanOrEqual(info.completed, info.started)
        let sessionProperty = try await getProperty(t.path, BusClient.transferInterface, "Session")
        XCTAssertEqual(sessionProperty?.string, s.path)

        // Signals of this transfer: Progress…, Finished(location), Completed last.
        let mine = signals.signals(path: t.path).filter { $0.interface == BusClient.transferInterface }
        let members = mine.map(\.member)
        XCTAssertEqual(members.last, "Completed", "\(members)")
        XCTAssertEqual(members.dropLast().last, "Finished", "\(members)")
        XCTAssertTrue(members.dropLast(2).allSatisfy { $0 == "Progress" }, "\(members)")
        XCTAssertGreaterThanOrEqual(members.filter { $0 == "Progress" }.count, 1)
        let lastProgress = mine.last { $0.member == "Progress" }
        XCTAssertEqual(lastProgress?.args[1].int64, Int64(body.count), "the last Progress has the final count")
        XCTAssertEqual(lastProgress?.args[2].int64, Int64(body.count))
        XCTAssertEqual(mine.first { $0.member == "Finished" }?.args.first?.string, dest)
        // Totals never go down.
        let totals = mine.filter { $0.member == "Progress" }.compactMap { $0.args[1].int64 }
        XCTAssertEqual(totals, totals.sorted(), "Progress totals are monotonic")
        // A client that reads State when Completed arrives sees the final state.
        let all = signals.signals(path: t.path)
        let completedIndex = all.lastIndex { $0.member == "Completed" }!
        let stateIndex = all.lastIndex { $0.member == "PropertiesChanged" && $0.changed["State"]?.string == "completed" }
        XCTAssertNotNil(stateIndex, "State=completed is announced")
        if let stateIndex { XCTAssertLessThan(stateIndex, completedIndex, "State=completed comes before Completed") }

        // The completion waits in PendingEvents until acknowledged.
        let events = try await s.pendingEvents()
        let event = events.first { $0.serial == serial }
        XCTAssertNotNil(event, "PendingEvents: \(events)")
        XCTAssertEqual(event?.transferPath, t.path)
        XCTAssertEqual(event?.kind, "finished")
        XCTAssertEqual(event?.details["location"]?.string, dest)
        XCTAssertEqual(event?.details["bytes"]?.int64, Int64(body.count))
        try await s.acknowledgeEvents(upTo: serial)
        let remaining = try await s.pendingEvents()
        XCTAssertFalse(remaining.contains { $0.serial == serial }, "acknowledged events are gone")
    }

    /// A finished download carries `user.xdg.origin.url`, as browsers do (the test
    /// file system takes user xattrs; the test checks that first).
    func testFinishedFileCarriesOriginURL() async throws {
        let python = "/usr/bin/python3"
        let probe = work + "/probe"
        FileManager.default.createFile(atPath: probe, contents: Data())
        let check = try runTool(python, ["-c", "import os,sys; os.setxattr(sys.argv[1], 'user.probe', b'1')", probe], environment: environment())
        XCTAssertEqual(check.status, 0, "the test directory must take user xattrs: \(check.stderr)")

        serve("/origin.bin", size: 500)
        let s = try await session()
        let dest = work + "/origin.bin"
        let t = try await s.download(server.url("/origin.bin"), options: ["destination": .string(dest)])
        try await finish(t)
        XCTAssertEqual(try originURL(of: dest), server.url("/origin.bin"))
    }

    /// A host name typed in another script (here the server's address in full-width
    /// digits and ideographic full stops, as a Japanese keyboard gives them) is
    /// fetched by its IDNA form, as curl does in a UTF-8 terminal; `Url` keeps what
    /// the client gave. ferryd runs in the C locale, in which libcurl failed every
    /// such name as `Network` ("The URL is not valid"), retries and all.
    func testInternationalHostNameIsFetchedByItsASCIIForm() async throws {
        let body = serve("/intl.bin", size: 2000)
        let s = try await session("com.example.Test", ["retries": .uint32(0)])
        let typed = server.url("/intl.bin").replacingOccurrences(of: "127.0.0.1", with: "\u{FF11}\u{FF12}\u{FF17}\u{3002}\u{FF10}\u{3002}\u{FF10}\u{3002}\u{FF11}")
        XCTAssertNotEqual(typed, server.url("/intl.bin"))
        let dest = work + "/intl.bin"
        let t = try await s.download(typed, options: ["destination": .string(dest)])
        let info = try await finish(t)
        XCTAssertEqual(info.errorName, "", info.errorMessage)
        XCTAssertEqual(info.state, "completed")
        assertFile(dest, equals: body)
        XCTAssertEqual(info.url, typed, "Url is what the client gave")
        XCTAssertEqual(server.requests.last?.header("Host"), "127.0.0.1:\(server.port)", "the request names the host in ASCII")
    }

    /// A directory as destination: the name comes from the URL, and a second download
    /// of the same URL gets "name (1).ext" instead of replacing the first.
    func testDirectoryDestinationNamesFromURLWithoutClobbering() async throws {
        let body = serve("/files/report.pdf", size: 5000)
        let s = try await session()
        let t1 = try await s.download(server.url("/files/report.pdf"), options: ["destination": .string(work)])
        let i1 = try await finish(t1)
        XCTAssertEqual(i1.state, "completed", i1.errorMessage)
        XCTAssertEqual(i1.destination, work + "/report.pdf")
        let t2 = try await s.download(server.url("/files/report.pdf"), options: ["destination": .string(work)])
        let i2 = try await finish(t2)
        XCTAssertEqual(i2.state, "completed", i2.errorMessage)
        XCTAssertEqual(i2.destination, work + "/report (1).pdf")
        assertFile(work + "/report.pdf", equals: body)
        assertFile(work + "/report (1).pdf", equals: body)
        XCTAssertEqual(signals.signals(path: t2.path, member: "Finished").first?.args.first?.string, work + "/report (1).pdf")
    }

    /// The server's Content-Disposition filename names the file when the client gave a directory.
    func testContentDispositionNamesTheFile() async throws {
        let body = serve("/get", size: 2000, contentDisposition: "attachment; filename=\"notes.txt\"")
        let s = try await session()
        let t = try await s.download(server.url("/get?id=7"), options: ["destination": .string(work)])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, work + "/notes.txt")
        assertFile(work + "/notes.txt", equals: body)
        XCTAssertEqual(partFiles(in: work), [])
    }

    /// Without a destination the file goes to the XDG download directory of the user.
    func testNoDestinationUsesXDGDownloadDirectory() async throws {
        let body = serve("/plain.dat", size: 1234)
        let s = try await session()
        let t = try await s.download(server.url("/plain.dat"))
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, downloads + "/plain.dat")
        assertFile(downloads + "/plain.dat", equals: body)

        // A session directory takes precedence over the XDG one.
        let other = work + "/session-dir"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        let s2 = try await session("com.example.Dir", ["directory": .string(other)])
        let t2 = try await s2.download(server.url("/plain.dat"))
        let i2 = try await finish(t2)
        XCTAssertEqual(i2.destination, other + "/plain.dat")
        assertFile(other + "/plain.dat", equals: body)
    }

    /// A slow download gets a Progress signal at most every 250 ms, plus the final one.
    func testProgressSignalsAreCoalesced() async throws {
        let size = 1 << 20
        let body = serve("/slow.bin", size: size)
        server.set(.slow(bytesPerSecond: 512 * 1024), on: "/slow.bin")
        let (t, _, duration) = try await timedDownload("/slow.bin", in: session(), equals: body)

        let progress = signals.signals(path: t.path, member: "Progress")
        let limit = Int(duration / 0.25) + 2
        XCTAssertGreaterThanOrEqual(progress.count, 3, "a 2 s download reports progress along the way")
        XCTAssertLessThanOrEqual(progress.count, limit, "\(progress.count) Progress signals in \(duration) s")
        // 250 ms apart when sent (the final one may come sooner). They are timed here as
        // they arrive, after four queues and dbus-daemon, so one late signal makes one
        // short gap on a loaded machine: the typical gap is what is checked.
        let gaps = (1..<max(1, progress.count - 1)).map { progress[$0].time.timeIntervalSince(progress[$0 - 1].time) }.sorted()
        if !gaps.isEmpty {
            XCTAssertGreaterThanOrEqual(gaps[gaps.count / 2], 0.2, "the median gap between Progress signals: \(gaps)")
        }
        XCTAssertEqual(progress.last?.args[1].int64, Int64(size))
        // bytes_written is the delta since the previous signal; the deltas add up.
        let deltas = progress.compactMap { $0.args[0].int64 }.reduce(0, +)
        XCTAssertEqual(deltas, Int64(size), "the bytes_written deltas add up to the file size")
    }

    /// Transfers are listed oldest first, by the manager and by their session.
    func testListTransfersOldestFirst() async throws {
        serve("/a.bin", size: 10)
        let s1 = try await session("com.example.One")
        let s2 = try await session("com.example.Two")
        let a = try await s1.download(server.url("/a.bin"), options: ["start": .boolean(false), "destination": .string(work + "/1")])
        let b = try await s2.download(server.url("/a.bin"), options: ["start": .boolean(false), "destination": .string(work + "/2")])
        let c = try await s1.download(server.url("/a.bin"), options: ["start": .boolean(false), "destination": .string(work + "/3")])
        let all = try await client.listTransfers().map(\.path)
        XCTAssertEqual(all, [a.path, b.path, c.path])
        let l1 = try await s1.listTransfers().map(\.path)
        XCTAssertEqual(l1, [a.path, c.path])
        let l2 = try await s2.listTransfers().map(\.path)
        XCTAssertEqual(l2, [b.path])
        let state = try await a.info().state
        XCTAssertEqual(state, "paused", "start=false creates it paused")
        XCTAssertLessThan(a.id, b.id)
        XCTAssertLessThan(b.id, c.id)
    }
}
