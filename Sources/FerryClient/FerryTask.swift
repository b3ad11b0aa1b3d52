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

/// The server's answer to a task, as far as the service tells it (`URLResponse`'s
/// place): the bus carries the status but not the headers.
public struct FerryTaskResponse: Sendable, Equatable {
    /// The HTTP status of the last answer (`HttpStatus`), 200 or 206 for a download
    /// that is being written.
    public var statusCode: Int
    /// A download's file name as the service chose it (`Destination`'s last part, once
    /// chosen): the server's (`Content-Disposition`) or the URL's when the download was
    /// given a directory, made unique (`name (1).ext`) when the name was taken; the
    /// app's own when it gave a file path. Nil for an upload, and before it is chosen.
    public var suggestedFilename: String?

    public init(statusCode: Int, suggestedFilename: String? = nil) {
        self.statusCode = statusCode
        self.suggestedFilename = suggestedFilename
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
    /// Why a download runs on fewer connections than it asked for (its session's
    /// maximum connections per host); nil otherwise.
    public var connectionLimitReason: String?

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
        connectionLimitReason = i.connectionLimitReason.isEmpty ? nil : i.connectionLimitReason
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

    /// What the session last heard of the task (read without a bus call).
    let status: TaskStatus

    init(path: String, core: SessionCore) {
        self.path = path
        id = BusClient.transferID(path)
        self.core = core
        status = TaskStatus(id: id, path: path)
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

    private func call(_ method: BusMethod, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        guard let core else { throw FerryError.detached("the task's session is gone (detached or released)") }
        return try await core.call(method, on: path, args)
    }

    /// Stops the task, keeping the partial file; returns the resume data for
    /// `FerrySession.resumeDownload(with:)` (empty when the server cannot resume).
    /// Once it returns, ``state`` reads `.paused`.
    @discardableResult
    public func pause() async throws -> Data {
        let data = Data(try await call(FerryInterface.TransferMethod.pause).first?.bytes ?? [])
        await core?.settle()
        return data
    }
    /// Starts a task made suspended (``FerrySession/downloadTask(with:to:options:)``,
    /// `startsSuspended`), as `URLSessionTask.resume()` does; a paused or failed one is
    /// queued again, continuing from the partial file where possible. Once it returns,
    /// ``state`` reads `.queued` (or what came next).
    public func resume() async throws {
        let before = lock.withLock { completions }
        _ = try await call(FerryInterface.TransferMethod.resume)
        // Accepted: a failed task runs again. Open its outcome now, so that `value` and
        // `events` read right after this follow the new run (unless that run already
        // ended meanwhile).
        reopen(ifCompletions: before)
        await core?.settle()
    }
    /// Stops it for good and deletes the partial file.
    public func cancel() async throws {
        _ = try await call(FerryInterface.TransferMethod.cancel)
        await core?.settle()
    }
    /// Forgets a completed, failed or cancelled task (a downloaded file stays).
    public func remove() async throws { _ = try await call(FerryInterface.TransferMethod.remove) }
    /// Points a paused or failed download at a new URL (an expired signed link).
    public func setURL(_ url: URL) async throws {
        _ = try await call(FerryInterface.TransferMethod.setURL, [.string(url.absoluteString)])
        await core?.settle()
    }

    public func setPriority(_ p: TransferPriority) async throws {
        _ = try await call(setProperty: FerryInterface.TransferProperty.priority.name, .int32(p.rawValue))
    }

    public func setSpeedLimit(_ bytesPerSecond: UInt64) async throws {
        _ = try await call(setProperty: FerryInterface.TransferProperty.speedLimit.name, .uint64(bytesPerSecond))
    }

    private func call(setProperty name: String, _ v: DBusValue) async throws {
        guard let core else { throw FerryError.detached("the task's session is gone (detached or released)") }
        _ = try await core.call(path, StandardNames.properties, "Set", [.string(BusClient.transferInterface), .string(name), .variant(v)])
    }

    // MARK: Properties

    /// All properties now, asked of the service (a bus round trip). ``cachedSnapshot``
    /// and the properties below read what the session last heard instead, at no cost.
    public func snapshot() async throws -> FerryTaskSnapshot {
        guard let core else { throw FerryError.detached("the task's session is gone (detached or released)") }
        let r = try await core.call(path, StandardNames.properties, "GetAll", [.string(BusClient.transferInterface)])
        return FerryTaskSnapshot(TransferInfo(id: id, path: path, properties: r.first?.vardict ?? [:]))
    }

    // MARK: What the session last heard (no bus call)

    /// The task's properties as the session last heard them: kept current from the
    /// signals it follows (each property change, each `Progress`, the completion), so
    /// reading costs no bus call. Current as of the last signal handled: a completion
    /// is in it before `value`, `events` and the delegate tell it, and a change this
    /// task's own `pause()`, `resume()`, `cancel()` or `setURL(_:)` made is in it once
    /// that call returns. `Rate` and `ExpectedEnd` have no change signal: ask
    /// ``snapshot()`` for them. Once the session is detached, it stays as it was.
    public var cachedSnapshot: FerryTaskSnapshot { status.snapshot }

    /// Where the task is in its life (`URLSessionTask.state`), as last heard.
    public var state: TransferState { cachedSnapshot.state }
    /// The bytes written (a download) or sent (an upload) so far, as last heard.
    public var bytesTransferred: Int64 { cachedSnapshot.bytesTransferred }
    /// The size, -1 while unknown, as last heard.
    public var bytesExpected: Int64 { cachedSnapshot.bytesExpected }
    /// A download's bytes written so far (`countOfBytesReceived`); 0 for an upload.
    public var countOfBytesReceived: Int64 { let s = cachedSnapshot; return s.kind == .download ? s.bytesTransferred : 0 }
    /// A download's size, -1 while unknown (`countOfBytesExpectedToReceive`,
    /// `NSURLSessionTransferSizeUnknown`); 0 for an upload.
    public var countOfBytesExpectedToReceive: Int64 { let s = cachedSnapshot; return s.kind == .download ? s.bytesExpected : 0 }
    /// An upload's bytes sent so far (`countOfBytesSent`); 0 for a download.
    public var countOfBytesSent: Int64 { let s = cachedSnapshot; return s.kind == .upload ? s.bytesTransferred : 0 }
    /// An upload's size, -1 while unknown (`countOfBytesExpectedToSend`); 0 for a download.
    public var countOfBytesExpectedToSend: Int64 { let s = cachedSnapshot; return s.kind == .upload ? s.bytesExpected : 0 }
    /// The task's URL.
    public var url: URL? { cachedSnapshot.url }
    /// A download's final path (once chosen); an upload's source.
    public var destination: URL? { cachedSnapshot.destination }
    /// The task's description (`taskDescription`, the `description` option).
    public var taskDescription: String { cachedSnapshot.description }
    /// The last failure (also while the task waits to try again); nil once it completed.
    public var error: FerryError? { cachedSnapshot.error }
    /// The server's answer once it came (`URLSessionTask.response`): its status and,
    /// for a download, the file name the service chose. Nil before any answer.
    public var response: FerryTaskResponse? {
        let s = cachedSnapshot
        guard s.httpStatus != 0 else { return nil }
        return FerryTaskResponse(statusCode: s.httpStatus,
                                 suggestedFilename: s.kind == .download ? s.destination?.lastPathComponent : nil)
    }
    /// The task's bytes as a Foundation `Progress` (`URLSessionTask.progress`):
    /// `completedUnitCount` of `totalUnitCount` bytes (-1, indeterminate, while the size
    /// is unknown), updated as the session hears `Progress` signals; `fractionCompleted`
    /// is 1 once the task completed. Observe it (KVO where available) or read it.
    /// It only reports: `cancel()` and `pause()` on it do not reach the task.
    public var progress: Progress { status.progress }
}
