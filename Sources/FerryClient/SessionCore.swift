import Foundation
internal import FerryInterface
internal import DBus
internal import FerryBusClient

/// The careful part of a session: attach (subscribe first, then open the session,
/// read its transfers and replay its pending events in order), deliver each event
/// once to the delegate and the task, acknowledge what was delivered, and attach
/// again when the service comes back. All event handling runs on `queue`, in the
/// order the service sent the events (`SessionCore+Events.swift`). Its state is
/// internal, not private, only so that those handlers can reach it: nothing else in
/// the module touches it.
final class SessionCore: @unchecked Sendable {
    let configuration: FerrySession.Configuration
    let delegate: FerrySessionDelegate?
    weak var session: FerrySession?
    /// Event handling and, unless the app gave a queue, delegate calls, one at a time.
    let queue = DispatchQueue(label: "ferry.session.events")
    /// Where the delegate is called.
    let delegateCalls: DelegateCalls

    let lock = NSLock()
    var bus: BusConnection?
    var subscriptions: [BusConnection.Subscription] = []
    var attachTask: Task<String, Error>?
    /// A retrying attach (`scheduleAttach`) is under way; under `lock`.
    var retrying = false
    /// Successful attaches so far (tests wait for a re-attach with it); under `lock`.
    private(set) var attachCount: Int {
        get { lock.withLock { attachments } }
        set { lock.withLock { attachments = newValue } }
    }
    var attachments = 0
    var closed = false
    /// The session object while `finishTasksAndInvalidate` waits for its tasks (as a
    /// URLSession lives until it is invalidated); under `lock`.
    var keepAlive: FerrySession?

    // Confined to `queue`.
    var sessionPath: String?
    var tasks: [String: FerryTask] = [:]
    var handedOut: Set<String> = []
    var replaying = true
    /// Bumped by each attach: a failed one resets the buffering only if it is the latest.
    var attachGeneration = 0
    var buffered: [Incoming] = []
    var lastDelivered: UInt64 = 0
    var locations: [String: String] = [:]
    /// Uploads' server answers, heard before their `Completed`.
    var responses: [String: [UInt8]] = [:]
    /// The last `Progress` total of each transfer: its bytes when it completes.
    var totals: [String: Int64] = [:]
    /// `Sha256` of downloads that had the option, heard before their `Completed`.
    var digests: [String: String] = [:]
    /// Attached (subscribed, session open, pending events replayed): a `Completed`
    /// heard while not attached stays pending in the service for the next replay.
    var attached = false
    /// Completions delivered that the app has not taken (no delegate, and the task not
    /// handed out): their events stay pending for a later run. Path → serial (the
    /// oldest of the path's, which holds its later ones back).
    var untaken: [String: UInt64] = [:]
    /// The serials of completions not taken yet: those in `untaken`, and those handed
    /// to a `FerrySessionEvents` delegate that no reader has taken. Events are
    /// acknowledged up to just below the lowest.
    var notTaken = UntakenSerials()
    /// The last serial acknowledged to the service.
    var acknowledged: UInt64 = 0
    /// `finishTasksAndInvalidate` was called: close once no task is left.
    var closeWhenTasksEnd = false

    /// A signal, as the bus queue hands it over.
    enum Incoming {
        /// One of the transfer signals (`Progress`, `ResumedAtOffset`, `Finished`, `Completed`).
        case transfer(TransferEvent)
        /// PropertiesChanged: the values (for the task's status); among them a new state,
        /// an upload's server answer, a download's digest.
        case changed(path: String, state: String?, response: [UInt8]?, sha256: String? = nil, properties: [String: DBusValue] = [:])
        case added(path: String, [String: DBusValue])
        case removed(path: String)
        case allFinished(path: String)
        case serviceBack
        /// The service left the bus: completions wait for the next attach's replay.
        case serviceGone
    }

