import DBus
import FerryCore
import FerryInterface

/// Groups (contract v1.2): `Session.DownloadGroup` and the `org.ferry.Ferry1.Group`
/// objects it makes.
extension FerryBusService {
    /// `Session.DownloadGroup(a(sa{sv}) items, a{sv} options) -> (o group)`: every item
    /// is checked as `Download` checks it, then all are added in one store transaction,
    /// or none: the first bad item refuses the call with its error, its index in front.
    func downloadGroup(_ inv: MethodInvocation, _ args: CallArguments) {
        typealias M = FerryInterface.SessionMethod
        typealias G = FerryInterface.GroupOption
        typealias Argument = FerryInterface.Argument
        runOnSession(inv) { core, session in
            guard case .array(_, let items) = args.value(M.items) else {
                throw CoreError.invalidArgument("items must be of type a(sa{sv})")
            }
            guard !items.isEmpty else { throw CoreError.invalidArgument("a group needs at least one item") }
            guard items.count <= TransferCoordinator.maxGroupItems else {
                throw CoreError.limitExceeded("a group may hold at most \(TransferCoordinator.maxGroupItems) items, not \(items.count); make several groups")
            }
            var description = ""
            var allOrNothing = false
            var start: Bool?
            for (key, value) in try OptionParsing.vardict(args.value(Argument.options)) {
                switch key {
                case G.description.name:
                    let v = try Self.groupOption(G.description, value) { $0.string }
                    try Limits.check(v, max: Limits.descriptionBytes, what: "the group description")
                    description = v
                case G.allOrNothing.name:
                    allOrNothing = try Self.groupOption(G.allOrNothing, value) { $0.bool }
                case G.start.name:
                    start = try Self.groupOption(G.start, value) { $0.bool }
                default:
                    throw CoreError.invalidArgument("unknown group option '\(key)'; known options: \(G.all.map(\.name).joined(separator: ", "))")
                }
            }
            for (index, item) in items.enumerated() {
                do {
                    guard case .structure(let fields) = item, fields.count == 2, let url = fields[0].string else {
                        throw CoreError.invalidArgument("each item must be of type (sa{sv})")
                    }
                    let dict = try OptionParsing.vardict(fields[1])
                    if dict[FerryInterface.DownloadOption.destinationFD.name] != nil {
                        throw CoreError.invalidArgument("destination-fd is not taken in a group; use Download for it")
                    }
                    var options = try OptionParsing.download(dict)
                    if let start { options.start = start }
                    try self.checkTransferLimit(core, session: session)
                    try self.confineDownload(inv, core, session: session, destination: options.destination)
                    _ = try core.prepareDownload(session: session, url: url, options: options)
                } catch {
                    core.discardPreparedDownloads()
                    let e = Self.busError(error)
                    throw BusError(name: e.name, message: "item \(index): \(e.message)")
                }
            }
            let id = try core.addPreparedDownloadsAsGroup(session: session, description: description, allOrNothing: allOrNothing)
            return [.objectPath(FerryInterface.groupPath(id))]
        }
    }

    private static func groupOption<T>(_ option: BusOption, _ value: DBusValue, _ get: (DBusValue) -> T?) throws -> T {
        guard value.signature == option.signature, let v = get(value) else {
            throw CoreError.invalidArgument("group option '\(option.name)' must be of D-Bus type '\(option.signature)', not '\(value.signature)'")
        }
        return v
    }

    func groupInterface() -> InterfaceSpec {
        typealias M = FerryInterface.GroupMethod
        return InterfaceSpec(
            name: FerryInterface.groupInterface,
            methods: Self.methodSpecs(FerryInterface.GroupMethod.all, handlers: [
                M.pause: { [unowned self] inv, _ in runOnGroup(inv) { core, id in try core.pauseGroup(id); return [] } },
                M.resume: { [unowned self] inv, _ in runOnGroup(inv) { core, id in try core.resumeGroup(id); return [] } },
                M.cancel: { [unowned self] inv, _ in runOnGroup(inv) { core, id in try core.cancelGroup(id); return [] } },
                M.remove: { [unowned self] inv, _ in runOnGroup(inv) { core, id in try core.removeGroup(id); return [] } },
            ]),
            properties: Self.propertySpecs(FerryInterface.GroupProperty.all),
            signals: Self.signalSpecs(FerryInterface.GroupSignal.all))
    }

    /// A call on a group object: its caller uses the group's session (signals,
    /// on-client-exit), then `body` runs on the core.
    func runOnGroup(_ inv: MethodInvocation, _ body: @escaping (TransferCoordinator, GroupID) throws -> [DBusValue]) {
        guard let id = FerryInterface.id(inPath: inv.path, kind: "group") else {
            return inv.fail(BusError(name: StandardErrors.unknownObject, message: "no group at \(inv.path)"))
        }
        if let audience = bus.object(at: inv.path)?.audience as? SessionAudience {
            callers.signalRecipients.noteClient(inv.sender, ofSession: audience.identifier)
        }
        run(inv) { [sessionClients] core in
            if let session = core.groupSession(id) { sessionClients?.note(inv.sender, of: session) }
            return try body(core, id)
        }
    }
}
