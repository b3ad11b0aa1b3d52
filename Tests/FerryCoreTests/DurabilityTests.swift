import Foundation
import XCTest
@testable import FerryCore

/// Durable before acknowledged: what a client is told is on the disk first. The order
/// of the steps is seen through `DurableFiles.observe` (folder syncs), the store's
/// `willWrite` (commits) and the core's events (what the bus would send).
final class DurabilityTests: XCTestCase {
    /// One log, written on the core's queue only.
    private final class Log {
        var entries: [String] = []
    }

    override func tearDown() {
        DurableFiles.observe(nil)
        super.tearDown()
    }

    /// A finished download's new name is made durable (its folder synced) before its
    /// completion is stored, and that before Finished and Completed go out.
    private func checkFolderSyncedBeforeCompletionIsStoredAndAnnounced(persistent: Bool) throws {
        let store = InMemoryTransferStore(recordingWrites: true)
        let h = CoreHarness(store: store)
        let s = try h.openSession { $0.persistent = persistent }
        let t = try h.download(s)
        let final = h.downloads + "/file.bin"
        let log = Log()
        DurableFiles.observe { step in
            guard case .syncFolder(let folder) = step, folder == h.downloads else { return }
            log.entries.append(FileManager.default.fileExists(atPath: final) ? "sync folder after the rename" : "sync folder before the rename")
        }
        store.willWrite = { operations in
            if operations.contains(where: { if case .appendEvent = $0 { return true } else { return false } }) {
                log.entries.append("store the completion")
            }
        }
        h.observer.onEvent = { event in
            switch event {
            case .finished: log.entries.append("announce Finished")
            case .completed: log.entries.append("announce Completed")
            default: break
            }
        }
        h.succeed(t, body: Array("hello".utf8))
        store.willWrite = nil
        XCTAssertEqual(h.state(t), .completed)
        let expected = persistent
            ? ["sync folder after the rename", "store the completion", "announce Finished", "announce Completed"]
            : ["sync folder after the rename", "announce Finished", "announce Completed"]
        XCTAssertEqual(h.sync { _ in log.entries }, expected)
    }

    func testFinishedFilesFolderIsSyncedBeforeTheCompletionIsStoredAndAnnounced() throws {
        try checkFolderSyncedBeforeCompletionIsStoredAndAnnounced(persistent: true)
    }

    func testEphemeralSessionsFinishedFilesFolderIsSyncedBeforeItIsAnnounced() throws {
        try checkFolderSyncedBeforeCompletionIsStoredAndAnnounced(persistent: false)
    }