    init(configuration: FerrySession.Configuration, delegate: FerrySessionDelegate?, delegateQueue: OperationQueue? = nil) {
        self.configuration = configuration
        self.delegate = delegate
        delegateCalls = DelegateCalls(operationQueue: delegateQueue)
        (delegate as? FerrySessionEvents)?.connect { [weak self] serial in
            guard let self else { return }
            self.queue.async {
                self.notTaken.take(serial)
                self.acknowledgeTaken()
            }
        }
    }

    // MARK: Attach

    /// Attaches once (again after the service restarted); returns the session's path.
    @discardableResult
    func attach() async throws -> String {
        let task: Task<String, Error> = lock.withLock {
            if let attachTask { return attachTask }
            let t = Task { try await self.doAttach() }
            attachTask = t
            return t
        }
        do {
            return try await task.value
        } catch {
            lock.withLock { if attachTask == task { attachTask = nil } }
            throw FerryError.wrap(error)
        }
    }

    func connection() throws -> BusConnection {
        try lock.withLock {
            if closed { throw FerryError.detached("the session was detached or invalidated; make it again to go on") }
            if let bus { return bus }
            let b: BusConnection
            do {
                b = try configuration.busAddress.map { try BusConnection(address: $0) } ?? BusConnection.session()
            } catch let e as BusError {
                throw FerryError.serviceUnavailable("cannot connect to the bus: \(e.message)")
            }
            bus = b
            return b
        }
    }

    func subscribe(_ bus: BusConnection) async throws {
        let needed = lock.withLock { subscriptions.isEmpty }
        guard needed else { return }
        let transfers = String(BusClient.transferPathPrefix.dropLast())
        let service = BusClient.busName
        // All or none: a refused rule (quota, timeout) leaves no other behind, so the
        // next attach does not hear each signal twice.
        let rules: [(MatchRule, @Sendable (BusMessage) -> Void)] = [
            (MatchRule(sender: service, pathNamespace: transfers, interface: BusClient.transferInterface), { [weak self] m in
                guard let path = m.path, let args = try? m.arguments(),
                      let event = TransferEvent(transferSignal: m, path: path, args: args) else { return }
                self?.receive(.transfer(event))
            }),
            (MatchRule(sender: service, pathNamespace: transfers, interface: StandardNames.properties, member: "PropertiesChanged"), { [weak self] m in
                guard let path = m.path, let args = try? m.arguments(), args.count == 3, let changed = args[1].vardict else { return }
                let state = changed[FerryInterface.TransferProperty.state.name]?.string
                let response = changed[FerryInterface.TransferProperty.response.name]?.bytes
                let sha256 = changed[FerryInterface.TransferProperty.sha256.name]?.string
                self?.receive(.changed(path: path, state: state, response: response, sha256: sha256, properties: changed))
            }),
            (MatchRule(sender: service, path: BusClient.managerPath, interface: StandardNames.objectManager), { [weak self] m in
                guard let args = try? m.arguments(), let path = args.first?.string, path.hasPrefix(BusClient.transferPathPrefix) else { return }
                if m.member == "InterfacesAdded", args.count == 2,
                   let props = args[1].dictionaryEntries?.first(where: { $0.0 == BusClient.transferInterface })?.1.vardict {
                    self?.receive(.added(path: path, props))
                } else if m.member == "InterfacesRemoved" {
                    self?.receive(.removed(path: path))
                }
            }),
            (MatchRule(FerryInterface.SessionSignal.allFinished, pathNamespace: FerryInterface.managerPath + "/session"), { [weak self] m in
                guard let path = m.path else { return }
                self?.receive(.allFinished(path: path))
            }),
            (MatchRule(sender: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                       member: "NameOwnerChanged", arg0: service), { [weak self] m in
                guard let args = try? m.arguments(), args.count == 3, let owner = args[2].string else { return }
                self?.receive(owner.isEmpty ? .serviceGone : .serviceBack)
            }),
        ]
        let subs = try await bus.subscribe(all: rules)
        lock.withLock { subscriptions = subs }
    }

