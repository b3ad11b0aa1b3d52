import Foundation
internal import FerryInterface
internal import DBus
internal import FerryBusClient

/// One event of one task, for `for try await event in task.events`.
public enum FerryTaskEvent: Sendable, Equatable {
    /// Data moved: a download wrote, an upload sent.
    case progress(bytes: Int64, totalBytes: Int64, totalBytesExpected: Int64)
    /// It picked up from a partial file at `offset`.
    case resumed(offset: Int64, expectedTotal: Int64)
    case stateChanged(TransferState)
    /// A download is in its final place.
    case finished(location: URL)
}

/// How a task ended well: `try await task.value`.
public struct FerryTaskResult: Sendable, Equatable {
    /// Where the download is (for an upload: the file it sent).
    public var location: URL?
    /// For an upload: the server's answer (its first 64 KiB), nil when it sent none or
    /// the upload saved it at its `responseDestination`. Nil for a download.
    public var response: Data?
    /// The bytes written (a download) or sent (an upload); nil when not known.
    public var bytes: Int64?
    /// The file's SHA-256 (hex) when the download was given the `sha256` option (it was
    /// checked against it); nil otherwise, and for an upload.
    public var sha256: String?

    public init(location: URL?, response: Data? = nil, bytes: Int64? = nil, sha256: String? = nil) {
        self.location = location
        self.response = response
        self.bytes = bytes
        self.sha256 = sha256
    }
}

/// A task's properties at one moment.
public struct FerryTaskSnapshot: Sendable, Equatable {
    public enum Kind: String, Sendable { case download, upload }
    public var id: UInt64
    public var kind: Kind
    public var url: URL?
    public var description: String
    /// A download's final path (once chosen); an upload's source.
    public var destination: URL?
    public var state: TransferState
    public var waitingReason: WaitingReason?
    public var bytesTransferred: Int64
    /// -1 when unknown.
    public var bytesExpected: Int64
    /// Bytes/s.
    public var rate: UInt64
    public var expectedEnd: Date?
    /// The last failure: also while the task waits to try again (``WaitingReason`` `retry`);
    /// nil once it has completed.
    public var error: FerryError?
    public var httpStatus: Int
    public var attempts: Int
    public var isResumable: Bool
    public var sha256: String?
    public var created: Date?
    public var started: Date?
    public var completed: Date?
    public var priority: TransferPriority
    public var speedLimit: UInt64
    /// For an upload, once it has an answer: the first 64 KiB of the server's response
    /// body (nil when none, or when it went to the upload's `responseDestination`).
    public var response: Data?
    /// While it waits for a time (a retry, `startAfter`): when it is tried again (the
    /// service's `NextAttempt`); nil otherwise.
    public var nextAttempt: Date?
    /// Why a download asked to use several connections runs on one (the server accepts
    /// no ranges, …); nil otherwise.
    public var singleConnectionReason: String?

    /// A snapshot of the app's own making (a test's fixture, a preview); the service's
    /// come from ``FerryTask/snapshot()``.
    public init(id: UInt64, kind: Kind = .download, url: URL? = nil, description: String = "", destination: URL? = nil,
                state: TransferState = .queued, waitingReason: WaitingReason? = nil, bytesTransferred: Int64 = 0,
                bytesExpected: Int64 = -1, rate: UInt64 = 0, expectedEnd: Date? = nil, error: FerryError? = nil,
                httpStatus: Int = 0, attempts: Int = 0, isResumable: Bool = false, sha256: String? = nil,
                created: Date? = nil, started: Date? = nil, completed: Date? = nil, priority: TransferPriority = .normal,
                speedLimit: UInt64 = 0, response: Data? = nil, nextAttempt: Date? = nil,
                singleConnectionReason: String? = nil) {
        self.id = id; self.kind = kind; self.url = url; self.description = description; self.destination = destination
        self.state = state; self.waitingReason = waitingReason; self.bytesTransferred = bytesTransferred
        self.bytesExpected = bytesExpected; self.rate = rate; self.expectedEnd = expectedEnd; self.error = error
        self.httpStatus = httpStatus; self.attempts = attempts; self.isResumable = isResumable; self.sha256 = sha256
        self.created = created; self.started = started; self.completed = completed; self.priority = priority
        self.speedLimit = speedLimit; self.response = response
        self.nextAttempt = nextAttempt; self.singleConnectionReason = singleConnectionReason
    }

