import XCTest
@testable import FerryCore

/// Dedupe (contract v1.2): downloads of the same fetch by one caller are fetched once;
/// each follower mirrors its leader and gets its own copy and its own events.
final class DedupeTests: XCTestCase {
    let url = "https://example.com/file.bin"

    /// A download with dedupe on (the harness turns it off by default).
    func dedupe(_ h: CoreHarness, _ s: SessionID, _ name: String, url: String? = nil,
                _ configure: (inout DownloadOptions) -> Void = { _ in }) throws -> TransferID {
        try h.download(s, url ?? self.url) {
            $0.dedupe = true
            $0.destination = h.downloads + "/" + name
            configure(&$0)
        }
    }

    func testOneFetchGivesEveryDownloadItsOwnVerifiedCopyAndEvents() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let body = Array("the same bytes for everyone".utf8)
        let a = try dedupe(h, s, "a.bin") { $0.sha256 = CoreHarness.sha256Hex(body) }
        let b = try dedupe(h, s, "b.bin") { $0.sha256 = CoreHarness.sha256Hex(body) }
        let c = try dedupe(h, s, "c.bin") { $0.sha256 = CoreHarness.sha256Hex(body).uppercased() }
        XCTAssertEqual(h.engine.startedIDs, [a], "one fetch for three downloads")
        XCTAssertEqual(h.state(b), .running, "a follower shows its leader's state")
        XCTAssertEqual(h.state(c), .running)

        h.answerAndWrite(a, Array(body.prefix(10)), total: Int64(body.count))
        XCTAssertEqual(h.snapshot(b)?.bytesTransferred, 10, "progress mirrored")
        XCTAssertEqual(h.snapshot(c)?.bytesExpected, Int64(body.count))
        XCTAssertTrue(h.observer.events.contains(.progress(b, written: 10, total: 10, expected: Int64(body.count))))

