import Crypto
import Foundation
import XCTest
@testable import FerryCore
import FerryMetalink
import FerryMetalinkParser

/// A coordinator over a fake engine, a fake clock and a temporary directory. Every
/// call goes through `queue.sync`; engine events are delivered and then drained with
/// another `queue.sync`, so no test sleeps.
final class CoreHarness {
    let queue = DispatchQueue(label: "ferry.core.test")
    let engine: FakeEngine
    let clock: FakeClock
    let observer = RecordingObserver()
    let root: String
    let downloads: String
    let core: TransferCoordinator
    let store: InMemoryTransferStore
    let disk: FakeDisk
    let retryPolicy: RetryPolicy
    let checkpointInterval: Double
    let pendingEventsPerSession: Int
    /// The real copier of dedupe followers' files, counted, so that `send` can wait for
    /// the copies an event started (nil when a test gives its own).
    let copies: TrackedCopier?
    /// Metalink documents being read, held until `send` (or a test) lets them go.
    let metalinkReads = HeldMetalinkReader()
    /// Removes `root` when done (a restarted harness takes this over).
    private var ownsRoot = true

    /// - Parameters:
    ///   - store: what the core persists to (shared by `restarted()`).
    ///   - restore: call `restore()` before `start()`, as ferryd does.
    init(start: Bool = true, retryPolicy: RetryPolicy = .never, store: InMemoryTransferStore = InMemoryTransferStore(recordingWrites: true),
         restore: Bool = false, checkpointInterval: Double = 5, clock: FakeClock = FakeClock(), disk: FakeDisk = FakeDisk(),
         root: String? = nil, batchSettleTime: Double = 0, pendingEventsPerSession: Int = Limits.defaultPendingEventsPerSession,
         machineRestarted: Bool = false, copier: FetchedCopier? = nil, commitWindow: Double = 0,
         engineReportsUnansweredStreams: Bool = false) {
        engine = FakeEngine(reportsUnansweredStreams: engineReportsUnansweredStreams)
        self.root = root ?? NSTemporaryDirectory() + "ferry-core-" + UUID().uuidString
        downloads = self.root + "/Downloads"
        try! FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        self.clock = clock
        self.store = store
        self.disk = disk
        self.retryPolicy = retryPolicy
        self.checkpointInterval = checkpointInterval
        self.pendingEventsPerSession = pendingEventsPerSession
        let downloads = self.downloads
        let environment = CoreEnvironment(now: { clock.now }, defaultDownloadDirectory: { downloads },
                                          version: "9.9", retryPolicy: retryPolicy,
                                          freeSpace: { path in disk.free(path) },
                                          checkpointInterval: checkpointInterval, batchSettleTime: batchSettleTime,
                                          pendingEventsPerSession: pendingEventsPerSession,
                                          timeZone: { TimeZone(identifier: "UTC")! })
        var restartedEnvironment = environment
        restartedEnvironment.machineRestarted = machineRestarted
        restartedEnvironment.commitWindow = commitWindow
        copies = copier == nil ? TrackedCopier(FetchedCopyQueue()) : nil
        restartedEnvironment.fetchedCopier = copier ?? copies!
        restartedEnvironment.metalinkReader = metalinkReads
        core = TransferCoordinator(engine: engine, environment: restartedEnvironment, store: store, queue: queue)
        observer.attach(to: core)
        observer.expectedQueue = queue
        if restore { try! queue.sync { try core.restore() } }
        if start { queue.sync { core.start() } }
    }

    /// The daemon stopped (`shutdown`) and started again over the same store, files and
    /// clock: a new core that restores and starts. `crashed`: killed instead, so only
    /// what it had written counts (the old core is abandoned, as after kill -9).
    /// `machineRestarted`: the machine itself restarted (a power cut), not only the daemon.
    func restarted(retryPolicy: RetryPolicy? = nil, crashed: Bool = false, machineRestarted: Bool = false) -> CoreHarness {
        if !crashed { queue.sync { core.shutdown() } }
        ownsRoot = false
        return CoreHarness(retryPolicy: retryPolicy ?? self.retryPolicy, store: store, restore: true,
                           checkpointInterval: checkpointInterval, clock: clock, disk: disk, root: root,
                           pendingEventsPerSession: pendingEventsPerSession, machineRestarted: machineRestarted)
    }