    init(_ i: TransferInfo) {
        id = i.id
        kind = Kind(rawValue: i.kind) ?? .download
        url = URL(string: i.url)
        description = i.description
        destination = i.destination.isEmpty ? nil : URL(fileURLWithPath: i.destination)
        state = TransferState(rawValue: i.state) ?? .queued
        waitingReason = WaitingReason(rawValue: i.waitingReason)
        bytesTransferred = i.bytesTransferred
        bytesExpected = i.bytesExpected
        rate = i.rate
        func date(_ t: UInt64) -> Date? { t == 0 ? nil : Date(timeIntervalSince1970: Double(t) / 1_000_000) }
        expectedEnd = date(i.expectedEnd)
        error = i.errorName.isEmpty ? nil : FerryError(name: i.errorName, message: i.errorMessage, httpStatus: Int(i.httpStatus))
        httpStatus = Int(i.httpStatus)
        attempts = Int(i.attempts)
        isResumable = i.resumable
        sha256 = i.sha256.isEmpty ? nil : i.sha256
        created = date(i.created)
        started = date(i.started)
        completed = date(i.completed)
        priority = TransferPriority(rawValue: max(-1, min(1, i.priority))) ?? .normal
        speedLimit = i.speedLimit
        response = i.response.isEmpty ? nil : Data(i.response)
        nextAttempt = date(i.nextAttempt)
        singleConnectionReason = i.singleConnectionReason.isEmpty ? nil : i.singleConnectionReason
    }
}