        h.writePart(a, body)
        h.send(.completed(a, .succeeded(bytesOnDisk: Int64(body.count), sha256: CoreHarness.sha256Hex(body))))
        for (id, name) in [(a, "a.bin"), (b, "b.bin"), (c, "c.bin")] {
            let snap = try XCTUnwrap(h.snapshot(id))
            XCTAssertEqual(snap.state, .completed, "\(id): \(snap.errorMessage)")
            XCTAssertEqual(snap.destination, h.downloads + "/" + name)
            XCTAssertEqual(snap.sha256, CoreHarness.sha256Hex(body))
            XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/" + name), Data(body), name)
            XCTAssertFalse(h.exists(h.downloads + "/" + name + ".part"))
            XCTAssertTrue(h.observer.events.contains(.finished(id, location: h.downloads + "/" + name)))
        }
        XCTAssertEqual(h.observer.completions.map(\.0), [a, b, c], "each its own Completed, the leader's first")
        let events = try h.sync { try $0.pendingEvents(session: s) }
        XCTAssertEqual(events.map(\.transfer), [a, b, c])
        XCTAssertEqual(Set(events.map(\.kind)), [.finished])
        XCTAssertEqual(h.engine.startedIDs, [a], "still one fetch")
    }

    func testDedupeFalseAndDifferentFetchesAreFetchedOnTheirOwn() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let off = try dedupe(h, s, "off.bin") { $0.dedupe = false }
        let otherHeader = try dedupe(h, s, "h.bin") { $0.headers = ["Accept-Language": "fr"] }
        let otherSum = try dedupe(h, s, "sum.bin") { $0.sha256 = String(repeating: "ab", count: 32) }
        let otherURL = try dedupe(h, s, "u.bin", url: "https://example.com/other.bin")
        let same = try dedupe(h, s, "same.bin") { $0.priority = 1; $0.description = "storage-only options differ" }
        XCTAssertEqual(h.engine.startedIDs, [a, off, otherHeader, otherSum, otherURL])
        XCTAssertEqual(h.state(same), .running)
    }

    func testSessionsThatKeepCookiesAreNotMergedThoseWithoutAre() throws {
        let h = CoreHarness()
        let one = try h.openSession("one")
        let two = try h.openSession("two")
        let a = try dedupe(h, one, "a.bin")
        let b = try dedupe(h, two, "b.bin")
        XCTAssertEqual(h.engine.startedIDs, [a, b], "each session's own cookie jar")
        let three = try h.openSession("three") { $0.cookies = false }
        let four = try h.openSession("four") { $0.cookies = false }
        let c = try dedupe(h, three, "c.bin")
        let d = try dedupe(h, four, "d.bin")
        XCTAssertEqual(h.engine.startedIDs, [a, b, c], "same caller, no cookies: one fetch")
        h.succeed(c, body: Array("x".utf8))
        XCTAssertEqual(h.state(d), .completed)
        XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/d.bin"), Data("x".utf8))
    }

    func testFollowersTakeNoPlaceUnderTheLimits() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        try h.sync { try $0.setMaxConcurrentTransfers(2) }
        let a = try dedupe(h, s, "a.bin")
        let followers = try (0..<5).map { try dedupe(h, s, "f\($0).bin") }
        let other = try dedupe(h, s, "o.bin", url: "https://example.com/other.bin")
        XCTAssertEqual(h.engine.startedIDs, [a, other], "five followers hold none of the two places")
        XCTAssertEqual(followers.map { h.state($0) }, Array(repeating: .running, count: 5))
    }

    func testLeaderFailingForTheFetchFailsFollowersWithTheSameError() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let b = try dedupe(h, s, "b.bin")
        h.fail(a, .http(status: 404, "the server answered 404 Not Found"))
        let snap = try XCTUnwrap(h.snapshot(b))
        XCTAssertEqual(snap.state, .failed)
        XCTAssertEqual(snap.errorName, "org.ferry.Ferry1.Error.Http")
        XCTAssertEqual(snap.httpStatus, 404)
        XCTAssertEqual(h.observer.completions.map(\.0), [a, b])
        XCTAssertEqual(h.engine.startedIDs, [a], "not fetched again only to fail the same way")
    }

    func testLeaderCancelledHandsTheFetchToTheOldestFollower() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let b = try dedupe(h, s, "b.bin")
        let c = try dedupe(h, s, "c.bin")
        try h.sync { try $0.cancel(a) }
        XCTAssertEqual(h.state(a), .cancelled)
        XCTAssertEqual(h.engine.startedIDs, [a, b], "b fetches now")
        XCTAssertEqual(h.state(c), .running, "c follows b")
        h.succeed(b, body: Array("taken over".utf8))
        XCTAssertEqual(h.state(c), .completed)
        XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/c.bin"), Data("taken over".utf8))
        XCTAssertFalse(h.exists(h.downloads + "/a.bin"))
    }

    func testFollowerCancelledOrPausedLeavesTheLeaderAlone() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let b = try dedupe(h, s, "b.bin")
        let c = try dedupe(h, s, "c.bin")
        try h.sync { try $0.cancel(b) }
        _ = try h.sync { try $0.pause(c) }
        XCTAssertEqual(h.engine.stopped, [], "the leader goes on")
        XCTAssertEqual(h.state(a), .running)
        XCTAssertEqual(h.state(c), .paused)
        h.succeed(a, body: Array("leader".utf8))
        XCTAssertEqual(h.state(b), .cancelled)
        XCTAssertEqual(h.state(c), .paused, "a paused follower stopped following")
        XCTAssertFalse(h.exists(h.downloads + "/b.bin"))
        XCTAssertFalse(h.exists(h.downloads + "/c.bin"))
        // Resumed, it fetches on its own.
        try h.sync { try $0.resume(c) }
        XCTAssertEqual(h.engine.startedIDs, [a, c])
    }

    func testLeaderPausedHandsTheFetchOverAndResumesOnItsOwn() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let b = try dedupe(h, s, "b.bin")
        XCTAssertEqual(h.engine.startedIDs, [a], "b follows a")
        _ = try h.sync { try $0.pause(a) }
        XCTAssertEqual(h.engine.stopped, [a])
        XCTAssertEqual(h.engine.startedIDs, [a, b], "b fetches now")
        XCTAssertEqual(h.state(a), .paused)
        h.succeed(b, body: Array("b".utf8))
        XCTAssertEqual(h.state(b), .completed)
        XCTAssertEqual(h.state(a), .paused, "a stays paused: its client paused it")
    }

    func testAfterAKillFollowersFetchOnTheirOwnAndNothingIsLost() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let b = try dedupe(h, s, "b.bin")
        XCTAssertEqual(h.engine.startedIDs, [a])
        let after = h.restarted(crashed: true)
        XCTAssertEqual(Set(after.engine.startedIDs), [a, b])
        after.succeed(b, body: Array("b".utf8))
        XCTAssertEqual(after.state(b), .completed)
        XCTAssertEqual(FileManager.default.contents(atPath: after.downloads + "/b.bin"), Data("b".utf8))
    }

    func testCopyFailureFailsOnlyThatFollower() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let folder = h.downloads + "/gone"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let b = try h.download(s, url) { $0.dedupe = true; $0.destination = folder + "/b.bin" }
        let c = try dedupe(h, s, "c.bin")
        try FileManager.default.removeItem(atPath: folder)
        h.succeed(a, body: Array("x".utf8))
        XCTAssertEqual(h.state(a), .completed)
        XCTAssertEqual(h.snapshot(b)?.state, .failed)
        XCTAssertEqual(h.snapshot(b)?.errorName, "org.ferry.Ferry1.Error.Disk")
        XCTAssertEqual(h.state(c), .completed)
    }

    func testFetchedCopyIsByteExact() throws {
        let dir = NSTemporaryDirectory() + "ferry-copy-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var bytes = [UInt8](repeating: 0, count: 3 << 20 | 17)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 9) }
        FileManager.default.createFile(atPath: dir + "/src", contents: Data(bytes))
        let n = try FetchedCopy.copy(from: dir + "/src", within: nil, to: dir + "/dst", within: nil)
        XCTAssertEqual(n, Int64(bytes.count))
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/dst"), Data(bytes))
        try FileManager.default.createSymbolicLink(atPath: dir + "/link", withDestinationPath: dir + "/src")
        XCTAssertThrowsError(try FetchedCopy.copy(from: dir + "/link", within: nil, to: dir + "/x", within: nil),
                             "a link is never followed")
    }

    /// Mirrors and pieces are part of the fetch: a download with pieces never follows
    /// one without (its pieces would not be checked), nor one with other mirrors.
    func testMirrorsAndPiecesAreNotMergedWithOtherFetches() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let pieces = try PieceList(length: 65536, hex: [String(repeating: "ab", count: 32)])
        let plain = try dedupe(h, s, "plain.bin")
        let checked = try dedupe(h, s, "checked.bin") { $0.pieces = pieces }
        let mirrored = try dedupe(h, s, "mirrored.bin") { $0.pieces = pieces; $0.mirrors = ["https://mirror.example.org/file.bin"] }
        let same = try dedupe(h, s, "same.bin") { $0.pieces = pieces; $0.mirrors = ["https://mirror.example.org/file.bin"] }
        XCTAssertEqual(h.engine.startedIDs, [plain, checked, mirrored], "three fetches; the fourth follows the third")
        XCTAssertEqual(h.state(same), .running)
    }

    // MARK: - Copies made off the core's queue

    /// A file of `size` bytes, not all alike.
    func body(_ size: Int) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
    }

    /// The leader `a` completes with `body` while the copier holds the followers' copies:
    /// the completion is posted without waiting for the core (a core busy copying would
    /// never let a `queue.sync` return), then the test waits until the copies reach
    /// the copier.
    func completeLeaderWhileCopiesAreHeld(_ h: CoreHarness, _ copier: HeldCopier, _ a: TransferID, _ body: [UInt8]) {
        h.send(.response(a, EngineResponse(status: 200, etag: "\"v1\"", expectedTotal: Int64(body.count),
                                           acceptsRanges: true, effectiveURL: url)))
        h.writePart(a, body)
        h.engine.emit(.completed(a, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil)))
        XCTAssertTrue(copier.waitUntilHeld(), "the followers' copies reached the copier")
    }

    /// A leader `a.bin` and followers of it (`names`) in one session, the leader
    /// completed with `body` while the copier holds the followers' copies.
    func leaderCompletedWhileCopiesAreHeld(_ body: [UInt8], followers names: [String] = ["b.bin"]) throws
        -> (h: CoreHarness, copier: HeldCopier, s: SessionID, a: TransferID, followers: [TransferID]) {
        let copier = HeldCopier()
        let h = CoreHarness(copier: copier)
        let s = try h.openSession()
        let a = try dedupe(h, s, "a.bin")
        let followers = try names.map { try dedupe(h, s, $0) }
        completeLeaderWhileCopiesAreHeld(h, copier, a, body)
        return (h, copier, s, a, followers)
    }

    /// Lets the copier make the held copies and waits until the core has taken them.
    func releaseTheCopies(_ h: CoreHarness, _ copier: HeldCopier) {
        copier.release()
        copier.waitForAll()
        h.queue.sync {}
    }

    /// Runs `body` on the core's queue and gives it 10 s to be answered. Not answered
    /// (the core is stuck in a copy): false, after releasing the copier so that the
    /// core can go on and the call be answered late.
    func answered(_ h: CoreHarness, _ copier: HeldCopier, _ body: @escaping (TransferCoordinator) throws -> Void) -> Result<Void, Error>? {
        let done = DispatchSemaphore(value: 0)
        let reply = Reply<Result<Void, Error>>()
        nonisolated(unsafe) let call = { try body(h.core) } // runs once, on the core's queue
        h.queue.async {
            reply.value = Result { try call() }
            done.signal()
        }
        guard done.wait(timeout: .now() + 10) == .success else {
            copier.release()
            done.wait()
            return nil
        }
        return reply.value
    }

    func testTheCoreAnswersWhileAFollowersCopyIsMade() throws {
        let bytes = body(3 << 20 | 5)
        let (h, copier, s, a, followers) = try leaderCompletedWhileCopiesAreHeld(bytes)
        let b = followers[0]

        let other = Reply<TransferID>()
        let reply = answered(h, copier) { core in
            var options = DownloadOptions()
            options.destination = h.downloads + "/other.bin"
            other.value = try core.download(session: s, url: "https://example.com/other.bin", options: options)
        }
        XCTAssertNotNil(reply, "a Download is answered while the copy is made")
        XCTAssertNoThrow(try reply?.get())
        let started = h.engine.startedIDs
        XCTAssertTrue(other.value.map { started.contains($0) } ?? false, "and its fetch starts meanwhile")
        XCTAssertEqual(h.state(a), .completed)
        XCTAssertEqual(h.state(b), .running, "the follower runs while its copy is made")
        XCTAssertEqual(h.snapshot(b)?.bytesTransferred, Int64(bytes.count))
        XCTAssertFalse(h.exists(h.downloads + "/b.bin"), "nothing at its name before the copy is whole")

        releaseTheCopies(h, copier)
        let snap = try XCTUnwrap(h.snapshot(b))
        XCTAssertEqual(snap.state, .completed, snap.errorMessage)
        XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/b.bin"), Data(bytes))
        XCTAssertFalse(h.exists(h.downloads + "/b.bin.part"))
        XCTAssertTrue(h.observer.events.contains(.finished(b, location: h.downloads + "/b.bin")))
        XCTAssertEqual(h.observer.completions.map(\.0), [a, b])
    }

    func testAFollowerCancelledDuringItsCopyEndsCancelledWithNoFile() throws {
        let bytes = body(1 << 20)
        let (h, copier, _, _, followers) = try leaderCompletedWhileCopiesAreHeld(bytes, followers: ["b.bin", "c.bin"])
        let (b, c) = (followers[0], followers[1])

        let reply = answered(h, copier) { try $0.cancel(b) }
        XCTAssertNotNil(reply, "Cancel is answered while the copy is made")
        XCTAssertNoThrow(try reply?.get())
        XCTAssertEqual(h.state(b), .cancelled)

        // The copier finishes b's copy all the same (as one that was done when the
        // cancel came): the core must not put it in place.
        releaseTheCopies(h, copier)
        XCTAssertEqual(h.state(b), .cancelled)
        XCTAssertFalse(h.exists(h.downloads + "/b.bin"), "a cancelled follower's copy never takes its name")
        XCTAssertFalse(h.exists(h.downloads + "/b.bin.part"), "and its .part is removed")
        XCTAssertEqual(h.observer.completions.filter { $0.0 == b }.count, 1, "one Completed: cancelled")
        XCTAssertEqual(h.state(c), .completed, "the other follower has its copy")
        XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/c.bin"), Data(bytes))
    }

    func testAFollowerPausedDuringItsCopyFetchesOnItsOwnOnlyOnceTheCopyIsBack() throws {
        let (h, copier, _, a, followers) = try leaderCompletedWhileCopiesAreHeld(body(4096))
        let b = followers[0]

        XCTAssertNotNil(answered(h, copier) { core in
            _ = try core.pause(b)
            try core.resume(b)
        })
        XCTAssertEqual(h.state(b), .queued)
        XCTAssertEqual(h.engine.startedIDs, [a], "not started while its old copy may still write its .part")

        releaseTheCopies(h, copier)
        XCTAssertEqual(h.engine.startedIDs, [a, b], "then it fetches on its own")
        XCTAssertFalse(h.exists(h.downloads + "/b.bin"), "the copy never took its name")
        h.succeed(b, body: Array("b's own".utf8))
        XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/b.bin"), Data("b's own".utf8))
    }

    func testASessionClosedDuringTheCopiesLeavesNoFile() throws {
        let copier = HeldCopier()
        let h = CoreHarness(copier: copier)
        let leaderSession = try h.openSession("leader") { $0.cookies = false }
        let followers = try h.openSession("followers") { $0.cookies = false }
        let a = try dedupe(h, leaderSession, "a.bin")
        let b = try dedupe(h, followers, "b.bin")
        completeLeaderWhileCopiesAreHeld(h, copier, a, body(1 << 20))

        XCTAssertNotNil(answered(h, copier) { try $0.closeSession(followers, cancelTransfers: true) })
        XCTAssertNil(h.snapshot(b), "the follower left with its session")
        releaseTheCopies(h, copier)
        XCTAssertFalse(h.exists(h.downloads + "/b.bin"))
        XCTAssertFalse(h.exists(h.downloads + "/b.bin.part"), "what the copy wrote is removed when it ends")
    }

    func testACopyNeedsNoNetwork() throws {
        let bytes = body(4096)
        let (h, copier, _, _, followers) = try leaderCompletedWhileCopiesAreHeld(bytes)
        let b = followers[0]
        XCTAssertNotNil(answered(h, copier) { $0.setNetworkState(metered: false, online: false) })
        XCTAssertEqual(h.state(b), .running, "going offline does not stop a copy")
        releaseTheCopies(h, copier)
        XCTAssertEqual(h.state(b), .completed)
        XCTAssertEqual(FileManager.default.contents(atPath: h.downloads + "/b.bin"), Data(bytes))
    }

    func testFerrydStoppingDuringTheCopiesLeavesNothingAtTheNameAndTheFollowerFetchesAfterwards() throws {
        let (h, _, _, a, followers) = try leaderCompletedWhileCopiesAreHeld(body(1 << 20))
        let b = followers[0]
        // The copier is told to stop and waited for; what it hands back then is not taken.
        let after = h.restarted()
        XCTAssertEqual(after.state(a), .completed)
        XCTAssertFalse(after.exists(after.downloads + "/b.bin"), "the copy was not renamed into place")
        XCTAssertEqual(after.engine.startedIDs, [b], "the follower is a download of its own again")
        after.succeed(b, body: Array("b's own".utf8))
        XCTAssertEqual(FileManager.default.contents(atPath: after.downloads + "/b.bin"), Data("b's own".utf8))
    }
}

