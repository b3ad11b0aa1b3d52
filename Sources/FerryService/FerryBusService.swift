import DBus
import Dispatch
import FerryCore
import Logging
import FerryInterface

/// Puts the core on the bus: exports the manager, a session object per session
/// and a transfer object per transfer, keeps their properties current and sends
/// the contract's signals.
///
/// Threading: method handlers run on the bus queue and hand the work to the
/// core's queue; the core's events arrive on the core's queue and each becomes one
/// hop to the bus queue. Neither queue waits for the other: property writes, too,
/// are checked on the core's queue and answered from there.
///
/// `@unchecked Sendable`: the fields are set in `init` and not changed after.
public final class FerryBusService: @unchecked Sendable {
    public let bus: BusConnection
    public let core: TransferCoordinator
    let version: String
    let defaultDirectory: String
    let logger: Logger
    private(set) var specs: (manager: InterfaceSpec, session: InterfaceSpec, transfer: InterfaceSpec, group: InterfaceSpec)!
    /// The interfaces of every transfer object: one array all of them share (a literal per
    /// object cost 96 bytes each, a megabyte for ten thousand transfers).
    private var transferInterfaces: [InterfaceSpec] = []
    private(set) var waker: ApplicationWaker!
    /// The batch's desktop notification; nil without a notifier.
    private var notifications: BatchNotifications?
    /// The batch as one job in the desktop shell's job view, where it has one.
    private var shellJob: ShellJobView!
    /// Caps on sessions and transfers; set before `start`.
    public var limits = ClientLimits()
    /// The most one `PendingEventsAfter` reply holds (ferryd's testing knob
    /// `FERRY_PENDING_PAGE_BYTES` makes it small). Set before `start`.
    public var pendingEventsPageBytes = Limits.pendingEventsPageBytes
    /// Identifies callers and keeps sandboxed ones to their own objects.
    let callers: CallerRegistry
    /// The connections of each session, for `on-client-exit`.
    private(set) var sessionClients: SessionClients!
    /// `Download` calls and calls on transfers on their way to the core, in groups.
    let pipelinedCalls = PipelinedCalls()
    /// The bus work of the core's events delivered so far in this round (core queue
    /// only), handed to the bus queue in one hop when the round ends.
    private var busWork: [@Sendable () -> Void] = []
    /// Each live session's signal audience (core queue only), shared by its objects.
    private var audiences: [SessionID: SessionAudience] = [:]
    /// The watchers alone: the manager's signals about private sessions only.
    private(set) lazy var watcherAudience = WatcherAudience(registry: callers.signalRecipients)

    /// - Parameter notifier: shows the desktop notification of each batch (nil: none).
    public init(bus: BusConnection, core: TransferCoordinator, version: String, defaultDirectory: String,
                notifier: Notifier? = nil, logger: Logger = Logger(label: "ferry.service")) {
        self.bus = bus
        self.core = core
        self.version = version
        self.defaultDirectory = defaultDirectory
        self.logger = logger
        callers = CallerRegistry(bus: bus, logger: logger)
        specs = (managerInterface(), sessionInterface(), transferInterface(), groupInterface())
        transferInterfaces = [specs.transfer]
        waker = ApplicationWaker(bus: bus, core: core, logger: logger)
        sessionClients = SessionClients(bus: bus, core: core, logger: logger)
        notifications = notifier.map { BatchNotifications(core: core, bus: bus, notifier: $0, logger: logger) }
        shellJob = ShellJobView(core: core, bus: bus, logger: logger)
    }

    /// Exports the manager and every existing object, then takes the bus name.
    /// Throws when another ferryd owns the name.
    public func start() async throws {
        bus.setCallerGate(callers)
        try await callers.watchDepartures()
        try await sessionClients.watchDepartures()
        core.queue.sync {
            core.subscribe { [weak self] event in self?.handle(event) }
            core.subscribeToRoundEnds { [weak self] in self?.handOnBusWork() }
            let m = core.manager
            let manager = ExportedObject(path: FerryInterface.managerPath, interfaces: [specs.manager],
                                         initialValues: [FerryInterface.managerInterface: PropertyMapping.manager(m, version: version)],
                                         coalesceChanges: true) // counts change with every transfer
            bus.export(manager)
            bus.addObjectManager(at: FerryInterface.managerPath)
            configureBusSafety()
            // Restored objects: exported before the name is ours, so unannounced.
            for id in core.sessionIDs {
                if let s = core.session(id) { bus.export(sessionObject(s), announce: false) }
            }
            for id in (try? core.transferIDs()) ?? [] {
                if let t = core.transfer(id) { bus.export(transferObject(t), announce: false) }
            }
            for id in core.groupIDs {
                if let g = core.group(id) { bus.export(groupObject(g), announce: false) }
            }
        }
        let reply = try await bus.requestName(FerryInterface.busName)
        guard reply == .primaryOwner || reply == .alreadyOwner else {
            throw BusError(name: StandardErrors.failed, message: "\(FerryInterface.busName) is already owned by another ferryd on this bus")
        }
        logger.info("serving \(FerryInterface.busName) as \(bus.uniqueName)")
    }

