import DBus
import FerryCore
import FerryInterface
import Foundation

/// The three Ferry interfaces, as the contract gives them. Handlers are thin: they
/// unpack arguments, run the core on its queue, and reply.
extension FerryBusService {
    func managerInterface() -> InterfaceSpec {
        InterfaceSpec(
            name: FerryInterface.managerInterface,
            methods: [
                MethodSpec("OpenSession", in: [ArgSpec("identifier", "s"), ArgSpec("configuration", "a{sv}")],
                           out: [ArgSpec("session", "o")]) { [unowned self] inv in
                    run(inv) { core in
                        let update = try OptionParsing.configuration(try OptionParsing.vardict(inv.arguments[1]))
                        try self.checkSessionLimit(core, identifier: inv.arguments[0].string ?? "", owner: inv.sandboxAppID)
                        try self.confine(inv, configuration: update)
                        // Before the session exists: its first signals (InterfacesAdded) reach
                        // its opener when they are private.
                        if inv.sandboxAppID == nil {
                            self.callers.signalRecipients.noteClient(inv.sender, ofSession: inv.arguments[0].string ?? "")
                        }
                        let (id, _) = try core.openSession(identifier: inv.arguments[0].string ?? "", configuration: update,
                                                           owner: inv.sandboxAppID)
                        self.waker.noteClient(inv.sender, of: id)
                        // Its client is back: what on-client-exit paused goes on.
                        self.sessionClients.note(inv.sender, of: id)
                        core.clientReturned(session: id)
                        return [.objectPath(FerryInterface.sessionPath(id))]
                    }
                },
                MethodSpec("ListSessions", out: [ArgSpec("sessions", "ao")]) { [unowned self] inv in
                    run(inv) { core in [.pathArray(self.visibleSessions(inv, core).map(FerryInterface.sessionPath))] }
                },
                MethodSpec("ListTransfers", out: [ArgSpec("transfers", "ao")]) { [unowned self] inv in
                    run(inv) { core in [.pathArray(try self.visibleTransfers(inv, core).map(FerryInterface.transferPath))] }
                },
                MethodSpec("ListTransferProperties", in: [ArgSpec("properties", "as")],
                           out: [ArgSpec("transfers", "ao"), ArgSpec("values", "a{sv}")]) { [unowned self] inv in
                    listTransferProperties(inv)
                },
                MethodSpec("Watch") { [unowned self] inv in watch(inv, true) },
                MethodSpec("Unwatch") { [unowned self] inv in watch(inv, false) },
                MethodSpec("PauseAll") { [unowned self] inv in
                    run(inv) { core in try self.acrossVisibleSessions(inv, core) { try core.pauseAll(session: $0) }; return [] }
                },
                MethodSpec("ResumeAll") { [unowned self] inv in
                    run(inv) { core in try self.acrossVisibleSessions(inv, core) { try core.resumeAll(session: $0) }; return [] }
                },
                MethodSpec("CancelAll") { [unowned self] inv in
                    run(inv) { core in try self.acrossVisibleSessions(inv, core) { try core.cancelAll(session: $0) }; return [] }
                },
            ],
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
            signals: [
                SignalSpec("AllFinished", [ArgSpec("succeeded", "u"), ArgSpec("failed", "u"), ArgSpec("cancelled", "u")]),
            ])
    }

