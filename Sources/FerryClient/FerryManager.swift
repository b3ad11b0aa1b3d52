import Foundation
internal import DBus
internal import FerryBusClient
internal import FerryInterface

/// The Ferry service as a whole (`org.ferry.Ferry1.Manager`): its counts and rates,
/// its settings, pausing, resuming or cancelling everything, and the end of each batch.
/// For an app that shows or steers every transfer (a download manager's window, a
/// settings page); an app that moves its own files needs only ``FerrySession``.
///
/// A sandboxed (Flatpak) app's calls reach its own sessions only (``suspendAll()``
/// pauses its transfers, no one else's), and it cannot change the settings
/// (``FerryError/accessDenied(_:)``).
///
/// ```swift
/// let ferry = FerryManager()
/// let status = try await ferry.status()
/// print("\(status.activeTransfers) running at \(status.downloadRate) bytes/s")
/// for await batch in try await ferry.batches() {
///     print("done: \(batch.succeeded) succeeded, \(batch.failed) failed")
/// }
/// ```
public final class FerryManager: @unchecked Sendable {
    /// The service's properties at one moment.
    public struct Status: Sendable, Equatable {
        /// The service's version (its package's: "0.2.0").
        public var version: String
        /// The version of the bus contract the service implements in full ("1.2"): test
        /// this, not `version`, before using an addition. "" from a service older than 1.2.
        public var interfaceVersion: String
        /// Transfers running now.
        public var activeTransfers: Int
        /// Transfers queued or waiting (for their time, a network, a retry).
        public var queuedTransfers: Int
        /// Bytes per second received over all transfers.
        public var downloadRate: UInt64
        /// Bytes per second sent over all transfers.
        public var uploadRate: UInt64
        /// How many transfers run at once (default 6).
        public var maximumConcurrentTransfers: Int
        /// Bytes per second over all transfers; nil: no limit.
        public var speedLimit: UInt64?
        /// Whether a batch's end posts a desktop notification.
        public var notificationsEnabled: Bool

        public init(version: String = "", activeTransfers: Int = 0, queuedTransfers: Int = 0, downloadRate: UInt64 = 0,
                    uploadRate: UInt64 = 0, maximumConcurrentTransfers: Int = 6, speedLimit: UInt64? = nil,
                    notificationsEnabled: Bool = true, interfaceVersion: String = "") {
            self.version = version; self.interfaceVersion = interfaceVersion; self.activeTransfers = activeTransfers; self.queuedTransfers = queuedTransfers
            self.downloadRate = downloadRate; self.uploadRate = uploadRate
            self.maximumConcurrentTransfers = maximumConcurrentTransfers; self.speedLimit = speedLimit
            self.notificationsEnabled = notificationsEnabled
        }
    }

    /// What one batch came to (the manager's `AllFinished`): nothing is queued,
    /// waiting or running any more in any session, and nothing new came for the
    /// service's settle time (1 s by default).
    public struct Batch: Sendable, Equatable {
        public var succeeded: Int
        public var failed: Int
        public var cancelled: Int

        public init(succeeded: Int = 0, failed: Int = 0, cancelled: Int = 0) {
            self.succeeded = succeeded; self.failed = failed; self.cancelled = cancelled
        }
    }

    /// One session of the service and its transfers, as ``sessions()`` lists it.
    public struct SessionSummary: Sendable, Equatable {
        /// The identifier the session is found by (``FerrySession/Configuration/identifier``).
        public var identifier: String
        /// false: an ephemeral session.
        public var isPersistent: Bool
        /// The application the service wakes for it, if any.
        public var applicationID: String?
        /// Its transfers running now.
        public var activeTransfers: Int
        /// Its transfers, oldest first, until removed.
        public var tasks: [FerryTaskSnapshot]

        public init(identifier: String, isPersistent: Bool = true, applicationID: String? = nil,
                    activeTransfers: Int = 0, tasks: [FerryTaskSnapshot] = []) {
            self.identifier = identifier
            self.isPersistent = isPersistent
            self.applicationID = applicationID
            self.activeTransfers = activeTransfers
            self.tasks = tasks
        }
    }

    private let client: BusClient?
    private let connectError: FerryError?

    /// Connects to the bus at `busAddress` (nil: the session bus). Nothing is sent
    /// until the first call; a bus that cannot be reached makes every call throw
    /// ``FerryError/serviceUnavailable(_:)``.
    public init(busAddress: String? = nil) {
        do {
            client = try BusClient(address: busAddress)
            connectError = nil
        } catch {
            client = nil
            connectError = .serviceUnavailable("cannot connect to the bus: \((error as? BusError)?.message ?? "\(error)")")
        }
    }

    /// Leaves the bus (a stream of ``batches()`` keeps its manager until it ends).
    deinit { client?.close() }

    func connected() throws -> BusClient {
        if let client { return client }
        throw connectError ?? .serviceUnavailable("cannot connect to the bus")
    }