    /// An overwrite replaces the old file in one rename; its folder is synced too.
    func testReplacedFilesFolderIsSynced() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let final = h.downloads + "/file.bin"
        _ = FileManager.default.createFile(atPath: final, contents: Data("old".utf8))
        let t = try h.download(s) { $0.overwrite = true }
        let log = Log()
        DurableFiles.observe { step in
            if case .syncFolder(let folder) = step, folder == h.downloads { log.entries.append("sync") }
        }
        h.succeed(t, body: Array("new".utf8))
        XCTAssertEqual(try String(contentsOfFile: final, encoding: .utf8), "new")
        XCTAssertEqual(h.sync { _ in log.entries }, ["sync"])
    }

    /// State files go through one helper: synced, renamed, folder synced.
    func testStateFileIsSyncedRenamedThenItsFolderSynced() throws {
        let dir = NSTemporaryDirectory() + "ferry-durable-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var steps: [DurableFiles.Step] = []
        let lock = NSLock()
        DurableFiles.observe { step in lock.withLock { steps.append(step) } }
        try DurableFiles.write(Array("key".utf8), to: dir + "/state", mode: 0o600)
        XCTAssertEqual(lock.withLock { steps }, [.syncFile(dir + "/state.new"), .rename(from: dir + "/state.new", to: dir + "/state"),
                                                 .syncFolder(dir)])
        XCTAssertEqual(try String(contentsOfFile: dir + "/state", encoding: .utf8), "key")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/state.new"))
    }

    // MARK: - Restore

    /// A download under way whose move into place reached the disk while the commit
    /// saying so did not (a power cut): after the restart its `.part` is gone and its
    /// name holds the whole file. It completes there, with its event, instead of being
    /// fetched again into `file (1).bin`.
    private func downloadMovedBeforeItsCommit(_ configure: (inout DownloadOptions) -> Void = { _ in })
        throws -> (CoreHarness, TransferID, [UInt8]) {
        let h = CoreHarness()
        let s = try h.openSession()
        let body = Array(repeating: UInt8(9), count: 300 << 10)
        let t = try h.download(s, "https://example.com/file.bin", configure)
        h.answerAndWrite(t, Array(body[0..<1000]), total: Int64(body.count))
        XCTAssertEqual(h.savedRows(of: t).last?.snapshot.bytesExpected, Int64(body.count), "its length is stored")
        // The rest arrived and the file was moved into place; the store never heard of it.
        try FileManager.default.removeItem(atPath: h.downloads + "/file.bin.part")
        _ = FileManager.default.createFile(atPath: h.downloads + "/file.bin", contents: Data(body))
        return (h, t, body)
    }

    func testARunningDownloadWhoseWholeFileIsInPlaceCompletesAtTheRestart() throws {
        let (h, t, body) = try downloadMovedBeforeItsCommit()
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .completed)
        XCTAssertEqual(h2.destination(t), h.downloads + "/file.bin")
        XCTAssertNil(h2.engine.lastRequest(t), "not fetched again")
        XCTAssertFalse(h2.exists(h.downloads + "/file (1).bin"))
        let events = try h2.sync { try $0.pendingEvents(session: 1) }
        XCTAssertEqual(events.map(\.kind), [.finished])
        XCTAssertEqual(events.first?.location, h.downloads + "/file.bin")
        XCTAssertEqual(events.first?.bytes, Int64(body.count))
    }

    func testWithASha256OnlyTheExpectedFileCompletes() throws {
        let wanted = CoreHarness.sha256Hex(Array(repeating: UInt8(9), count: 300 << 10))
        let (h, t, _) = try downloadMovedBeforeItsCommit { $0.sha256 = wanted }
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .completed)
        XCTAssertEqual(h2.snapshot(t)?.sha256, wanted)

        let other = Array(repeating: UInt8(8), count: 300 << 10) // the same length, other bytes
        let (h3, t3, _) = try downloadMovedBeforeItsCommit { $0.sha256 = wanted }
        _ = FileManager.default.createFile(atPath: h3.downloads + "/file.bin", contents: Data(other))
        let h4 = h3.restarted(crashed: true)
        XCTAssertEqual(h4.state(t3), .running, "another file at its name: fetched again")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: h3.downloads + "/file.bin")), Data(other), "that file is left alone")
    }

    func testAFileOfAnotherLengthAtTheNameIsNotTaken() throws {
        let (h, t, _) = try downloadMovedBeforeItsCommit()
        _ = FileManager.default.createFile(atPath: h.downloads + "/file.bin", contents: Data([1, 2, 3]))
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.state(t), .running)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 0)
    }

    /// A download part-way, its first `synced` bytes reported on the disk itself (`nil`:
    /// never synced), then the daemon killed.
    private func downloadCutAfterSync(synced: DurablePart?) throws -> (CoreHarness, TransferID) {
        let h = CoreHarness(checkpointInterval: 0)
        let s = try h.openSession()
        let t = try h.download(s, "https://example.com/file.bin")
        h.answerAndWrite(t, Array(repeating: 7, count: 200_000), total: 1_000_000)
        if let synced { h.send(.durable(t, synced)) }
        return (h, t)
    }

    /// After a power cut the bytes a part file's length covers may be holes: when the
    /// machine restarted, a download continues only from what was synced.
    func testAfterTheMachineRestartedOnlySyncedBytesAreContinued() throws {
        let (h, t) = try downloadCutAfterSync(synced: .prefix(65_536))
        let h2 = h.restarted(crashed: true, machineRestarted: true)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 65_536, "continued from the synced prefix, not the part file's 200,000 bytes")
        XCTAssertEqual(h2.snapshot(t)?.bytesTransferred, 65_536)
    }

    func testAfterTheMachineRestartedAPartFileNeverSyncedStartsOver() throws {
        let (h, t) = try downloadCutAfterSync(synced: nil)
        let h2 = h.restarted(crashed: true, machineRestarted: true)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 0)
    }

    /// kill -9 of the daemon alone loses nothing the kernel had: the whole part file counts.
    func testAfterTheDaemonAloneRestartedThePartFileCountsWhole() throws {
        let (h, t) = try downloadCutAfterSync(synced: .prefix(65_536))
        let h2 = h.restarted(crashed: true)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 200_000)
    }

    /// A response that starts the file over makes the old sync mark void.
    func testStartingOverForgetsTheSyncedPrefix() throws {
        let (h, t) = try downloadCutAfterSync(synced: .prefix(150_000))
        h.answerAndWrite(t, Array(repeating: 8, count: 100_000), total: 1_000_000, etag: "\"y\"")
        XCTAssertEqual(h.savedRows(of: t).last?.durablePart, nil, "the file was cut: nothing of it is known synced")
        let h2 = h.restarted(crashed: true, machineRestarted: true)
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 0)
    }

    /// Marks `path` as a partial file this ferryd made (as the engine does).
    private func mark(_ path: String) throws {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        PartFileMark.set(fd: fd)
        close(fd)
        guard PartFileMark.isMarked(path) else { throw XCTSkip("the test folder keeps no user extended attributes") }
    }

    /// A `.part` this ferryd made that no transfer owns any more (a power cut brought
    /// back one whose unlink had not reached the disk) is removed at the restart;
    /// another program's `NAME.part` (no mark) and the one a transfer owns stay.
    func testAForgottenPartFileOfOursIsRemovedAtTheRestartAndNoOtherFile() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.answerAndWrite(t, Array(repeating: 1, count: 1000), total: 300 << 10)
        try mark(h.downloads + "/file.bin.part")
        let forgotten = h.downloads + "/gone.bin.part", browsers = h.downloads + "/browser.bin.part"
        _ = FileManager.default.createFile(atPath: forgotten, contents: Data([1, 2, 3]))
        try mark(forgotten)
        _ = FileManager.default.createFile(atPath: browsers, contents: Data([4, 5, 6]))

        let h2 = h.restarted(crashed: true)
        XCTAssertFalse(h2.exists(forgotten), "ours, owned by no transfer: removed")
        XCTAssertTrue(h2.exists(browsers), "not ours: left alone")
        XCTAssertTrue(h2.exists(h.downloads + "/file.bin.part"), "owned: kept")
        XCTAssertEqual(h2.engine.lastRequest(t)?.offset, 1000, "and continued")
    }

    /// A partial file handed to the client in resume data is the client's: unmarked,
    /// so no restart removes it although no transfer owns it then.
    func testResumeDataTakesTheMarkOff() throws {
        let h = CoreHarness()
        let s = try h.openSession()
        let t = try h.download(s)
        h.answerAndWrite(t, Array(repeating: 1, count: 1000), total: 300 << 10)
        let part = h.downloads + "/file.bin.part"
        try mark(part)
        let data = try h.sync { try $0.pause(t) }
        XCTAssertFalse(data.isEmpty)
        XCTAssertFalse(PartFileMark.isMarked(part))
    }
}