    func sessionInterface() -> InterfaceSpec {
        InterfaceSpec(
            name: FerryInterface.sessionInterface,
            methods: [
                MethodSpec("Download", in: [ArgSpec("url", "s"), ArgSpec("options", "a{sv}")],
                           out: [ArgSpec("transfer", "o")]) { [unowned self] inv in download(inv) },
                MethodSpec("Upload", in: [ArgSpec("url", "s"), ArgSpec("file", "s"), ArgSpec("options", "a{sv}")],
                           out: [ArgSpec("transfer", "o")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        var dict = try OptionParsing.vardict(inv.arguments[2])
                        let sourceFD = try self.sourceDescriptor(dict.removeValue(forKey: "source-fd"))
                        // The core owns the fd from here (it closes it on refusal); the
                        // invocation must not close it.
                        if let sourceFD { inv.keepUnixFD(sourceFD) }
                        var handedOver = false
                        do {
                            let options = try OptionParsing.upload(dict)
                            let file = inv.arguments[1].string ?? ""
                            if sourceFD == nil { try Limits.checkPath(file, what: "the file to upload") }
                            try self.checkTransferLimit(core, session: session)
                            if sourceFD == nil { try self.confineUpload(inv, file: file) }
                            try self.confineResponseDestination(inv, options.responseDestination)
                            handedOver = true
                            let id = try core.upload(session: session, url: inv.arguments[0].string ?? "", file: file,
                                                     options: options, sourceFD: sourceFD)
                            return [.objectPath(FerryInterface.transferPath(id))]
                        } catch {
                            // Refused before the core took the descriptor.
                            if let sourceFD, !handedOver { close(sourceFD) }
                            throw error
                        }
                    }
                },
                MethodSpec("DownloadGroup", in: [ArgSpec("items", "a(sa{sv})"), ArgSpec("options", "a{sv}")],
                           out: [ArgSpec("group", "o")]) { [unowned self] inv in downloadGroup(inv) },
                MethodSpec("ResumeDownload", in: [ArgSpec("resume_data", "ay"), ArgSpec("options", "a{sv}")],
                           out: [ArgSpec("transfer", "o")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        var dict = try OptionParsing.vardict(inv.arguments[1])
                        // A destination-fd download resumed into a new descriptor (the
                        // old one is lost when ferryd restarts); the descriptor owns the fd.
                        let descriptor = try self.destinationDescriptor(dict.removeValue(forKey: "destination-fd"))
                        if let descriptor { inv.keepUnixFD(descriptor.fd) }
                        let options = try OptionParsing.download(dict)
                        try self.checkTransferLimit(core, session: session)
                        try self.confineResume(inv, resumeData: inv.arguments[0].bytes ?? [])
                        let id = try core.resumeDownload(session: session, resumeData: inv.arguments[0].bytes ?? [], options: options,
                                                         into: descriptor)
                        return [.objectPath(FerryInterface.transferPath(id))]
                    }
                },
                MethodSpec("ListTransfers", out: [ArgSpec("transfers", "ao")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        [.pathArray(try core.transferIDs(session: session).map(FerryInterface.transferPath))]
                    }
                },
                MethodSpec("PauseAll") { [unowned self] inv in runOnSession(inv) { core, s in try core.pauseAll(session: s); return [] } },
                MethodSpec("ResumeAll") { [unowned self] inv in runOnSession(inv) { core, s in try core.resumeAll(session: s); return [] } },
                MethodSpec("CancelAll") { [unowned self] inv in runOnSession(inv) { core, s in try core.cancelAll(session: s); return [] } },
                MethodSpec("PendingEvents", out: [ArgSpec("events", "a(tosa{sv})")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        [.array(element: "(tosa{sv})", try core.pendingEvents(session: session).map(PropertyMapping.pendingEvent))]
                    }
                },
                MethodSpec("PendingEventsAfter", in: [ArgSpec("after", "t"), ArgSpec("limit", "u")],
                           out: [ArgSpec("events", "a(tosa{sv})")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        let page = try core.pendingEvents(session: session, after: inv.arguments[0].uint64 ?? 0,
                                                          maxCount: Int(inv.arguments[1].uint32 ?? 0),
                                                          maxBytes: self.pendingEventsPageBytes)
                        return [.array(element: "(tosa{sv})", page.map(PropertyMapping.pendingEvent))]
                    }
                },
                MethodSpec("AcknowledgeEvents", in: [ArgSpec("serial", "t")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        try core.acknowledgeEvents(session: session, upTo: inv.arguments[0].uint64 ?? 0)
                        return []
                    }
                },
                MethodSpec("Close", in: [ArgSpec("cancel_transfers", "b")]) { [unowned self] inv in
                    runOnSession(inv) { core, session in
                        try core.closeSession(session, cancelTransfers: inv.arguments[0].bool ?? false)
                        return []
                    }
                },
            ],
            properties: Self.propertySpecs(FerryInterface.SessionProperty.all),
            signals: [
                SignalSpec("AllFinished", [ArgSpec("succeeded", "u"), ArgSpec("failed", "u"), ArgSpec("cancelled", "u")]),
            ])
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
        InterfaceSpec(
            name: FerryInterface.transferInterface,
            methods: [
                MethodSpec("Pause", out: [ArgSpec("resume_data", "ay")]) { [unowned self] inv in
                    runOnTransfer(inv) { core, id in [.bytes(try core.pause(id))] }
                },
                MethodSpec("Resume") { [unowned self] inv in runOnTransfer(inv) { core, id in try core.resume(id); return [] } },
                MethodSpec("Cancel") { [unowned self] inv in runOnTransfer(inv) { core, id in try core.cancel(id); return [] } },
                MethodSpec("Remove") { [unowned self] inv in runOnTransfer(inv) { core, id in try core.remove(id); return [] } },
                MethodSpec("SetUrl", in: [ArgSpec("url", "s")]) { [unowned self] inv in
                    runOnTransfer(inv) { core, id in try core.setURL(id, url: inv.arguments[0].string ?? ""); return [] }
                },
            ],
            properties: Self.propertySpecs(FerryInterface.TransferProperty.all, setters: [
                FerryInterface.TransferProperty.priority: { [unowned self] v, path, done in
                    onCore(transferAt: path, done) { core, id in try core.setPriority(id, v.int32 ?? 0) }
                },
                FerryInterface.TransferProperty.speedLimit: { [unowned self] v, path, done in
                    onCore(transferAt: path, done) { core, id in try core.setTransferSpeedLimit(id, v.uint64 ?? 0) }
                },
            ]),
            signals: [
                SignalSpec("Progress", [ArgSpec("bytes_written", "x"), ArgSpec("total_bytes_written", "x"),
                                        ArgSpec("total_bytes_expected", "x")]),
                SignalSpec("ResumedAtOffset", [ArgSpec("offset", "x"), ArgSpec("expected_total", "x")]),
                SignalSpec("Finished", [ArgSpec("location", "s")]),
                SignalSpec("Completed", [ArgSpec("serial", "t"), ArgSpec("error_name", "s"), ArgSpec("error_message", "s")]),
            ])
    }
}

