import Dispatch
import FerryConcurrency
import Foundation
import Logging

/// The domain core: sessions, transfers, the scheduler and completion events, over a
/// `TransferEngine`. Knows nothing of D-Bus: the service layer calls these methods with
/// typed values and hears back through `CoreEvent`s (`subscribe`).
///
/// Every method must be called on `queue`, which owns all state; event deliveries are
/// made on it too, in order. Calls that throw change nothing.
///
/// Why more than ~12 stored properties (issue 40): the coordinator is the router between
/// them and keeps no rule of their own. Each is a collaborator given at `init`, a shared
/// tool, the records with their index, or an owned part that keeps its state private and
/// its rules in one place; what ties them is the order of a change (`mutate`), which is
/// the coordinator's job. Each says below why it stays here.
///
/// `@unchecked Sendable`: the serial `queue` is its lock. Other threads hold a reference
/// only to hand work to `queue` (`core.queue.async { core.… }`); no state is touched off it.
public final class TransferCoordinator: @unchecked Sendable {
    /// The serial queue that owns the core's state.
    public let queue: DispatchQueue
    /// Subscribers, and the events of the change under way, sent when it ends.
    var outbox = EventOutbox()

    /// Moves the bytes (given at init; every part that starts or stops an attempt uses it).
    let engine: TransferEngine
    /// Clock, folders, limits and policies (given at init; read by nearly every rule).
    let environment: CoreEnvironment
    /// Where persistent sessions, their transfers and events are kept.
    let store: TransferStore
    /// Store operations not written yet; written (in one transaction) before the next
    /// announcement, and at the end of every change; whether the last write failed.
    var journal = StoreJournal()
    /// Shared tools of every extension file (no state of their own).
    let fileManager = FileManager.default
    let logger = Logger(label: "ferry.core")

    /// The records themselves: every part is keyed by their ids, so they stay with the
    /// router that hands them to the parts.
    var sessions: [SessionID: SessionRecord] = [:]
    var transfers: [TransferID: TransferRecord] = [:]
    /// Counts, queue, claims and per-session sets, kept as transfers change.
    var index = TransferIndex()
    /// Transfers that became startable since the last scheduling round (the network
    /// policy judges them there), and whether speed limits must be shared out again.
    var schedulingDue = SchedulingDue()
    /// Due moments (start-after, retries, resource deadlines, batch settle) and the one
    /// timer for the earliest of them.
    var timeline = DueTimeline()
    /// Kept apart from `timeline` (a value without effects) as the one effect it arms.
    var wakeTimer = WakeTimer()
    /// Session and transfer ids and event serials, and what the store reserves of them.
    var numbering = IDAllocator()

    /// MaxConcurrentTransfers, SpeedLimit and NotificationsEnabled, as set and stored.
    var managerSettings = ManagerSettings()
    /// What the network allows (TransferCoordinator+Network.swift).
    var network = NetworkConditions.assumed
    /// The last connection the traffic went out through that NetworkManager named
    /// (`NetworkConditions.route`; kept while none is named), to tell a move.
    var knownRoute: String?
    /// When the system last woke from sleep (µs, `environment.now()`), 0 before: the
    /// network may take some seconds to come back (`failedJustAfterWaking`).
    var wokeAt: UInt64 = 0
    /// Power, the schedule and their rules (TransferCoordinator+Discretionary.swift).
    var discretion = DiscretionaryPolicy()
    /// Outcomes since the last manager-wide AllFinished, and when that batch settles.
    var managerBatch = ManagerBatch()
    /// What managerChanged last carried, and when the rates last went with progress.
    var publishedManager = PublishedManager()

