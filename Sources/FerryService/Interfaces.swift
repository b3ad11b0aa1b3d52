import DBus
import FerryCore
import FerryInterface
import Foundation

/// The three Ferry interfaces, as the contract gives them. Handlers are thin: they
/// unpack arguments, run the core on its queue, and reply.
extension FerryBusService {
    func managerInterface() -> InterfaceSpec {
        typealias M = FerryInterface.ManagerMethod
        return InterfaceSpec(
            name: FerryInterface.managerInterface,
            methods: Self.methodSpecs(M.all, handlers: [
                M.openSession: { [unowned self] inv, args in
                    run(inv) { core in
                        let identifier = args.string(M.identifier)
                        let update = try OptionParsing.configuration(try OptionParsing.vardict(args.value(M.configuration)))
                        try self.checkSessionLimit(core, identifier: identifier, owner: inv.sandboxAppID)
                        try self.confine(inv, configuration: update)
                        // Before the session exists: its first signals (InterfacesAdded) reach
                        // its opener when they are private.
                        if inv.sandboxAppID == nil {
                            self.callers.signalRecipients.noteClient(inv.sender, ofSession: identifier)
                        }
                        let (id, _) = try core.openSession(identifier: identifier, configuration: update, owner: inv.sandboxAppID)
                        self.waker.noteClient(inv.sender, of: id)
                        // Its client is back: what on-client-exit paused goes on.
                        self.sessionClients.note(inv.sender, of: id)
                        core.clientReturned(session: id)
                        return [.objectPath(FerryInterface.sessionPath(id))]
                    }
                },
                M.listSessions: { [unowned self] inv, _ in
                    run(inv) { core in [.pathArray(self.visibleSessions(inv, core).map(FerryInterface.sessionPath))] }
                },
                M.listTransfers: { [unowned self] inv, _ in
                    run(inv) { core in [.pathArray(try self.visibleTransfers(inv, core).map(FerryInterface.transferPath))] }
                },
                M.listTransferProperties: { [unowned self] inv, args in listTransferProperties(inv, args) },
                M.watch: { [unowned self] inv, _ in watch(inv, true) },
                M.unwatch: { [unowned self] inv, _ in watch(inv, false) },
                M.pauseAll: { [unowned self] inv, _ in
                    run(inv) { core in try self.acrossVisibleSessions(inv, core) { try core.pauseAll(session: $0) }; return [] }
                },
                M.resumeAll: { [unowned self] inv, _ in
                    run(inv) { core in try self.acrossVisibleSessions(inv, core) { try core.resumeAll(session: $0) }; return [] }
                },
                M.cancelAll: { [unowned self] inv, _ in
                    run(inv) { core in try self.acrossVisibleSessions(inv, core) { try core.cancelAll(session: $0) }; return [] }
                },
            ]),
            properties: Self.propertySpecs(FerryInterface.ManagerProperty.all, setters: [
                FerryInterface.ManagerProperty.maxConcurrentTransfers: { [unowned self] v, _, done in
                    onCore(done) { core in try core.setMaxConcurrentTransfers(v.uint32 ?? 0) }
                },
                FerryInterface.ManagerProperty.speedLimit: { [unowned self] v, _, done in
                    onCore(done) { core in core.setSpeedLimit(v.uint64 ?? 0) }
                },
                FerryInterface.ManagerProperty.notificationsEnabled: { [unowned self] v, _, done in
                    onCore(done) { core in core.setNotificationsEnabled(v.bool ?? true) }
                },
                FerryInterface.ManagerProperty.schedule: { [unowned self] v, _, done in
                    onCore(done) { core in try core.setSchedule(try OptionParsing.schedule(v)) }
                },
            ]),
            signals: Self.signalSpecs(FerryInterface.ManagerSignal.all))
    }