    // MARK: Running handlers on the core

    /// Runs `body` on the core's queue and answers the invocation with its result
    /// or with the named error it threw.
    func run(_ inv: MethodInvocation, _ body: @escaping (TransferCoordinator) throws -> [DBusValue]) {
        pipelinedCalls.close() // runs after the grouped calls sent before it
        // Handed over whole: from here on only the core's queue runs it, once.
        nonisolated(unsafe) let body = body
        core.queue.async { [self] in answer(inv, Result { try body(core) }) }
    }

    /// Answers `inv` with the values, or with the named error (logged at debug level).
    func answer(_ inv: MethodInvocation, _ result: Result<[DBusValue], Error>) {
        switch result {
        case .success(let values):
            inv.reply(values)
        case .failure(let error):
            let e = Self.busError(error)
            logger.debug("\(inv.interface).\(inv.member) on \(inv.path) refused: \(e.name): \(e.message)")
            inv.fail(e)
        }
    }

    func runOnSession(_ inv: MethodInvocation, _ body: @escaping (TransferCoordinator, SessionID) throws -> [DBusValue]) {
        guard let id = session(of: inv) else { return }
        run(inv) { core in try body(core, id) }
    }

    /// The session a call on a session object is for, its caller noted as a client of
    /// it; nil (the call answered `NoSuchSession`) for a path that is not a session's.
    func session(of inv: MethodInvocation) -> SessionID? {
        guard let id = FerryInterface.id(inPath: inv.path, kind: "session") else {
            inv.fail(Self.busError(CoreError.noSuchSession("no session at \(inv.path)")))
            return nil
        }
        waker.noteClient(inv.sender, of: id)
        if let audience = bus.object(at: inv.path)?.audience as? SessionAudience {
            callers.signalRecipients.noteClient(inv.sender, ofSession: audience.identifier)
            sessionClients.note(inv.sender, of: id) // an existing session's
        }
        return id
    }

    /// For property writes: runs `body` on the core's queue and tells `done`
    /// whether the value was accepted. The bus queue does not wait meanwhile.
    func onCore(_ done: @escaping @Sendable (BusError?) -> Void, _ body: @escaping (TransferCoordinator) throws -> Void) {
        pipelinedCalls.close()
        nonisolated(unsafe) let body = body // as in `run`: only the core's queue runs it, once
        core.queue.async { [core] in
            do {
                try body(core)
                done(nil)
            } catch {
                done(Self.busError(error))
            }
        }
    }

    func onCore(transferAt path: String, _ done: @escaping @Sendable (BusError?) -> Void,
                _ body: @escaping (TransferCoordinator, TransferID) throws -> Void) {
        guard let id = FerryInterface.id(inPath: path, kind: "transfer") else {
            return done(Self.busError(CoreError.noSuchTransfer("no transfer at \(path)")))
        }
        onCore(done) { core in try body(core, id) }
    }

    static func busError(_ error: Error) -> BusError {
        switch error {
        case let e as CoreError: return BusError(name: e.name, message: e.message)
        case let e as BusError: return e
        // The state database could not be written (full disk, quota, permissions).
        case let e as StoreError: return BusError(name: CoreError.disk("").name, message: e.message)
        default: return BusError(name: StandardErrors.failed, message: "\(error)")
        }
    }

    // MARK: Core events (on the core's queue)