    /// Removed transfers whose engine attempt has not reported its end yet, with the
    /// files to delete when it does (a cancelled transfer's `.part`) and, for a
    /// sandboxed application's, the area they are removed within (its session may be
    /// gone by then). Stays here: a map with no rule beyond "deleted when the attempt
    /// ends", and that deletion needs the coordinator's `removePartFiles`.
    var detachedStops: [TransferID: (paths: [String], area: SandboxArea?)] = [:]
    /// Upload sources and destination-fd files held open (against
    /// `environment.uploadSourceLimit`), and sources kept for attempts still stopping.
    var heldDescriptors = HeldDescriptors()

    /// Downloads checked and named but not added yet (`prepareDownload`).
    var prepared = PreparedDownloads()

    /// Verified downloads of the change under way waiting for their final path to be
    /// written before they move (`finishPendingMoves`), and the folders to sync.
    var pendingMoves = PendingMoves()
    /// Changes brought by engine events waiting to be stored with later ones
    /// (TransferCoordinator+GroupCommit.swift).
    var commitHold = CommitHold()

    /// The groups of `Session.DownloadGroup` (TransferCoordinator+Groups.swift).
    let groupBook = GroupBook()
    /// Downloads fetched once for several (TransferCoordinator+Dedupe.swift).
    var dedupe = DedupeBook()

    /// Started, shut down, and the nesting of `mutate` (scheduling and aggregate signals
    /// run when the outermost change ends).
    var lifecycle = CoreLifecycle()

    /// - Parameters:
    ///   - engine: moves the bytes; its events are taken after `start()`.
    ///   - environment: clock, default directory, version, retry policy, free space.
    ///   - store: keeps persistent sessions across restarts; call `restore()` before
    ///     `start()` to carry on from what it holds. In memory by default.
    ///   - queue: must be serial.
    public init(engine: TransferEngine, environment: CoreEnvironment = .init(),
                store: TransferStore = InMemoryTransferStore(),
                queue: DispatchQueue = DispatchQueue(label: "ferry.core")) {
        self.engine = engine
        self.environment = environment
        self.store = store
        self.queue = queue
    }