    /// The service's counts, rates and settings (one round trip).
    public func status() async throws -> Status {
        let p = try await mapped { try await connected().managerProperties() }
        typealias M = FerryInterface.ManagerProperty
        let limit = p[M.speedLimit.name]?.uint64 ?? 0
        return Status(version: p[M.version.name]?.string ?? "",
                      activeTransfers: Int(p[M.activeTransfers.name]?.uint32 ?? 0),
                      queuedTransfers: Int(p[M.queuedTransfers.name]?.uint32 ?? 0),
                      downloadRate: p[M.downloadRate.name]?.uint64 ?? 0,
                      uploadRate: p[M.uploadRate.name]?.uint64 ?? 0,
                      maximumConcurrentTransfers: Int(p[M.maxConcurrentTransfers.name]?.uint32 ?? 0),
                      speedLimit: limit == 0 ? nil : limit,
                      notificationsEnabled: p[M.notificationsEnabled.name]?.bool ?? true,
                      interfaceVersion: p[M.interfaceVersion.name]?.string ?? "")
    }

    /// How many transfers run at once (1-256).
    public func setMaximumConcurrentTransfers(_ count: Int) async throws {
        guard let n = UInt32(exactly: count) else {
            throw FerryError.invalidArgument("the number of concurrent transfers must be between 1 and 256, not \(count)")
        }
        try await set(FerryInterface.ManagerProperty.maxConcurrentTransfers, .uint32(n))
    }

    /// Bytes per second over all transfers; nil (or 0) removes the limit.
    public func setSpeedLimit(_ bytesPerSecond: UInt64?) async throws {
        try await set(FerryInterface.ManagerProperty.speedLimit, .uint64(bytesPerSecond ?? 0))
    }

    /// Whether a batch's end posts a desktop notification.
    public func setNotificationsEnabled(_ enabled: Bool) async throws {
        try await set(FerryInterface.ManagerProperty.notificationsEnabled, .boolean(enabled))
    }

    private func set(_ property: BusProperty, _ value: DBusValue) async throws {
        try await mapped { try await connected().setManagerProperty(property.name, value) }
    }

    /// Every session and its transfers, oldest first (one `GetManagedObjects`, so each
    /// session's count of active transfers agrees with its tasks; or one call per object
    /// when that is more than the bus carries): for a window that shows
    /// every transfer, and to find sessions left behind (an app's ephemeral session stays
    /// until it is closed or the service exits). A session closed without cancelling
    /// stays listed until its transfers have ended, and the identifier may then be
    /// listed twice: the later one is the open session. A sandboxed app sees its own
    /// sessions only.
    public func sessions() async throws -> [SessionSummary] {
        let objects = try await mapped { try await connected().managedObjects() }
        var tasks: [String: [FerryTaskSnapshot]] = [:]
        for t in objects.transfers { tasks[t.session, default: []].append(FerryTaskSnapshot(t)) }
        return objects.sessions.map { s in
            let c = FerrySession.Configuration(identifier: s.identifier, stored: s.configuration)
            return SessionSummary(identifier: s.identifier, isPersistent: c.isPersistent, applicationID: c.applicationID,
                                  activeTransfers: Int(s.activeTransfers), tasks: tasks[s.path] ?? [])
        }
    }

    /// Closes the session `identifier` (`Session.Close`; the open one, when a closing one
    /// shares the identifier): with `cancellingTasks` its
    /// unfinished transfers are cancelled and it goes at once; without, it takes no new
    /// transfers and goes once its transfers have ended. Throws `noSuchSession` when
    /// there is none of that identifier (or none this app may see).
    public func closeSession(_ identifier: String, cancellingTasks: Bool = false) async throws {
        try await mapped {
            let client = try connected()
            guard let s = try await client.sessionInfos().session(identifier: identifier) else {
                throw FerryError.noSuchSession("no session '\(identifier)'")
            }
            try await FerryBusClient.BusSession(client: client, path: s.path).close(cancelTransfers: cancellingTasks)
        }
    }

    /// Pauses every queued, waiting or running transfer of every session.
    public func suspendAll() async throws { try await mapped { try await connected().pauseAll() } }
    /// Resumes every paused or failed transfer of every session.
    public func resumeAll() async throws { try await mapped { try await connected().resumeAll() } }
    /// Cancels every transfer that has not ended, in every session.
    public func cancelAll() async throws { try await mapped { try await connected().cancelAll() } }

    /// The batches that end from now on, one element each, for as long as the stream is
    /// iterated (it keeps this manager meanwhile; ending the iteration, or dropping the
    /// stream, ends the subscription). Returns once subscribed: a batch that ends after
    /// this returns is not missed. A restart of the service does not end the stream;
    /// the next batch comes as usual.
    public func batches() async throws -> AsyncStream<Batch> {
        let bus = try connected().bus
        let (stream, continuation) = AsyncStream.makeStream(of: Batch.self, bufferingPolicy: .unbounded)
        let rule = MatchRule(FerryInterface.ManagerSignal.allFinished, path: BusClient.managerPath)
        let subscription = try await mapped {
            try await bus.subscribe(rule) { m in
                guard let a = try? m.arguments(), a.count == 3, let s = a[0].uint32, let f = a[1].uint32,
                      let c = a[2].uint32 else { return }
                continuation.yield(Batch(succeeded: Int(s), failed: Int(f), cancelled: Int(c)))
            }
        }
        continuation.onTermination = { _ in
            bus.unsubscribe(subscription)
            withExtendedLifetime(self) {} // the manager (and its bus) lasts as long as the stream
        }
        return stream
    }
}