/// One transfer of a session, as `URLSessionTask` is one of a `URLSession`.
/// The service owns it: it goes on when the app exits.
public final class FerryTask: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// The id `ferry ls` shows (the number in its object path).
    public let id: UInt64
    let path: String
    weak var core: SessionCore?
    private let lock = NSLock()
    private var outcome: Result<FerryTaskResult, FerryError>?
    private var waiters: [CheckedContinuation<FerryTaskResult, Error>] = []
    /// Outcomes so far (a resumed failed task has more than one); under `lock`.
    private var completions = 0
    /// The run's events so far, for a reader that comes later: every one but a
    /// progress followed by another progress (the newest stands for them), at most
    /// `historyLimit`; a failed task that is resumed starts a new history (`reopen`).
    /// Under `lock`.
    private var history: [FerryTaskEvent] = []
    private static let historyLimit = 64
    /// The streams being read, by key; under `lock`.
    private var readers = StreamReaders<AsyncThrowingStream<FerryTaskEvent, Error>.Continuation>()
    /// Whether the task uploads (known once the session has seen it).
    var isUpload = false
    /// An upload's source file (known once the session has seen it); on the session's queue.
    var source: String?

    init(path: String, core: SessionCore) {
        self.path = path
        id = FerryClient.transferID(path)
        self.core = core
    }

    public static func == (a: FerryTask, b: FerryTask) -> Bool { a.path == b.path }
    public func hash(into h: inout Hasher) { h.combine(path) }
    public var description: String { "FerryTask(\(id))" }

    // MARK: Events

    /// The task's events: each read of `events` is a stream of its own, so that any
    /// number of readers (a list row and a detail view) may follow the task, and a
    /// reader that went away may come back. A stream starts with what the run has
    /// done so far (its events in order, a run of progress events as its newest one),
    /// then gives each new event (the newest 256 are kept until read); it ends when the
    /// task completes, throwing its `FerryError` if it failed, and a task that has
    /// completed gives its events and its end at once. A download's `.finished` comes
    /// before its `.stateChanged(.completed)`, which is its last event. (A task this run
    /// found already ended, its event acknowledged by an earlier run, has no events: its
    /// stream ends at once, with its outcome. A run's history keeps its newest 64 events.)
    /// A failed task that is resumed (`resume()`, after `setURL`) runs again: read
    /// `events` and `value` again for its new run.
    public var events: AsyncThrowingStream<FerryTaskEvent, Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: FerryTaskEvent.self, throwing: Error.self,
                                                                    bufferingPolicy: .bufferingNewest(256))
        lock.lock()
        for e in history { continuation.yield(e) }
        if let outcome {
            lock.unlock()
            Self.finish(continuation, with: outcome)
            return stream
        }
        let key = readers.add(continuation)
        lock.unlock()
        // Set after the lock is let go: a stream's end runs it at once, on the thread
        // that ends it.
        continuation.onTermination = { [weak self] _ in self?.readerLeft(key) }
        return stream
    }

    private func readerLeft(_ key: Int) { lock.withLock { readers.remove(key) } }

    private static func finish(_ c: AsyncThrowingStream<FerryTaskEvent, Error>.Continuation,
                               with outcome: Result<FerryTaskResult, FerryError>) {
        switch outcome {
        case .success: c.finish()
        case .failure(let e): c.finish(throwing: e)
        }
    }

    /// Waits until the task ends: its result, or its `FerryError`.
    public var value: FerryTaskResult {
        get async throws {
            try await withCheckedThrowingContinuation { c in
                lock.lock()
                if let outcome {
                    lock.unlock()
                    c.resume(with: outcome.mapError { $0 as Error })
                } else {
                    waiters.append(c)
                    lock.unlock()
                }
            }
        }
    }

    func yield(_ e: FerryTaskEvent) {
        let now: [AsyncThrowingStream<FerryTaskEvent, Error>.Continuation] = lock.withLock {
            if case .progress = e, case .progress? = history.last {
                history[history.count - 1] = e
            } else {
                if history.count == Self.historyLimit { history.removeFirst() }
                history.append(e)
            }
            return readers.all
        }
        for c in now { c.yield(e) }
    }

    /// The service runs a failed task again (queued after `Resume`): its outcome is open
    /// once more, with a new event stream.
    func reopen(ifCompletions expected: Int? = nil) {
        lock.lock()
        defer { lock.unlock() }
        guard case .failure? = outcome, expected == nil || expected == completions else { return }
        outcome = nil
        history = []
    }

    func complete(_ r: Result<FerryTaskResult, FerryError>) {
        lock.lock()
        guard outcome == nil else { return lock.unlock() }
        outcome = r
        completions += 1
        let w = waiters
        waiters = []
        let streams = readers.takeAll()
        lock.unlock()
        for c in streams { Self.finish(c, with: r) }
        for c in w { c.resume(with: r.mapError { $0 as Error }) }
    }

    var isCompleted: Bool { lock.withLock { outcome != nil } }

    // MARK: Control

    private func call(_ method: String, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        guard let core else { throw FerryError.detached("the task's session is gone (detached or released)") }
        return try await core.call(path, FerryClient.transferInterface, method, args)
    }

    /// Stops the task, keeping the partial file; returns the resume data for
    /// `FerrySession.resumeDownload(with:)` (empty when the server cannot resume).
    @discardableResult
    public func pause() async throws -> Data { Data(try await call("Pause").first?.bytes ?? []) }
    /// Paused or failed: queue it again, continuing from the partial file where possible.
    public func resume() async throws {
        let before = lock.withLock { completions }
        _ = try await call("Resume")
        // Accepted: a failed task runs again. Open its outcome now, so that `value` and
        // `events` read right after this follow the new run (unless that run already
        // ended meanwhile).
        reopen(ifCompletions: before)
    }
    /// Stops it for good and deletes the partial file.
    public func cancel() async throws { _ = try await call("Cancel") }
    /// Forgets a completed, failed or cancelled task (a downloaded file stays).
    public func remove() async throws { _ = try await call("Remove") }
    /// Points a paused or failed download at a new URL (an expired signed link).
    public func setURL(_ url: URL) async throws { _ = try await call("SetUrl", [.string(url.absoluteString)]) }

    public func setPriority(_ p: TransferPriority) async throws {
        _ = try await call(setProperty: FerryInterface.TransferProperty.priority.name, .int32(p.rawValue))
    }

    public func setSpeedLimit(_ bytesPerSecond: UInt64) async throws {
        _ = try await call(setProperty: FerryInterface.TransferProperty.speedLimit.name, .uint64(bytesPerSecond))
    }

    private func call(setProperty name: String, _ v: DBusValue) async throws {
        guard let core else { throw FerryError.detached("the task's session is gone (detached or released)") }
        _ = try await core.call(path, StandardNames.properties, "Set", [.string(FerryClient.transferInterface), .string(name), .variant(v)])
    }

    // MARK: Properties

    /// All properties now.
    public func snapshot() async throws -> FerryTaskSnapshot {
        guard let core else { throw FerryError.detached("the task's session is gone (detached or released)") }
        let r = try await core.call(path, StandardNames.properties, "GetAll", [.string(FerryClient.transferInterface)])
        return FerryTaskSnapshot(TransferInfo(id: id, path: path, properties: r.first?.vardict ?? [:]))
    }

    public var state: TransferState { get async throws { try await snapshot().state } }
    public var bytesTransferred: Int64 { get async throws { try await snapshot().bytesTransferred } }
    public var bytesExpected: Int64 { get async throws { try await snapshot().bytesExpected } }
    public var url: URL? { get async throws { try await snapshot().url } }
    public var destination: URL? { get async throws { try await snapshot().destination } }
    public var error: FerryError? { get async throws { try await snapshot().error } }
}
