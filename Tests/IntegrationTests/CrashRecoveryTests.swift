import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// What a user's machine does to Ferry: the daemon is killed with SIGKILL in the
/// middle of a batch, again and again; the disk fills up.
final class CrashRecoveryTests: FerryTestCase {
    static let files = 8
    static let killCycles = 8

    /// Total bytes the given transfers have written, as the daemon reports it.
    func bytesWritten(_ transfers: [FerryTransfer]) async throws -> Int64 {
        var total: Int64 = 0
        for t in transfers { total += try await t.info().bytesTransferred }
        return total
    }

    /// Waits (bounded, polling: BytesTransferred has no change signal) until the
    /// batch has written at least `target` bytes, or everything has ended.
    func waitForBatch(_ transfers: [FerryTransfer], toReach target: Int64, timeout: TimeInterval = 30) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try await bytesWritten(transfers) >= target { return }
            var allFinal = true
            for t in transfers where !(try await t.info().isFinal) { allFinal = false }
            if allFinal { return }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        throw TimedOut(description: "the batch did not reach \(target) bytes within \(timeout) s")
    }

    /// After a restart, a transfer that was under way carries on and says where on the
    /// bus: its ResumedAtOffset reaches clients, because the restored transfers start
    /// only once ferryd owns its name again. (A clean stop: after a SIGKILL within a
    /// second of the response, the validator may not be stored yet, and the file is
    /// then rightly fetched again from 0.)
    func testRestoredTransferAnnouncesWhereItResumes() async throws {
        let dest = work + "/restored.bin"
        let (t, body) = try await startStalledDownload("/restored.bin", dest: dest)
        try await stopFerryd()
        try await startFerryd()
        try await signals.wait("ResumedAtOffset from the restored transfer", timeout: 10) { s in
            s.contains { $0.path == t.path && $0.member == "ResumedAtOffset" }
        }
        XCTAssertEqual(signals.signals(path: t.path, member: "ResumedAtOffset").last?.args[0].int64, Int64(stalledCut))
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(dest, equals: body)
    }

    /// Several SIGKILLs at random moments during a batch from a slow server: every
    /// file ends complete with the right SHA-256, no transfer is lost or duplicated,
    /// and each completion event is delivered exactly once. The batch includes a
    /// server without range support and a file whose ETag changes between attempts.
    func testBatchSurvivesRepeatedSIGKILL() async throws {
        var seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xffff_ffff
        if let fixed = ProcessInfo.processInfo.environment["FERRY_CRASH_SEED"], let v = UInt64(fixed) { seed = v }
        print("CrashRecoveryTests seed: \(seed) (set FERRY_CRASH_SEED to repeat)")
        var rng = SeededRandom(state: seed)

        let size = 384 * 1024
        var bodies: [String: [UInt8]] = [:]
        for k in 0..<Self.files {
            let path = "/batch/\(k).bin"
            bodies[path] = serve(path, size: size, seed: UInt64(k + 1), etag: "\"a\(k)\"", ranges: k != 1)
            server.set(.slow(bytesPerSecond: 160 * 1024), on: path)
        }

        let s = try await session("com.example.Crash")
        var transfers: [FerryTransfer] = []
        for k in 0..<Self.files {
            transfers.append(try await s.download(server.url("/batch/\(k).bin"),
                                                  options: ["destination": .string(work + "/\(k).bin")]))
        }
        let paths = transfers.map(\.path)

        // The first kill comes right after Download answered: acknowledged transfers
        // must be on disk already.
        try await killAndRestart()
        let afterFirstKill = try await client.listTransfers().map(\.path)
        XCTAssertEqual(afterFirstKill, paths, "no transfer lost or duplicated by an early kill")

        let total = Int64(size * Self.files)
        var reached: Int64 = 0
        for cycle in 1..<Self.killCycles {
            // A random moment: somewhere in the next stretch of the batch.
            let step = total / Int64(Self.killCycles + 1)
            let target = min(total - 1, reached + step / 2 + Int64(rng.next() % UInt64(step)))
            try await waitForBatch(transfers, toReach: target)
            reached = try await bytesWritten(transfers)
            if cycle == 2 {
                // The server's copy of file 2 changes: what is on disk no longer matches.
                bodies["/batch/2.bin"] = serve("/batch/2.bin", size: size + 1000, seed: 99, etag: "\"b2\"")
                server.set(.slow(bytesPerSecond: 256 * 1024), on: "/batch/2.bin")
            }
            try await killAndRestart()
            let listed = try await client.listTransfers().map(\.path)
            XCTAssertEqual(listed, paths, "no transfer lost or duplicated after kill \(cycle + 1)")
        }

        var infos: [TransferInfo] = []
        for t in transfers {
            let info = try await t.info()
            infos.append(info.isFinal ? info : try await finish(t, timeout: 60))
        }
        for (k, info) in infos.enumerated() {
            XCTAssertEqual(info.state, "completed", "file \(k): \(info.errorName) \(info.errorMessage)")
            assertFile(work + "/\(k).bin", equals: bodies["/batch/\(k).bin"]!)
        }
        XCTAssertEqual(partFiles(in: work), [], "no .part file is left")
        let finalList = try await client.listTransfers().map(\.path)
        XCTAssertEqual(finalList, paths)

        // Each completion event exactly once, oldest first, with distinct serials.
        let events = try await s.pendingEvents()
        XCTAssertEqual(events.map(\.kind), Array(repeating: "finished", count: Self.files))
        XCTAssertEqual(Set(events.map(\.transferPath)), Set(paths))
        XCTAssertEqual(events.map(\.serial), events.map(\.serial).sorted())
        XCTAssertEqual(Set(events.map(\.serial)).count, events.count)
        for p in paths {
            XCTAssertLessThanOrEqual(signals.signals(path: p, member: "Completed").count, 1,
                                     "\(p) is never announced twice as completed")
        }
        // Acknowledging them all empties the list, and it stays empty after a restart.
        try await s.acknowledgeEvents(upTo: events.last!.serial)
        try await killAndRestart()
        let left = try await s.pendingEvents()
        XCTAssertEqual(left.count, 0)
    }

    /// A disk that fills up fails the transfer with Disk, keeps the partial file
    /// and the daemon; Resume continues once there is room.
    func testDiskFullFailsWithDiskAndResumeContinues() async throws {
        let small = work + "/small"
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        let mounted = try ChildProcess.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", small], timeout: 10)
        guard mounted.status == 0 else {
            throw XCTSkip("cannot mount a small tmpfs here (\(mounted.stderr.trimmingCharacters(in: .whitespacesAndNewlines))); needs root")
        }
        cleanups.append { _ = try? ChildProcess.run("/bin/umount", ["-l", small], timeout: 10) }

        let body = serve("/big.bin", size: 3 * 1024 * 1024)
        let other = serve("/other.bin", size: 100_000)
        let s = try await session("com.example.Disk", ["retries": .uint32(0)])
        let big = try await s.download(server.url("/big.bin"), options: ["destination": .string(small + "/big.bin")])
        let (_, errorName, errorMessage) = try await signals.completed(big.path)
        XCTAssertEqual(errorName, "org.ferry.Ferry1.Error.Disk", errorMessage)
        let failedInfo = try await big.info()
        XCTAssertEqual(failedInfo.state, "failed")
        XCTAssertFalse(exists(small + "/big.bin"), "no final file")

        // A file under 1 MiB that does not fit above the margin fails the same way.
        _ = serve("/tight.bin", size: 1_000_000)  // under 1 MiB, over what the 1 MiB disk has above its 64 KiB margin
        let tight = try await s.download(server.url("/tight.bin"), options: ["destination": .string(small + "/tight.bin")])
        let (_, tightError, tightMessage) = try await signals.completed(tight.path)
        XCTAssertEqual(tightError, "org.ferry.Ferry1.Error.Disk", tightMessage)
        XCTAssertFalse(exists(small + "/tight.bin"), "no final file")

        // The daemon and other transfers go on.
        let ok = try await s.download(server.url("/other.bin"), options: ["destination": .string(work + "/other.bin")])
        let okInfo = try await finish(ok)
        XCTAssertEqual(okInfo.state, "completed")
        assertFile(work + "/other.bin", equals: other)

        // Room again: Resume continues and completes.
        let grown = try ChildProcess.run("/bin/mount", ["-o", "remount,size=8m", small], timeout: 10)
        XCTAssertEqual(grown.status, 0, grown.stderr)
        let mark = signals.mark
        try await big.resume()
        try await signals.wait("Completed after resume") { s in
            s.dropFirst(mark).contains { $0.path == big.path && $0.member == "Completed" }
        }
        let info = try await big.info()
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(small + "/big.bin", equals: body)
    }
}