    func sessionInterface() -> InterfaceSpec {
        typealias M = FerryInterface.SessionMethod
        typealias Argument = FerryInterface.Argument
        return InterfaceSpec(
            name: FerryInterface.sessionInterface,
            methods: Self.methodSpecs(M.all, handlers: [
                M.download: { [unowned self] inv, _ in download(inv) },
                M.upload: { [unowned self] inv, args in
                    runOnSession(inv) { core, session in
                        var dict = try OptionParsing.vardict(args.value(Argument.options))
                        let sourceFD = try self.sourceDescriptor(dict.removeValue(forKey: FerryInterface.UploadOption.sourceFD.name))
                        // The core owns the fd from here (it closes it on refusal); the
                        // invocation must not close it.
                        if let sourceFD { inv.keepUnixFD(sourceFD) }
                        var handedOver = false
                        do {
                            let options = try OptionParsing.upload(dict)
                            let file = args.string(M.file)
                            if sourceFD == nil { try Limits.checkPath(file, what: "the file to upload") }
                            try self.checkTransferLimit(core, session: session)
                            if sourceFD == nil { try self.confineUpload(inv, file: file) }
                            try self.confineResponseDestination(inv, options.responseDestination)
                            handedOver = true
                            let id = try core.upload(session: session, url: args.string(Argument.url), file: file,
                                                     options: options, sourceFD: sourceFD)
                            return [.objectPath(FerryInterface.transferPath(id))]
                        } catch {
                            // Refused before the core took the descriptor.
                            if let sourceFD, !handedOver { close(sourceFD) }
                            throw error
                        }
                    }
                },
                M.downloadGroup: { [unowned self] inv, args in downloadGroup(inv, args) },
                M.resumeDownload: { [unowned self] inv, args in
                    runOnSession(inv) { core, session in
                        var dict = try OptionParsing.vardict(args.value(Argument.options))
                        // A destination-fd download resumed into a new descriptor (the
                        // old one is lost when ferryd restarts); the descriptor owns the fd.
                        let descriptor = try self.destinationDescriptor(dict.removeValue(forKey: FerryInterface.DownloadOption.destinationFD.name))
                        if let descriptor { inv.keepUnixFD(descriptor.fd) }
                        let options = try OptionParsing.download(dict)
                        try self.checkTransferLimit(core, session: session)
                        let resumeData = args.bytes(M.resumeData)
                        try self.confineResume(inv, resumeData: resumeData)
                        let id = try core.resumeDownload(session: session, resumeData: resumeData, options: options, into: descriptor)
                        return [.objectPath(FerryInterface.transferPath(id))]
                    }
                },
                M.listTransfers: { [unowned self] inv, _ in
                    runOnSession(inv) { core, session in
                        [.pathArray(try core.transferIDs(session: session).map(FerryInterface.transferPath))]
                    }
                },
                M.pauseAll: { [unowned self] inv, _ in runOnSession(inv) { core, s in try core.pauseAll(session: s); return [] } },
                M.resumeAll: { [unowned self] inv, _ in runOnSession(inv) { core, s in try core.resumeAll(session: s); return [] } },
                M.cancelAll: { [unowned self] inv, _ in runOnSession(inv) { core, s in try core.cancelAll(session: s); return [] } },
                M.pendingEvents: { [unowned self] inv, _ in
                    runOnSession(inv) { core, session in
                        [.array(element: "(tosa{sv})", try core.pendingEvents(session: session).map(PropertyMapping.pendingEvent))]
                    }
                },
                M.pendingEventsAfter: { [unowned self] inv, args in
                    runOnSession(inv) { core, session in
                        let page = try core.pendingEvents(session: session, after: args.uint64(M.after),
                                                          maxCount: Int(args.uint32(M.limit)),
                                                          maxBytes: self.pendingEventsPageBytes)
                        return [.array(element: "(tosa{sv})", page.map(PropertyMapping.pendingEvent))]
                    }
                },
                M.acknowledgeEvents: { [unowned self] inv, args in
                    runOnSession(inv) { core, session in
                        try core.acknowledgeEvents(session: session, upTo: args.uint64(Argument.serial))
                        return []
                    }
                },
                M.close: { [unowned self] inv, args in
                    runOnSession(inv) { core, session in
                        try core.closeSession(session, cancelTransfers: args.bool(M.cancelTransfers))
                        return []
                    }
                },
            ]),
            properties: Self.propertySpecs(FerryInterface.SessionProperty.all),
            signals: Self.signalSpecs(FerryInterface.SessionSignal.all))
    }

    typealias PropertySetter = @Sendable (DBusValue, String, @escaping @Sendable (BusError?) -> Void) -> Void

    /// An interface's properties as the contract declares them (`FerryInterface`), each
    /// writable one with its setter.
    static func propertySpecs(_ declared: [BusProperty], setters: [BusProperty: PropertySetter] = [:]) -> [PropertySpec] {
        declared.map { p in
            guard p.writable else {
                var spec = PropertySpec(p.name, p.signature, emitsChange: p.emitsChange)
                spec.isConstant = p.constant
                return spec
            }
            guard let set = setters[p] else { preconditionFailure("no setter for the writable property \(p.name)") }
            var spec = PropertySpec(p.name, p.signature, access: .readwrite, objectSetter: set)
            spec.emitsChange = p.emitsChange
            return spec
        }
    }

    func transferInterface() -> InterfaceSpec {
        typealias M = FerryInterface.TransferMethod
        return InterfaceSpec(
            name: FerryInterface.transferInterface,
            methods: Self.methodSpecs(M.all, handlers: [
                M.pause: { [unowned self] inv, _ in runOnTransfer(inv) { core, id in [.bytes(try core.pause(id))] } },
                M.resume: { [unowned self] inv, _ in runOnTransfer(inv) { core, id in try core.resume(id); return [] } },
                M.cancel: { [unowned self] inv, _ in runOnTransfer(inv) { core, id in try core.cancel(id); return [] } },
                M.remove: { [unowned self] inv, _ in runOnTransfer(inv) { core, id in try core.remove(id); return [] } },
                M.setURL: { [unowned self] inv, args in
                    runOnTransfer(inv) { core, id in try core.setURL(id, url: args.string(FerryInterface.Argument.url)); return [] }
                },
            ]),
            properties: Self.propertySpecs(FerryInterface.TransferProperty.all, setters: [
                FerryInterface.TransferProperty.priority: { [unowned self] v, path, done in
                    onCore(transferAt: path, done) { core, id in try core.setPriority(id, v.int32 ?? 0) }
                },
                FerryInterface.TransferProperty.speedLimit: { [unowned self] v, path, done in
                    onCore(transferAt: path, done) { core, id in try core.setTransferSpeedLimit(id, v.uint64 ?? 0) }
                },
            ]),
            signals: Self.signalSpecs(FerryInterface.TransferSignal.all))
    }
}
