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
}