    /// One core event: its bus work joins the round's (`handOnBusWork`), in order.
    func handle(_ event: CoreEvent) {
        shellJob.handle(event)
        switch event {
        case .sessionAdded(let session):
            let object = sessionObject(session)
            onBus { [bus] in bus.exportNow(object) }
        case .sessionChanged(let session):
            if let audience = audiences[session.id] {
                let isPrivate = session.configuration.privateSignals || audience.app != nil
                if audience.isPrivate != isPrivate { onBus { audience.isPrivate = isPrivate } }
            }
            update(FerryInterface.sessionPath(session.id), FerryInterface.sessionInterface,
                   PropertyMapping.session(session, defaultDirectory: defaultDirectory))
        case .sessionRemoved(let id):
            waker.forget(id)
            sessionClients.forget(id)
            removeObject(FerryInterface.sessionPath(id))
            audiences[id] = nil // its objects keep it while they are on the bus
        case .transferAdded(let transfer):
            let object = transferObject(transfer)
            onBus { [bus] in bus.exportNow(object) }
        case .transferChanged(let transfer):
            let path = FerryInterface.transferPath(transfer.id)
            onBus { [bus] in bus.object(at: path)?.setSource(TransferProperties(snapshot: transfer)) }
        case .transferRemoved(let id, _):
            removeObject(FerryInterface.transferPath(id))
        case .progress(let p):
            progress(p)
        case .resumedAtOffset(let id, let offset, let expectedTotal):
            signal(FerryInterface.transferPath(id), FerryInterface.TransferSignal.resumedAtOffset,
                   [.int64(offset), .int64(expectedTotal)])
        case .finished(let id, let location):
            signal(FerryInterface.transferPath(id), FerryInterface.TransferSignal.finished, [.string(location)])
        case .completed(let c):
            notifications?.transferCompleted(c)
            signal(FerryInterface.transferPath(c.transfer.id), FerryInterface.TransferSignal.completed,
                   [.uint64(c.serial), .string(c.errorName), .string(c.errorMessage)])
        case .sessionAllFinished(let end):
            waker.batchEnded(end)
            signal(FerryInterface.sessionPath(end.session), FerryInterface.SessionSignal.allFinished,
                   [.uint32(end.counts.succeeded), .uint32(end.counts.failed), .uint32(end.counts.cancelled)])
        case .managerChanged(let manager):
            update(FerryInterface.managerPath, FerryInterface.managerInterface, PropertyMapping.manager(manager, version: version))
        case .groupAdded(let group):
            let object = groupObject(group)
            onBus { [bus] in bus.exportNow(object) }
        case .groupChanged(let group):
            update(FerryInterface.groupPath(group.id), FerryInterface.groupInterface, PropertyMapping.group(group))
        case .groupRemoved(let id, _):
            removeObject(FerryInterface.groupPath(id))
        case .groupFinished(let group):
            update(FerryInterface.groupPath(group.id), FerryInterface.groupInterface, PropertyMapping.group(group))
            signal(FerryInterface.groupPath(group.id), FerryInterface.GroupSignal.finished,
                   [.uint32(group.succeeded), .uint32(group.failed), .uint32(group.cancelled)])
        case .allFinished(let end):
            let counts = end.counts
            logger.info("all transfers finished: \(counts.succeeded) succeeded, \(counts.failed) failed, \(counts.cancelled) cancelled")
            // Other clients hear only of the public sessions' part; a batch of private
            // sessions alone is the watchers' to hear of.
            let p = end.privateCounts
            let shown = BatchCounts(succeeded: counts.succeeded - min(p.succeeded, counts.succeeded),
                                    failed: counts.failed - min(p.failed, counts.failed),
                                    cancelled: counts.cancelled - min(p.cancelled, counts.cancelled))
            let onlyPrivate = p != BatchCounts() && shown == BatchCounts()
            let args: [DBusValue] = onlyPrivate ? [.uint32(counts.succeeded), .uint32(counts.failed), .uint32(counts.cancelled)]
                                                : [.uint32(shown.succeeded), .uint32(shown.failed), .uint32(shown.cancelled)]
            signal(FerryInterface.managerPath, FerryInterface.ManagerSignal.allFinished, args,
                   to: onlyPrivate ? watcherAudience : nil)
            notifications?.allFinished(end)
        }
    }

    /// The session's bus object (its caller set as owner first).
    private func sessionObject(_ session: SessionSnapshot) -> ExportedObject {
        callers.setOwner(of: FerryInterface.sessionPath(session.id), to: core.sessionOwner(session.id))
        // Its ActiveTransfers changes with every transfer that starts or ends: signals coalesce.
        let object = ExportedObject(path: FerryInterface.sessionPath(session.id), interfaces: [specs.session],
                                    initialValues: [FerryInterface.sessionInterface: PropertyMapping.session(session, defaultDirectory: defaultDirectory)],
                                    coalesceChanges: true)
        object.audience = audience(of: session.id)
        return object
    }