    deinit { if ownsRoot { try? FileManager.default.removeItem(atPath: root) } }

    func sync<T>(_ body: (TransferCoordinator) throws -> T) rethrows -> T {
        try queue.sync { try body(core) }
    }

    /// Delivers engine events and waits until the core has handled them, and the
    /// dedupe copies and Metalink documents they started reading have come back and been
    /// handled (unless the test holds the documents: `metalinkReads.hold`).
    func send(_ events: EngineEvent...) {
        for event in events { engine.emit(event) }
        queue.sync {}
        if let copies {
            copies.waitForAll()
            queue.sync {}
        }
        if !metalinkReads.hold, metalinkReads.release() > 0 { queue.sync {} }
    }

    @discardableResult
    func openSession(_ identifier: String = "com.example.Test", _ configure: (inout SessionConfigurationUpdate) -> Void = { _ in }) throws -> SessionID {
        var update = SessionConfigurationUpdate()
        configure(&update)
        return try sync { try $0.openSession(identifier: identifier, configuration: update).id }
    }

    func download(_ session: SessionID, _ url: String = "https://example.com/file.bin",
                  _ configure: (inout DownloadOptions) -> Void = { _ in }) throws -> TransferID {
        var options = DownloadOptions()
        // Off unless a test turns it on: many tests download one URL twice and expect
        // two fetches (DedupeTests turn it on).
        options.dedupe = false
        configure(&options)
        return try sync { try $0.download(session: session, url: url, options: options) }
    }

    /// Queues an upload of a 1,000-byte file (made under `root`) to `url` with `method`
    /// (PUT or POST).
    func upload(_ session: SessionID, _ url: String = "https://example.com/up/form.bin", method: String) throws -> TransferID {
        let file = root + "/upload.bin"
        if !exists(file) { FileManager.default.createFile(atPath: file, contents: Data(repeating: 7, count: 1000)) }
        var options = UploadOptions()
        options.method = method
        return try sync { try $0.upload(session: session, url: url, file: file, options: options) }
    }

    /// The rows of transfer `id` the core wrote, oldest first, in writes from index `since` on.
    func savedRows(of id: TransferID, since: Int = 0) -> [StoredTransfer] {
        store.writes.dropFirst(since).flatMap { $0 }.compactMap { op -> StoredTransfer? in
            if case .saveTransfer(let st) = op, st.snapshot.id == id { return st } else { return nil }
        }
    }

    func snapshot(_ id: TransferID) -> TransferSnapshot? { sync { $0.transfer(id) } }
    func state(_ id: TransferID) -> TransferState? { snapshot(id)?.state }
    func destination(_ id: TransferID) -> String { snapshot(id)?.destination ?? "" }

    /// Writes `bytes` into the transfer's `.part` file, as the engine would.
    func writePart(_ id: TransferID, _ bytes: [UInt8], path: String? = nil) {
        let target = path ?? destination(id) + ".part"
        _ = FileManager.default.createFile(atPath: target, contents: Data(bytes))
    }

    /// Plays the start of an attempt: a 200 with a strong ETag for `total` bytes, the
    /// first of them written into the part file and reported.
    func answerAndWrite(_ id: TransferID, _ written: [UInt8], total: Int64, etag: String = "\"x\"") {
        send(.response(id, EngineResponse(status: 200, etag: etag, expectedTotal: total, acceptsRanges: true,
                                          effectiveURL: "https://example.com/file.bin")))
        writePart(id, written)
        send(.progress(id, bytesWritten: Int64(written.count), totalOnDisk: Int64(written.count), expected: total))
    }

    /// Plays a whole successful attempt: response, body into the part file, progress, end.
    func succeed(_ id: TransferID, body: [UInt8] = Array("hello".utf8), etag: String? = "\"v1\"",
                 contentDisposition: String? = nil, computeSHA: Bool = false) {
        send(.response(id, EngineResponse(status: 200, etag: etag, expectedTotal: Int64(body.count),
                                          contentDisposition: contentDisposition, acceptsRanges: true,
                                          effectiveURL: "https://example.com/file.bin")))
        writePart(id, body)
        let sha = computeSHA ? Self.sha256Hex(body) : nil
        send(.progress(id, bytesWritten: Int64(body.count), totalOnDisk: Int64(body.count), expected: Int64(body.count)),
             .completed(id, .succeeded(bytesOnDisk: Int64(body.count), sha256: sha)))
    }