    func doAttach() async throws -> String {
        let bus = try connection()
        let generation: Int = queue.sync {
            replaying = true
            attached = false
            attachGeneration += 1
            return attachGeneration
        }
        let client = BusClient(bus: bus)
        let session: FerryBusClient.BusSession
        let objects: ManagedObjects
        let pending: [CompletionEvent]
        do {
            try await subscribe(bus)
            session = try await client.openSession(configuration.identifier, configuration: configuration.busValue)
            objects = try await client.listing()
            pending = try await session.pendingEvents()
        } catch {
            // Not attached: signals go on live (progress, states), but no completion is
            // taken until an attach replays it (a later attach, if one began, buffers on).
            queue.sync {
                guard generation == attachGeneration else { return }
                replaying = false
                let waiting = buffered
                buffered = []
                for i in waiting { process(i) }
            }
            throw error
        }
        queue.sync {
            if let earlier = sessionPath, earlier != session.path {
                // A new session under the same identifier (an ephemeral one vanished with
                // the service): its events count from 1 again.
                lastDelivered = 0
                acknowledged = 0
                untaken = [:]
                notTaken.removeAll()
            }
            sessionPath = session.path
            let listed = Set(objects.transfers.lazy.filter { $0.session == session.path }.map(\.path))
            for (path, t) in tasks where !listed.contains(path) {
                forget(path)
                t.complete(.failure(.noSuchTransfer("the transfer is gone from the service (an ephemeral session's transfers "
                    + "end with ferryd, or it was removed)")))
            }
            let pendingPaths = Set(pending.map(\.transferPath))
            for info in objects.transfers where info.session == session.path {
                let t = task(info.path)
                t.status.replace(with: info)
                t.isUpload = info.kind == "upload"
                if t.isUpload {
                    t.source = info.destination
                    if !info.response.isEmpty { responses[info.path] = info.response }
                }
            }
            // What came while the listing was read (a transfer made, an upload's answer)
            // counts for the replay too; the items themselves are processed after it.
            for i in buffered {
                switch i {
                case .added(let path, let props): added(path, props)
                case .changed(let path, _, let response?, _, _) where tasks[path]?.isUpload == true:
                    responses[path] = response.isEmpty ? nil : response
                default: break
                }
            }
            for info in objects.transfers where info.session == session.path {
                let t = task(info.path)
                // Final, and its event was acknowledged before: its outcome is settled.
                if TransferState(rawValue: info.state)?.isFinal == true && !pendingPaths.contains(info.path) {
                    t.complete(Self.outcome(state: info.state, errorName: info.errorName, errorMessage: info.errorMessage,
                                            httpStatus: Int(info.httpStatus), location: info.destination,
                                            response: t.isUpload ? responses.removeValue(forKey: info.path) : nil,
                                            bytes: info.bytesTransferred, sha256: info.sha256))
                }
            }
            // Pending, yet delivered here before: the acknowledgement sent before the
            // service stopped did not reach it (or the app had not taken the event). What
            // the app took is acknowledged again once attached.
            let acknowledgementLost = pending.contains { $0.serial <= lastDelivered }
            var delivered = 0
            for e in pending where e.serial > lastDelivered {
                // A later event of a task that ended before (it failed, was resumed and
                // ended again while the app was away): its last run's outcome counts.
                tasks[e.transferPath]?.reopen()
                let d = e.details
                let errorName = d["error-name"]?.string ?? ""
                deliver(path: e.transferPath, serial: e.serial, state: e.kind == "finished" ? "completed" : e.kind,
                        errorName: errorName.isEmpty && e.kind == "cancelled" ? FerryInterface.ErrorName.cancelled.fullName : errorName,
                        errorMessage: d["error-message"]?.string ?? "", httpStatus: Int(d["http-status"]?.uint32 ?? 0),
                        location: d["location"]?.string ?? "", bytes: d["bytes"]?.int64, sha256: d["sha256"]?.string)
                delivered += 1
            }
            replaying = false
            attached = true
            attachCount += 1
            if acknowledgementLost { acknowledged = 0 }
            acknowledgeTaken()
            let waiting = buffered
            buffered = []
            for i in waiting { process(i) }
            let active = objects.session(path: session.path)?.activeTransfers ?? 0
            if delivered > 0, let s = self.session, let d = delegate {
                // What was kept for the session is all delivered (the URLSession meaning);
                // then, if nothing is left to run, that it is idle.
                delegateCalls.run { d.ferrySessionDidFinishEvents(forBackgroundSession: s) }
                if active == 0 { delegateCalls.run { d.ferrySessionDidBecomeIdle(s) } }
            }
        }
        return session.path
    }