    /// Takes engine events (they hop onto `queue` in order, those that arrived while the
    /// queue was busy together, through a `BatchingInbox`), arms the timers of restored
    /// transfers and starts what is queued.
    public func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard lifecycle.start() else { return }
        let queue = self.queue
        let weakSelf = WeakCoordinator(self)
        // Only the first event into an empty inbox schedules a hop; the hop takes every
        // event that has arrived by then. A busy coordinator so handles a burst of events
        // (a batch of small downloads ending) as one change: one store transaction, one
        // scheduling pass and one wake-up of its queue instead of one each.
        let inbox = BatchingInbox<EngineEvent>()
        engine.setEventHandler { event in
            inbox.append(event) { queue.async { weakSelf.coordinator?.handle(inbox.drain()) } }
        }
        mutate { resumeRestoredWork() }
    }

    /// Stops timers and the engine. Transfer states stay as they are (a restart picks
    /// them up from the store); no more callbacks are made. Ephemeral sessions' transfers
    /// vanish with the daemon, and so do their partial files (unless `Pause` gave resume
    /// data that names one).
    public func shutdown() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !lifecycle.isShutDown else { return }
        // Downloads that finished in changes waiting for the group's write are moved
        // into place and completed first (`CommitHold`).
        // So do POSTs whose start waited for the store: not sent as ferryd goes.
        if commitHold.waiting || !commitHold.postStarts.isEmpty { mutate(scheduling: false) { requeueUnsentPOSTs() } }
        // What running transfers learnt but did not write yet (a small file's validators,
        // `handleResponse`) goes first, before anything that could hang on a stuck file:
        // a clean stop loses nothing.
        for id in index.running.sorted() { if let t = transfers[id] { stageTransfer(t) } }
        flushStore()
        lifecycle.shutDown()
        wakeTimer.cancel()
        // Then the engine and the dedupe copies: once they have stopped, no byte is
        // written any more (a follower's half-made copy stays a `.part`, never renamed).
        engine.shutdown()
        environment.fetchedCopier.shutdown()
        // A one-connection prefix of a download asked for several connections counts
        // after a restart only up to the bytes stored with it: its real size now, so a
        // clean stop loses none of it. Only when the current attempt's answer was taken
        // (it has reported progress): one still unheard of may have gone on several
        // connections, with holes the size would hide. Once, at the end: a scan is fine.
        for t in transfers.values where t.partIsPrefix && t.lastProgress != nil && (t.state == .running || t.stopInFlight) {
            if let size = FileSystemChecks.fileSize(t.partPath, within: confinement(of: t)) {
                t.snapshot.bytesTransferred = size
                stageTransfer(t)
            }
        }
        flushStore()
        for s in sessions.values where !s.configuration.persistent {
            for t in index.ids(session: s.id).compactMap({ transfers[$0] })
            where t.state != .completed && !t.partFileHandedOver && !t.resumeDataGiven {
                deletePartFiles(t)
            }
        }
    }

    /// Runs a change, then moves the downloads that finished in it into place (after one
    /// write of their final names), schedules, applies speed limits and announces counts
    /// once, however many transfers the change touched. What scheduling changes (transfers
    /// that start) is part of the change: stored in its one transaction and announced
    /// with its events, after them.
    /// `mayWaitForCommit`: engine events only (see `CommitHold`): when the outermost
    /// change ends within the commit window, its writes, moves and events wait for the
    /// deferred change.
    /// `scheduling`: false only for the last change of `shutdown` (nothing starts then).
    func mutate<T>(mayWaitForCommit: Bool = false, scheduling: Bool = true, _ body: () throws -> T) rethrows -> T {
        lifecycle.enterChange()
        // A change that does not wait makes the moves of changes that waited first, so it
        // never meets a download between its stored path and its move (`CommitHold`).
        if lifecycle.isOutermostChange && !mayWaitForCommit { finishPendingMoves() }
        defer {
            var waits = false
            if lifecycle.isOutermostChange {
                waits = mayWaitForCommit && changeWaitsForCommit()
                if !waits {
                    finishPendingMoves()
                    // After the moves: a group's rule may cancel a member whose move waited.
                    settleGroups()
                }
                if scheduling { schedule() }
                publishAggregates()
            }
            if lifecycle.leaveChange() {
                commitHold.waiting = waits
                if waits { armDeferredCommit() } else { deliverEvents() }
                armTimeline()
            }
        }
        return try body()
    }

    /// Runs `body` — calls of clients, one after another — as one change: one store write,
    /// one scheduling pass and one round of events for all of them, done when it returns.
    /// On `queue`.
    public func inOneChange<T>(_ body: () throws -> T) rethrows -> T {
        dispatchPrecondition(condition: .onQueue(queue))
        return try mutate(body)
    }

    func record(_ id: TransferID) throws -> TransferRecord {
        guard let record = transfers[id] else {
            throw CoreError.noSuchTransfer("there is no transfer \(id) (it was removed, or never existed)")
        }
        return record
    }

    func sessionRecord(_ id: SessionID) throws -> SessionRecord {
        guard let session = sessions[id] else {
            throw CoreError.noSuchSession("there is no session \(id) (it was closed, or never existed)")
        }
        return session
    }

    /// Transfers of one session or of all, oldest first.
    func records(in session: SessionID?) throws -> [TransferRecord] {
        guard let session else { return transfers.keys.sorted().compactMap { transfers[$0] } }
        _ = try sessionRecord(session)
        return index.ids(session: session).compactMap { transfers[$0] }
    }
}

/// Lets the engine's handler reach the coordinator without keeping it alive.
final class WeakCoordinator: @unchecked Sendable {
    // Only read on the coordinator's queue (inside queue.async); written once in init.
    weak var coordinator: TransferCoordinator?
    init(_ coordinator: TransferCoordinator) { self.coordinator = coordinator }
}