    func fail(_ id: TransferID, _ error: CoreError, bytes: Int64 = 0) {
        send(.completed(id, .failed(error, bytesOnDisk: bytes)))
    }

    static func sha256Hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }
}

/// Asserts that `body` throws the CoreError case `expected` matches.
func XCTAssertFerryError<T>(_ body: @autoclosure () throws -> T, _ matches: (CoreError) -> Bool,
                            _ message: String = "", file: StaticString = #filePath, line: UInt = #line) {
    do {
        _ = try body()
        XCTFail("expected an error, got success. \(message)", file: file, line: line)
    } catch let error as CoreError {
        XCTAssertTrue(matches(error), "unexpected \(error). \(message)", file: file, line: line)
    } catch {
        XCTFail("not a CoreError: \(error)", file: file, line: line)
    }
}

extension CoreError {
    var isInvalidArgument: Bool { if case .invalidArgument = self { return true } else { return false } }
    var isInvalidUrl: Bool { if case .invalidUrl = self { return true } else { return false } }
    var isUnsupportedScheme: Bool { if case .unsupportedScheme = self { return true } else { return false } }
    var isInvalidDestination: Bool { if case .invalidDestination = self { return true } else { return false } }
    var isInvalidState: Bool { if case .invalidState = self { return true } else { return false } }
    var isInvalidResumeData: Bool { if case .invalidResumeData = self { return true } else { return false } }
    var isNoSuchSession: Bool { if case .noSuchSession = self { return true } else { return false } }
    var isNoSuchTransfer: Bool { if case .noSuchTransfer = self { return true } else { return false } }
    var isLimitExceeded: Bool { if case .limitExceeded = self { return true } else { return false } }
}

/// A `FetchedCopier` that counts the batches handed to another: `waitForAll` returns
/// once each has reported back (its `done` has queued the results on the core's queue).
final class TrackedCopier: FetchedCopier, Sendable {
    private let inner: FetchedCopier
    private let group = DispatchGroup()

    init(_ inner: FetchedCopier) { self.inner = inner }

    func copy(_ jobs: [FetchedCopyJob], done: @escaping @Sendable ([FetchedCopyOutcome]) -> Void) {
        group.enter()
        inner.copy(jobs) { [group] outcomes in
            done(outcomes)
            group.leave()
        }
    }

    func shutdown() { inner.shutdown() }

    func waitForAll() { group.wait() }
}

/// Parses Metalink documents as ferryd does (`MetalinkReadQueue.parse`), but only when
/// `release` is called: a test sees the core while a document is being read.
final class HeldMetalinkReader: MetalinkReading, @unchecked Sendable { // `pending` and `hold` only under `lock`
    private let lock = NSLock()
    private var pending: [() -> Void] = []
    private var holding = false

    /// Whether `CoreHarness.send` leaves documents unread (the test releases them).
    var hold: Bool {
        get { lock.withLock { holding } }
        set { lock.withLock { holding = newValue } }
    }

    func read(_ data: Data, done: @escaping @Sendable (Result<Metalink, MetalinkError>) -> Void) {
        lock.withLock { pending.append { done(Self.parse(data)) } }
    }

    /// What ferryd's reader process would say of `data` (the same parser, in this process).
    static func parse(_ data: Data) -> Result<Metalink, MetalinkError> {
        do {
            return .success(try MetalinkParser.parse(data))
        } catch let error as MetalinkError {
            return .failure(error)
        } catch {
            return .failure(MetalinkError(.malformed, "the Metalink document could not be read: \(error)"))
        }
    }

    /// Reads every document held, each `done` called on this thread; returns how many.
    @discardableResult
    func release() -> Int {
        let reads = lock.withLock {
            defer { pending = [] }
            return pending
        }
        for read in reads { read() }
        return reads.count
    }
}
