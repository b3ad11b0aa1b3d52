import DBus
import Dispatch
import FerryCore
import Logging

/// Puts the core on the bus: exports the manager, a session object per session
/// and a transfer object per transfer, keeps their properties current and sends
/// the contract's signals.
///
/// Threading: method handlers run on the bus queue and hand the work to the
/// core's queue; the core's observer callbacks run on the core's queue and hand
/// bus work to the bus queue. Neither queue waits for the other: property writes,
/// too, are checked on the core's queue and answered from there.
///
/// `@unchecked Sendable`: the fields are set in `init` and not changed after,
/// except `nextManagerRateUpdate`, which only the core's queue touches (it is read
/// and written in an observer callback).
public final class FerryBusService: CoreObserver, @unchecked Sendable {
    public let bus: BusConnection
    public let core: TransferCoordinator
    let version: String
    let defaultDirectory: String
    let logger: Logger
    private var specs: (manager: InterfaceSpec, session: InterfaceSpec, transfer: InterfaceSpec)!
    private(set) var waker: ApplicationWaker!
    /// When the manager's DownloadRate may next be refreshed (core queue only).
    private var nextManagerRateUpdate: UInt64 = 0
    /// The batch's desktop notification; nil without a notifier.
    private var notifications: BatchNotifications?
    /// Identifies callers and keeps sandboxed ones to their own objects.
    let callers: CallerRegistry

    /// - Parameter notifier: shows the desktop notification of each batch (nil: none).
    public init(bus: BusConnection, core: TransferCoordinator, version: String, defaultDirectory: String,
                notifier: Notifier? = nil, logger: Logger = Logger(label: "ferry.service")) {
        self.bus = bus
        self.core = core
        self.version = version
        self.defaultDirectory = defaultDirectory
        self.logger = logger
        callers = CallerRegistry(bus: bus, logger: logger)
        specs = (managerInterface(), sessionInterface(), transferInterface())
        waker = ApplicationWaker(bus: bus, core: core, logger: logger)
        notifications = notifier.map { BatchNotifications(core: core, bus: bus, notifier: $0, logger: logger) }
    }

    /// Exports the manager and every existing object, then takes the bus name.
    /// Throws when another ferryd owns the name.
    public func start() async throws {
        bus.setCallerGate(callers)
        try await callers.watchDepartures()
        core.queue.sync {
            core.observer = self
            let m = core.manager
            let manager = ExportedObject(path: FerryBusNames.managerPath, interfaces: [specs.manager],
                                         initialValues: [FerryBusNames.managerInterface: PropertyMapping.manager(m, version: version)])
            bus.export(manager)
            bus.addObjectManager(at: FerryBusNames.managerPath)
            for id in core.sessionIDs {
                if let s = core.session(id) { sessionAdded(s) }
            }
            for id in (try? core.transferIDs()) ?? [] {
                if let t = core.transfer(id) { transferAdded(t) }
            }
        }
        let reply = try await bus.requestName(FerryBusNames.busName)
        guard reply == .primaryOwner || reply == .alreadyOwner else {
            throw BusError(name: StandardErrors.failed, message: "\(FerryBusNames.busName) is already owned by another ferryd on this bus")
        }
        logger.info("serving \(FerryBusNames.busName) as \(bus.uniqueName)")
    }

    // MARK: Running handlers on the core

    /// Runs `body` on the core's queue and answers the invocation with its result
    /// or with the named error it threw.
    func run(_ inv: MethodInvocation, _ body: @escaping (TransferCoordinator) throws -> [DBusValue]) {
        core.queue.async { [core, logger] in
            do {
                inv.reply(try body(core))
            } catch {
                let e = Self.busError(error)
                logger.debug("\(inv.interface).\(inv.member) on \(inv.path) refused: \(e.name): \(e.message)")
                inv.fail(e)
            }
        }
    }

    func runOnSession(_ inv: MethodInvocation, _ body: @escaping (TransferCoordinator, SessionID) throws -> [DBusValue]) {
        guard let id = FerryBusNames.id(inPath: inv.path, kind: "session") else {
            return inv.fail(Self.busError(FerryError.noSuchSession("no session at \(inv.path)")))
        }
        waker.noteClient(inv.sender, of: id)
        run(inv) { core in try body(core, id) }
    }

    func runOnTransfer(_ inv: MethodInvocation, _ body: @escaping (TransferCoordinator, TransferID) throws -> [DBusValue]) {
        guard let id = FerryBusNames.id(inPath: inv.path, kind: "transfer") else {
            return inv.fail(Self.busError(FerryError.noSuchTransfer("no transfer at \(inv.path)")))
        }
        run(inv) { core in try body(core, id) }
    }

    /// For property writes: runs `body` on the core's queue and tells `done`
    /// whether the value was accepted. The bus queue does not wait meanwhile.
    func onCore(_ done: @escaping @Sendable (BusError?) -> Void, _ body: @escaping (TransferCoordinator) throws -> Void) {
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
        guard let id = FerryBusNames.id(inPath: path, kind: "transfer") else {
            return done(Self.busError(FerryError.noSuchTransfer("no transfer at \(path)")))
        }
        onCore(done) { core in try body(core, id) }
    }

    static func busError(_ error: Error) -> BusError {
        switch error {
        case let e as FerryError: return BusError(name: e.name, message: e.message)
        case let e as BusError: return e
        case is UploadsNotSupported:
            return BusError(name: "org.freedesktop.DBus.Error.NotSupported", message: "uploads are not supported by this version of ferryd yet")
        default: return BusError(name: StandardErrors.failed, message: "\(error)")
        }
    }