/// A copier that holds every batch until `release`, then makes the copies for real, off
/// the core's queue, and whole even for a follower cancelled meanwhile (as a copy that
/// was just done when the cancel came would be): only the core keeps it out of place.
final class HeldCopier: FetchedCopier, Sendable {
    private let gate = DispatchSemaphore(value: 0)
    private let arrived = DispatchSemaphore(value: 0)
    private let holder = DispatchQueue(label: "ferry.test.held-copies")
    private let group = DispatchGroup()

    func copy(_ jobs: [FetchedCopyJob], done: @escaping @Sendable ([FetchedCopyOutcome]) -> Void) {
        group.enter()
        arrived.signal()
        holder.async { [self] in
            gate.wait()
            gate.signal() // once released, it stays open
            let whole = jobs.map { FetchedCopyJob(source: $0.source, target: $0.target, targetArea: $0.targetArea) }
            done(FetchedCopy.run(whole) { _ in false })
            group.leave()
        }
    }

    func shutdown() {
        release()
        group.wait()
    }

    /// Waits (10 s at most) for a batch to reach the copier.
    func waitUntilHeld() -> Bool { arrived.wait(timeout: .now() + 10) == .success }

    func release() { gate.signal() }

    /// Waits until every batch has reported back (its results queued on the core's queue).
    func waitForAll() { group.wait() }
}

/// What a call on the core's queue hands back to the test (`answered`).
final class Reply<T>: @unchecked Sendable {
    // Written on the core's queue before a semaphore is signalled, read by the test after.
    var value: T?
}
