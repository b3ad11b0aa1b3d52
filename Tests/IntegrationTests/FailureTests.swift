import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

final class FailureTests: FerryTestCase {
    /// A 404 fails the transfer with Http naming the status, and leaves no file.
    func testHttp404FailsWithHttpError() async throws {
        let s = try await session()
        let dest = work + "/missing.bin"
        let t = try await s.download(server.url("/missing.bin"), options: ["destination": .string(dest)])
        let (serial, errorName, errorMessage) = try await signals.completed(t.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertTrue(errorMessage.contains("404"), "the message names the status: \(errorMessage)")
        let info = try await t.info()
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertTrue(info.errorMessage.contains("404"), info.errorMessage)
        XCTAssertEqual(info.httpStatus, 404)
        XCTAssertFalse(exists(dest), "no file at the destination")
        XCTAssertEqual(fileSize(dest + ".part") ?? 0, 0, "the error page is not written to the partial file")
        XCTAssertEqual(signals.signals(path: t.path, member: "Finished").count, 0, "no Finished for a failure")

        let event = try await s.pendingEvents().first { $0.serial == serial }
        XCTAssertEqual(event?.kind, "failed")
        XCTAssertEqual(event?.details["error-name"]?.string, "org.ferry.Ferry1.Error.Http")
        XCTAssertEqual(event?.details["http-status"]?.uint32, 404)
        XCTAssertTrue(event?.details["error-message"]?.string?.contains("404") ?? false)

        // Removing the failed transfer leaves nothing behind.
        try await t.remove()
        XCTAssertFalse(exists(dest + ".part"), "Remove deletes a failed transfer's partial file")
        XCTAssertEqual(partFiles(in: work), [])
    }

    /// A download that failed without a partial file (a 404) leaves its name: the next
    /// download into the same path gets it, not `name (1).ext` (a script retrying
    /// `ferry get -o FILE` then finds FILE). Resumed later, the failed one takes a free
    /// name beside it and leaves the other's file alone. One that failed with bytes to
    /// resume from keeps its name (its `.part`).
    func testAFailedDownloadLeavesItsNameUnlessItHasBytesToResume() async throws {
        let s = try await session("com.example.Test", ["retries": .uint32(0)])
        let dest = work + "/later.bin"
        let first = try await s.download(server.url("/later.bin"), options: ["destination": .string(dest)])
        let failed = try await finish(first)
        XCTAssertEqual(failed.httpStatus, 404)
        XCTAssertEqual(failed.state, "failed")

        let body = serve("/later.bin", size: 3000)
        let again = try await finish(try await s.download(server.url("/later.bin"), options: ["destination": .string(dest)]))
        XCTAssertEqual(again.state, "completed", again.errorMessage)
        XCTAssertEqual(again.destination, dest, "the name the failed download had is free")
        assertFile(dest, equals: body)

        let resumed = try await resumeAndFinish(first)
        XCTAssertEqual(resumed.state, "completed", resumed.errorMessage)
        XCTAssertEqual(resumed.destination, work + "/later (1).bin", "resumed, it takes a free name")
        assertFile(work + "/later (1).bin", equals: body)
        assertFile(dest, equals: body)

        // Cut off after some bytes: the partial file stays, and so does the name.
        let big = serve("/cut.bin", size: 200_000, seed: 5)
        server.set(.dropAfter(bytes: 50_000), on: "/cut.bin")
        let cutDest = work + "/cut.bin"
        let cut = try await finish(try await s.download(server.url("/cut.bin"), options: ["destination": .string(cutDest)]))
        XCTAssertEqual(cut.state, "failed")
        XCTAssertGreaterThan(fileSize(cutDest + ".part") ?? 0, 0, "the bytes so far are kept for Resume")
        server.clearBehaviours(on: "/cut.bin")
        let other = try await finish(try await s.download(server.url("/cut.bin"), options: ["destination": .string(cutDest)]))
        XCTAssertEqual(other.state, "completed", other.errorMessage)
        XCTAssertEqual(other.destination, work + "/cut (1).bin", "the name of a download with bytes to resume stays its own")
        assertFile(work + "/cut (1).bin", equals: big)
    }

    /// A 500 is an Http failure too; Resume on a failed transfer tries again and can succeed.
    func testHttp500ThenResumeSucceeds() async throws {
        let body = serve("/flaky.bin", size: 8192)
        server.set(.status(500), on: "/flaky.bin")
        let s = try await session("com.example.Test", ["retries": .uint32(0)])
        let dest = work + "/flaky.bin"
        let t = try await s.download(server.url("/flaky.bin"), options: ["destination": .string(dest)])
        let (_, errorName, errorMessage) = try await signals.completed(t.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertTrue(errorMessage.contains("500"), errorMessage)
        let failed = try await t.info()
        XCTAssertEqual(failed.httpStatus, 500)

        server.clearBehaviours(on: "/flaky.bin")
        let info = try await resumeAndFinish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.errorName, "", "Resume clears the old error")
        assertFile(dest, equals: body)
    }

    /// The connection drops mid-body: with retries off the transfer fails with Network.
    /// Resume then finishes it, continuing from the bytes it has.
    func testConnectionDroppedMidBodyFailsWithNetwork() async throws {
        let body = serve("/drop.bin", size: 512 * 1024)
        server.set(.dropAfter(bytes: 100_000, times: 1), on: "/drop.bin")
        let s = try await session("com.example.Test", ["retries": .uint32(0)])
        let dest = work + "/drop.bin"
        let t = try await s.download(server.url("/drop.bin"), options: ["destination": .string(dest)])
        let (_, errorName, errorMessage) = try await signals.completed(t.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.Network", errorMessage)
        let info = try await t.info()
        XCTAssertEqual(info.state, "failed")
        XCTAssertFalse(exists(dest), "no final file after a failure")

        try await t.resume()
        try await signals.wait("the resumed download to complete") { s in
            s.contains { $0.path == t.path && $0.member == "Finished" }
        }
        try await signals.wait("its Completed") { s in s.filter { $0.path == t.path && $0.member == "Completed" }.count == 2 }
        assertFile(dest, equals: body)
    }

    /// With the default retries a dropped connection does not lose the download: it
    /// waits (reason `retry`), tries again with a validated range, and completes.
    func testDroppedConnectionIsRetriedFromWhereItStopped() async throws {
        let body = serve("/drop1.bin", size: 256 * 1024)
        server.set(.dropAfter(bytes: 50_000, times: 1), on: "/drop1.bin")
        let s = try await session()
        let dest = work + "/drop1.bin"
        let t = try await s.download(server.url("/drop1.bin"), options: ["destination": .string(dest)])
        let (_, errorName, errorMessage) = try await signals.completed(t.path, timeout: 30)
        XCTAssertEqual(errorName, "", errorMessage)
        assertFile(dest, equals: body)
        let info = try await t.info()
        XCTAssertEqual(info.attempts, 2, "one retry")
        XCTAssertTrue(signals.signals(path: t.path, member: "PropertiesChanged").contains {
            $0.changed["State"]?.string == "waiting" && $0.changed["WaitingReason"]?.string == "retry"
        }, "it waited with reason retry")
        XCTAssertEqual(signals.signals(path: t.path, member: "Completed").count, 1, "one Completed, at the very end")
        let requests = server.requests(for: "/drop1.bin")
        XCTAssertEqual(requests.count, 2)
        if requests.count == 2, let range = requests[1].header("Range") {
            XCTAssertTrue(range.hasPrefix("bytes="), range)
            XCTAssertEqual(requests[1].header("If-Range"), "\"v1\"")
        } else {
            XCTFail("the retry asked for the rest only (Range), got \(requests.map(\.headers))")
        }
    }

    /// 503s are retried; when the retries run out the transfer fails with the last error.
    func testRetriesForServerErrorsAndTheirLimit() async throws {
        let body = serve("/busy.bin", size: 10_000)
        server.set(.failFirst(2, status: 503), on: "/busy.bin")
        let s = try await session("com.example.Test", ["retries": .uint32(2)])
        let t = try await s.download(server.url("/busy.bin"), options: ["destination": .string(work + "/busy.bin")])
        let (_, e1, m1) = try await signals.completed(t.path)
        XCTAssertEqual(e1, "", m1)
        assertFile(work + "/busy.bin", equals: body)
        let attempts = try await t.info().attempts
        XCTAssertEqual(attempts, 3)

        serve("/down.bin", size: 10_000)
        server.set(.status(503), on: "/down.bin")
        let t2 = try await s.download(server.url("/down.bin"), options: ["destination": .string(work + "/down.bin")])
        let (_, e2, m2) = try await signals.completed(t2.path)
        XCTAssertEqual(e2, "org.ferry.Ferry1.Error.Http")
        XCTAssertTrue(m2.contains("503"), m2)
        let i2 = try await t2.info()
        XCTAssertEqual(i2.attempts, 3, "1 try + 2 retries")
        XCTAssertEqual(server.requests(for: "/down.bin").count, 3)

        // A 404 is permanent: no retry.
        let t3 = try await s.download(server.url("/nowhere"), options: ["destination": .string(work + "/nowhere")])
        try await signals.completed(t3.path)
        let i3 = try await t3.info()
        XCTAssertEqual(i3.attempts, 1)
    }

    /// Redirects to anything but http(s) are refused: nothing is read from ftp:// or file://.
    func testRedirectToOtherSchemesIsRefused() async throws {
        let secret = work + "/secret.txt"
        try "do not copy me".write(toFile: secret, atomically: true, encoding: .utf8)
        server.set(.redirect(to: "file://" + secret), on: "/to-file")
        server.set(.redirect(to: "ftp://127.0.0.1:\(server.port)/x"), on: "/to-ftp")
        let s = try await session()
        for (path, scheme) in [("/to-file", "file"), ("/to-ftp", "ftp")] {
            let dest = work + "/out-\(scheme)"
            let t = try await s.download(server.url(path), options: ["destination": .string(dest)])
            let (_, errorName, errorMessage) = try await signals.completed(t.path)
            XCTAssertTrue(errorName.hasPrefix("org.ferry.Ferry1.Error."), "\(scheme): \(errorName)")
            XCTAssertFalse(errorName.isEmpty, "a redirect to \(scheme):// must fail")
            XCTAssertTrue(errorMessage.lowercased().contains(scheme), "the message names the scheme: \(errorMessage)")
            let info = try await t.info()
            XCTAssertEqual(info.state, "failed")
            XCTAssertEqual(info.attempts, 1, "\(scheme): a refused redirect is final, not retried as a transient error")
            XCTAssertFalse(exists(dest), "\(scheme): nothing at the destination")
        }
    }

    /// An ordinary http redirect is followed; a loop ends in TooManyRedirects.
    func testRedirectsFollowedAndLoopsStopped() async throws {
        let body = serve("/target.bin", size: 3000)
        server.set(.redirect(to: server.url("/target.bin")), on: "/moved.bin")
        server.set(.redirect(to: "/loop"), on: "/loop")
        let s = try await session()
        let t = try await s.download(server.url("/moved.bin"), options: ["destination": .string(work + "/moved.bin")])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(work + "/moved.bin", equals: body)

        let loop = try await s.download(server.url("/loop"), options: ["destination": .string(work + "/loop.bin")])
        let (_, errorName, _) = try await signals.completed(loop.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.TooManyRedirects")
        XCTAssertFalse(exists(work + "/loop.bin"))
    }

    /// The sha256 option: a match completes (and Sha256 reports it), a mismatch fails
    /// with ChecksumMismatch and leaves no file.
    func testSha256Option() async throws {
        let body = serve("/sum.bin", size: 50_000)
        let s = try await session()
        let good = try await s.download(server.url("/sum.bin"), options: [
            "destination": .string(work + "/good.bin"), "sha256": .string(TestData.sha256Hex(body).uppercased()),
        ])
        let gi = try await finish(good)
        XCTAssertEqual(gi.state, "completed", gi.errorMessage)
        XCTAssertEqual(gi.sha256.lowercased(), TestData.sha256Hex(body))
        assertFile(work + "/good.bin", equals: body)

        let wrong = String(repeating: "ab", count: 32)
        let bad = try await s.download(server.url("/sum.bin"), options: [
            "destination": .string(work + "/bad.bin"), "sha256": .string(wrong),
        ])
        let (serial, errorName, errorMessage) = try await signals.completed(bad.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.ChecksumMismatch", errorMessage)
        let bi = try await bad.info()
        XCTAssertEqual(bi.state, "failed")
        XCTAssertFalse(exists(work + "/bad.bin"), "no final file for a checksum mismatch")
        XCTAssertEqual(signals.signals(path: bad.path, member: "Finished").count, 0)
        let event = try await s.pendingEvents().first { $0.serial == serial }
        XCTAssertEqual(event?.kind, "failed")
        XCTAssertEqual(event?.details["error-name"]?.string, "org.ferry.Ferry1.Error.ChecksumMismatch")
    }
}