    // MARK: CoreObserver (on the core's queue)

    public func sessionAdded(_ session: SessionSnapshot) {
        callers.setOwner(of: FerryBusNames.sessionPath(session.id), to: core.sessionOwner(session.id))
        let object = ExportedObject(path: FerryBusNames.sessionPath(session.id), interfaces: [specs.session],
                                    initialValues: [FerryBusNames.sessionInterface: PropertyMapping.session(session, defaultDirectory: defaultDirectory)])
        bus.export(object)
    }

    public func sessionChanged(_ session: SessionSnapshot) {
        let values = PropertyMapping.session(session, defaultDirectory: defaultDirectory)
        update(FerryBusNames.sessionPath(session.id), FerryBusNames.sessionInterface, values)
    }

    public func sessionRemoved(_ id: SessionID) {
        waker.forget(id)
        bus.unexport(FerryBusNames.sessionPath(id))
        callers.forgetOwner(of: FerryBusNames.sessionPath(id))
    }

    public func transferAdded(_ transfer: TransferSnapshot) {
        callers.setOwner(of: FerryBusNames.transferPath(transfer.id), to: core.sessionOwner(transfer.session))
        let object = ExportedObject(path: FerryBusNames.transferPath(transfer.id), interfaces: [specs.transfer],
                                    initialValues: [FerryBusNames.transferInterface: PropertyMapping.transfer(transfer)])
        bus.export(object)
    }

    public func transferChanged(_ transfer: TransferSnapshot) {
        update(FerryBusNames.transferPath(transfer.id), FerryBusNames.transferInterface, PropertyMapping.transfer(transfer))
    }

    public func transferRemoved(_ id: TransferID, session: SessionID) {
        bus.unexport(FerryBusNames.transferPath(id))
        callers.forgetOwner(of: FerryBusNames.transferPath(id))
    }

    public func transferProgress(_ id: TransferID, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpected: Int64) {
        let path = FerryBusNames.transferPath(id)
        var values: [String: DBusValue] = [
            "BytesTransferred": .int64(totalBytesWritten),
            "BytesExpected": .int64(totalBytesExpected),
        ]
        if let t = core.transfer(id) {
            values["Rate"] = .uint64(t.rate)
            values["ExpectedEnd"] = .uint64(t.expectedEnd)
        }
        // The overall rates take a pass over every transfer: at most once a second.
        var managerValues: [String: DBusValue]? = nil
        let now = DispatchTime.now().uptimeNanoseconds
        if now >= nextManagerRateUpdate {
            nextManagerRateUpdate = now + 1_000_000_000
            let m = core.manager
            managerValues = ["DownloadRate": .uint64(m.downloadRate), "UploadRate": .uint64(m.uploadRate)]
        }
        bus.perform { [bus, values, managerValues] in
            bus.object(at: path)?.setProperties(FerryBusNames.transferInterface, values)
            if let managerValues {
                bus.object(at: FerryBusNames.managerPath)?.setProperties(FerryBusNames.managerInterface, managerValues)
            }
        }
        signal(path, FerryBusNames.transferInterface, "Progress",
               [.int64(bytesWritten), .int64(totalBytesWritten), .int64(totalBytesExpected)])
    }

    public func transferResumedAtOffset(_ id: TransferID, offset: Int64, expectedTotal: Int64) {
        signal(FerryBusNames.transferPath(id), FerryBusNames.transferInterface, "ResumedAtOffset",
               [.int64(offset), .int64(expectedTotal)])
    }

    public func transferFinished(_ id: TransferID, location: String) {
        signal(FerryBusNames.transferPath(id), FerryBusNames.transferInterface, "Finished", [.string(location)])
    }

    public func transferCompleted(_ id: TransferID, serial: UInt64, errorName: String, errorMessage: String) {
        notifications?.transferCompleted(id)
        signal(FerryBusNames.transferPath(id), FerryBusNames.transferInterface, "Completed",
               [.uint64(serial), .string(errorName), .string(errorMessage)])
    }

    public func sessionAllFinished(_ session: SessionID, counts: BatchCounts) {
        waker.batchEnded(session)
        signal(FerryBusNames.sessionPath(session), FerryBusNames.sessionInterface, "AllFinished",
               [.uint32(counts.succeeded), .uint32(counts.failed), .uint32(counts.cancelled)])
    }

    public func managerChanged(_ manager: ManagerSnapshot) {
        update(FerryBusNames.managerPath, FerryBusNames.managerInterface, PropertyMapping.manager(manager, version: version))
    }

    public func allFinished(_ counts: BatchCounts) {
        logger.info("all transfers finished: \(counts.succeeded) succeeded, \(counts.failed) failed, \(counts.cancelled) cancelled")
        signal(FerryBusNames.managerPath, FerryBusNames.managerInterface, "AllFinished",
               [.uint32(counts.succeeded), .uint32(counts.failed), .uint32(counts.cancelled)])
        notifications?.allFinished()
    }

    // MARK: Bus side

    private func update(_ path: String, _ interface: String, _ values: [String: DBusValue]) {
        bus.perform { [bus] in bus.object(at: path)?.setProperties(interface, values) }
    }

    private func signal(_ path: String, _ interface: String, _ name: String, _ args: [DBusValue]) {
        do {
            try bus.emitSignal(path: path, interface: interface, name: name, arguments: args)
        } catch {
            logger.error("could not emit \(interface).\(name) on \(path): \(error)")
        }
    }
}
