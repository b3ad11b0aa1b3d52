import FerryCore
import Foundation
import FerryCoreTestSupport
import FerryTestSupport
import FerryStore
import Logging
import XCTest

/// A temporary state directory, removed at the end.
final class TemporaryDirectory {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "ferry-store-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }

    var database: String { path + "/ferry.sqlite" }

    func files() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }
}

/// A coordinator over a store, as ferryd runs it (restore, then start), with a fake
/// engine and the wall clock.
final class Daemon {
    let queue = DispatchQueue(label: "ferry.store.test.core")
    let engine = FakeEngine(.scriptedConfirmingStops)
    let core: TransferCoordinator
    let downloads: String

    /// The SQLite store, closed when the daemon stops or is abandoned.
    private let sqlite: SQLiteTransferStore?

    init(store: TransferStore, downloads: String) throws {
        self.downloads = downloads
        sqlite = store as? SQLiteTransferStore
        let environment = CoreEnvironment(defaultDownloadDirectory: { downloads }, retryPolicy: .never,
                                          freeSpace: { _ in nil })
        core = TransferCoordinator(engine: engine, environment: environment, store: store, queue: queue)
        try queue.sync {
            try core.restore()
            core.start()
        }
    }

    func sync<T>(_ body: (TransferCoordinator) throws -> T) rethrows -> T {
        try queue.sync { try body(core) }
    }

    func send(_ events: EngineEvent...) {
        for event in events { engine.emit(event) }
        queue.sync {}
    }

    /// A whole successful attempt of `body`.
    func succeed(_ id: TransferID, body: [UInt8]) {
        let url = sync { $0.transfer(id)?.url } ?? ""
        send(.response(id, EngineResponse(status: 200, etag: "\"e\(id)\"", expectedTotal: Int64(body.count),
                                          acceptsRanges: true, effectiveURL: url)))
        let part = (sync { $0.transfer(id)?.destination } ?? "") + ".part"
        FileManager.default.createFile(atPath: part, contents: Data(body))
        send(.progress(id, bytesWritten: Int64(body.count), totalOnDisk: Int64(body.count), expected: Int64(body.count)),
             .completed(id, .succeeded(bytesOnDisk: Int64(body.count), sha256: nil)))
    }

    func stop() {
        queue.sync { core.shutdown() }
        try? sqlite?.close()
    }

    /// Closes the database without the core's shutdown, so that another connection
    /// can open the file (ferryd holds it alone); SQLite checkpoints the WAL on close.
    func releaseDatabase() {
        queue.sync { try? sqlite?.close() }
    }
}