    private func transferObject(_ transfer: TransferSnapshot) -> ExportedObject {
        let path = FerryInterface.transferPath(transfer.id)
        callers.setOwner(of: path, to: core.sessionOwner(transfer.session))
        let object = ExportedObject(path: path, interfaces: transferInterfaces,
                                    source: TransferProperties(snapshot: transfer), of: FerryInterface.transferInterface)
        object.audience = audience(of: transfer.session)
        return object
    }

    /// A group's bus object, with its session's owner and signal audience.
    private func groupObject(_ group: GroupSnapshot) -> ExportedObject {
        callers.setOwner(of: FerryInterface.groupPath(group.id), to: core.sessionOwner(group.session))
        // Its counts change with every member that ends: signals coalesce, as the session's do.
        let object = ExportedObject(path: FerryInterface.groupPath(group.id), interfaces: [specs.group],
                                    initialValues: [FerryInterface.groupInterface: PropertyMapping.group(group)],
                                    coalesceChanges: true)
        object.audience = audience(of: group.session)
        return object
    }

    /// The audience of a session's objects (core queue): made when its first object is,
    /// private when the session's signals are (`private-signals`, always for a
    /// sandboxed caller's).
    private func audience(of session: SessionID) -> SessionAudience {
        if let audience = audiences[session] { return audience }
        let snapshot = core.session(session)
        let app = core.sessionOwner(session)
        let audience = SessionAudience(identifier: snapshot?.identifier ?? "", app: app,
                                       isPrivate: app != nil || snapshot?.configuration.privateSignals == true,
                                       registry: callers.signalRecipients)
        audiences[session] = audience
        return audience
    }

    /// The counts and rate as properties (no change signal) and the `Progress` signal.
    private func progress(_ p: TransferProgress) {
        let path = FerryInterface.transferPath(p.id)
        let values: [String: DBusValue] = [
            FerryInterface.TransferProperty.bytesTransferred.name: .int64(p.totalBytesWritten),
            FerryInterface.TransferProperty.bytesExpected.name: .int64(p.totalBytesExpected),
            FerryInterface.TransferProperty.rate.name: .uint64(p.rate),
            FerryInterface.TransferProperty.expectedEnd.name: .uint64(p.expectedEnd),
        ]
        let managerValues: [String: DBusValue]? = p.managerRates.map {
            [FerryInterface.ManagerProperty.downloadRate.name: .uint64($0.download),
             FerryInterface.ManagerProperty.uploadRate.name: .uint64($0.upload)]
        }
        onBus { [bus] in
            bus.object(at: path)?.setProperties(FerryInterface.transferInterface, values)
            if let managerValues {
                bus.object(at: FerryInterface.managerPath)?.setProperties(FerryInterface.managerInterface, managerValues)
            }
        }
        signal(path, FerryInterface.TransferSignal.progress,
               [.int64(p.bytesWritten), .int64(p.totalBytesWritten), .int64(p.totalBytesExpected)])
    }

    // MARK: Bus side

    /// Adds work for the bus queue to this round's, after what is there.
    private func onBus(_ work: @escaping @Sendable () -> Void) {
        busWork.append(work)
    }

    /// An object leaves the bus (with this round's work) and its owner is forgotten.
    private func removeObject(_ path: String) {
        onBus { [bus] in bus.unexportNow(path) }
        callers.forgetOwner(of: path)
    }

    /// The round of core events has ended: its bus work goes to the bus queue in one hop,
    /// in the order of the events (a batch of downloads ending wakes that queue once, not
    /// once per signal). Replies to calls are queued after it, so they follow their
    /// change's signals as before.
    private func handOnBusWork() {
        guard !busWork.isEmpty else { return }
        let work = busWork
        busWork = []
        bus.perform { for item in work { item() } }
    }

    private func update(_ path: String, _ interface: String, _ values: [String: DBusValue]) {
        onBus { [bus] in bus.object(at: path)?.setProperties(interface, values) }
    }

    /// `audience`: who hears it when not its object's audience (nil: the object's).
    private func signal(_ path: String, _ declared: BusSignal, _ args: [DBusValue], to audience: SignalAudience? = nil) {
        assert(args.map(\.signature).joined() == declared.signature, "\(declared.name)'s arguments are not its declared ones")
        onBus { [bus, logger] in
            do {
                try bus.emitSignalNow(path: path, interface: declared.interface, name: declared.name, arguments: args, to: audience)
            } catch {
                logger.error("could not emit \(declared.interface).\(declared.name) on \(path): \(error)")
            }
        }
    }
}