    /// Attaches again (after the service came back, or when a completion was heard
    /// while not attached), trying again after 0.25 s, 0.5 s, … every 30 s at most,
    /// until it is attached or the session is closed. One such loop at a time.
    func scheduleAttach() {
        let start: Bool = lock.withLock {
            guard !retrying, !closed else { return false }
            retrying = true
            return true
        }
        guard start else { return }
        Task {
            var delay: UInt64 = 250_000_000
            while (try? await attach()) == nil && !lock.withLock({ closed }) {
                try? await Task.sleep(nanoseconds: delay)
                delay = min(delay * 2, 30_000_000_000)
            }
            lock.withLock { retrying = false }
        }
    }

    // MARK: Calls

    /// A method call on the service after attaching; bus errors become `FerryError`.
    func call(_ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await attach()
        let bus = try connection()
        return try await mapped {
            try await bus.call(destination: BusClient.busName, path: path, interface: interface, method: method, arguments: args)
        }
    }

    /// Returns once every signal heard so far was handled: after a call, what the
    /// service said before answering it is in the tasks' status.
    func settle() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in queue.async { c.resume() } }
    }

    /// A declared method of the service's on the object at `path`, after attaching.
    func call(_ method: BusMethod, on path: String, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await call(path, method.interface, method.name, args)
    }

    /// A method of this session's object, after attaching.
    func callSession(_ method: BusMethod, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        let path = try await attach()
        return try await call(method, on: path, args)
    }

    /// Leaves the bus. The tasks not ended yet end with an error (the transfers go on in
    /// the service, but nothing here follows them any more): no one waits forever.
    func close() {
        let (b, subs, wasClosed, kept) = lock.withLock {
            () -> (BusConnection?, [BusConnection.Subscription], Bool, FerrySession?) in
            let was = closed
            closed = true
            defer { bus = nil; subscriptions = []; keepAlive = nil }
            return (bus, subscriptions, was, keepAlive)
        }
        // Let go of the session outside the lock: its deinit closes again (and locks).
        withExtendedLifetime(kept) {}
        for s in subs { b?.unsubscribe(s) }
        b?.close()
        guard !wasClosed else { return }
        (delegate as? FerrySessionEvents)?.sessionEnded()
        queue.async { [self] in
            for t in tasks.values where !t.isCompleted {
                t.complete(.failure(.detached("the session was detached or invalidated before the transfer ended; "
                    + "it goes on in the service: open the session again to follow it")))
            }
        }
    }

    /// `finishTasksAndInvalidate`: keeps following (and keeps the session alive) until
    /// every task known here has ended, then closes.
    func closeOnceTasksEnd(keeping session: FerrySession) {
        lock.withLock { keepAlive = session }
        queue.async { [self] in
            closeWhenTasksEnd = true
            closeIfTasksEnded()
        }
    }

    /// On `queue`: closes, off the queue, once every task known here has ended.
    func closeIfTasksEnded() {
        guard !tasks.values.contains(where: { !$0.isCompleted }) else { return }
        DispatchQueue.global().async { self.close() }
    }
}
