import Dispatch

/// The values of one interface's properties, read from the application's own value
/// (a snapshot) when asked rather than kept as bus values: an object then holds one
/// copy of what it shows, not a second one as `DBusValue`s (a daemon may export tens of
/// thousands of objects).
public protocol PropertySource: Sendable {
    /// The value of the property at `index` in its interface's `properties`; nil: none.
    func value(ofProperty index: Int) -> DBusValue?
    /// The properties (indices) whose values may differ from those `old` gives; nil:
    /// any of them (each is then compared). `old` is the source this one replaces.
    func changedProperties(since old: any PropertySource) -> [Int]?
}

/// An object this connection serves at `path`, with its interfaces and the
/// current values of their properties.
///
/// Property values are kept here, or read from a `PropertySource` the object keeps,
/// so `Get`, `GetAll` and `GetManagedObjects` answer without calling back into the
/// application. The application updates them with `setProperties` or `setSource`,
/// which send `PropertiesChanged` for what changed.
///
/// `@unchecked Sendable`: after `export`, the object is only touched on the
/// connection's queue (use `BusConnection.perform`).
public final class ExportedObject: @unchecked Sendable {
    public let path: String
    public let interfaces: [InterfaceSpec]
    /// Property values, per interface in the order of its spec's properties (an array,
    /// not a dictionary: a daemon may export tens of thousands of objects). Empty for
    /// the interface with a source, and empty altogether when no other has properties.
    private var slots: [[DBusValue?]]
    /// The interface whose values come from `source` (-1: none).
    private let sourcedInterface: Int
    private var source: (any PropertySource)?
    /// Values of the sourced interface set with `setProperties` since the source was
    /// last replaced (a running transfer's progress counts): they hide the source's.
    private var overrides: [Int: DBusValue] = [:]
    weak var connection: BusConnection?
    /// Who hears this object's signals; nil (the default): every connection whose match
    /// rules ask for them (broadcast). Set before export or on the connection's queue.
    public var audience: SignalAudience?

    /// Whether `PropertiesChanged` is held back and sent with others (see `init`).
    let coalescesChanges: Bool
    /// Coalescing: per interface index, the properties changed since the last signal.
    private var unsignalled: [Int: Set<Int>] = [:]

    /// `initialValues`: interface name -> property name -> value.
    /// `coalesceChanges`: for objects whose properties change with every event of many
    /// others (counts, totals): values are current at once (`Get` sees them), but the
    /// `PropertiesChanged` signal of a read-only property waits up to
    /// `BusConnection.changeSignalDelay` and carries the values then, so a burst of
    /// changes makes one signal, not one each.
    /// A signal the application emits on such an object (`emitSignal`) first sends
    /// what every such object holds back, so it never overtakes the values it follows.
    public init(path: String, interfaces: [InterfaceSpec], initialValues: [String: [String: DBusValue]] = [:],
                coalesceChanges: Bool = false) {
        precondition(BusNames.isValidObjectPath(path), "invalid object path \(path)")
        self.path = path
        self.interfaces = interfaces
        self.coalescesChanges = coalesceChanges
        sourcedInterface = -1
        slots = Self.slots(interfaces, initialValues, except: -1)
    }

    /// An object whose properties of `interface` (one of `interfaces`) come from `source`;
    /// the other interfaces' from `initialValues`, as above. Not coalesced.
    public init(path: String, interfaces: [InterfaceSpec], source: any PropertySource, of interface: String,
                initialValues: [String: [String: DBusValue]] = [:]) {
        precondition(BusNames.isValidObjectPath(path), "invalid object path \(path)")
        guard let sourced = interfaces.firstIndex(where: { $0.name == interface }) else {
            preconditionFailure("\(path) has no interface \(interface) for its property source")
        }
        self.path = path
        self.interfaces = interfaces
        self.coalescesChanges = false
        self.source = source
        sourcedInterface = sourced
        let othersHaveProperties = interfaces.indices.contains { $0 != sourced && !interfaces[$0].properties.isEmpty }
        slots = othersHaveProperties ? Self.slots(interfaces, initialValues, except: sourced) : []
    }

    /// The slots of `interfaces` (`initialValues` as the inits take them), none for the
    /// interface at index `sourced`.
    private static func slots(_ interfaces: [InterfaceSpec], _ initialValues: [String: [String: DBusValue]],
                              except sourced: Int) -> [[DBusValue?]] {
        interfaces.enumerated().map { i, spec in
            guard i != sourced else { return [] }
            let given = initialValues[spec.name] ?? [:]
            return spec.properties.map { given[$0.name] }
        }
    }

    /// Property `j` of interface `i` (indices into `interfaces` and its `properties`).
    func value(_ i: Int, _ j: Int) -> DBusValue? {
        if i == sourcedInterface {
            // Most objects have no overrides: no hashing for them (a listing reads every value).
            if !overrides.isEmpty, let v = overrides[j] { return v }
            return source?.value(ofProperty: j)
        }
        return slots[i][j]
    }

    func interface(_ name: String) -> InterfaceSpec? { interfaces.first { $0.name == name } }

    private func slot(_ interface: String, _ name: String) -> (Int, Int)? {
        guard let i = interfaces.firstIndex(where: { $0.name == interface }),
              let j = interfaces[i].propertyIndex[name] else { return nil }
        return (i, j)
    }

    public func property(_ interface: String, _ name: String) -> DBusValue? {
        guard let (i, j) = slot(interface, name) else { return nil }
        return value(i, j)
    }

    /// Sets property values and, once exported, emits one `PropertiesChanged` for
    /// those that changed and emit change signals. On the connection's queue.
    public func setProperties(_ interface: String, _ changes: [String: DBusValue]) {
        if let q = connection?.queue { dispatchPrecondition(condition: .onQueue(q)) }
        guard let i = interfaces.firstIndex(where: { $0.name == interface }) else { return }
        let spec = interfaces[i]
        var changed: [String: DBusValue] = [:]
        for (name, value) in changes {
            guard let j = spec.propertyIndex[name], value.signature == spec.properties[j].type else {
                assertionFailure("property \(interface).\(name) set with \(value.signature)")
                continue
            }
            let p = spec.properties[j]
            if self.value(i, j) == value { continue }
            if i == sourcedInterface { overrides[j] = value } else { slots[i][j] = value }
            guard p.emitsChange else { continue }
            // A writable property changes when a client sets it: that client hears of it at once.
            if coalescesChanges && p.access == .read {
                // Before export nothing is signalled (and nothing held back).
                guard let connection else { continue }
                if unsignalled.isEmpty { connection.holdChanges(of: self) }
                unsignalled[i, default: []].insert(j)
            } else {
                changed[name] = value
            }
        }
        guard !changed.isEmpty else { return }
        sendChanged(interface, changed)
    }

    /// Replaces the source of the sourced interface's values and, once exported, emits
    /// one `PropertiesChanged` for the values that changed and emit change signals (the
    /// values `setProperties` set since the last source count as the old ones). On the
    /// connection's queue.
    public func setSource(_ new: any PropertySource) {
        if let q = connection?.queue { dispatchPrecondition(condition: .onQueue(q)) }
        guard sourcedInterface >= 0, let old = source else { return }
        let i = sourcedInterface
        let spec = interfaces[i]
        let candidates = new.changedProperties(since: old) ?? Array(spec.properties.indices)
        var changed: [String: DBusValue] = [:]
        for j in candidates where spec.properties[j].emitsChange {
            let before = overrides[j] ?? old.value(ofProperty: j)
            guard let after = new.value(ofProperty: j), after != before else { continue }
            assert(after.signature == spec.properties[j].type, "property \(spec.name).\(spec.properties[j].name) given as \(after.signature)")
            changed[spec.properties[j].name] = after
        }
        for (j, value) in overrides where spec.properties[j].emitsChange && !candidates.contains(j) {
            // Set since the last source, and the new source gives it another value.
            guard let after = new.value(ofProperty: j), after != value else { continue }
            changed[spec.properties[j].name] = after
        }
        source = new
        overrides = [:]
        guard !changed.isEmpty, connection != nil else { return }
        sendChanged(spec.name, changed)
    }

    /// Coalescing: one signal per interface with the current values of what changed.
    func signalUnsignalled() {
        let pending = unsignalled
        unsignalled = [:]
        for (i, properties) in pending.sorted(by: { $0.key < $1.key }) {
            var changed: [String: DBusValue] = [:]
            for j in properties { if let v = value(i, j) { changed[interfaces[i].properties[j].name] = v } }
            if !changed.isEmpty { sendChanged(interfaces[i].name, changed) }
        }
    }

    private func sendChanged(_ interface: String, _ changed: [String: DBusValue]) {
        guard let connection else { return }
        do {
            let m = try BusMessage.signal(path: path, interface: StandardNames.properties, member: "PropertiesChanged")
            try m.append([.string(interface), .vardict(changed), .stringArray([])])
            connection.sendSignal(m, to: audience)
        } catch let e as BusError {
            _ = connection.tooLarge("PropertiesChanged on \(path)", e)
        } catch {}
    }

    /// All properties of an interface, as `GetAll` returns them.
    func allProperties(_ interface: InterfaceSpec) -> DBusValue {
        // Sorted by name once per spec, straight from the slots: no dictionary to build
        // and sort per object (GetManagedObjects answers for every transfer at once).
        var entries: [DBusValue.DictEntry] = []
        if let i = interfaces.firstIndex(where: { $0.name == interface.name }) {
            entries.reserveCapacity(interface.properties.count)
            for j in interface.propertyOrder {
                if let v = value(i, j) { entries.append(DBusValue.DictEntry(.string(interface.properties[j].name), .variant(v))) }
            }
        }
        return .dictionary(key: "s", value: "v", entries)
    }

    /// `a{sa{sv}}`: every interface with its properties.
    func interfacesAndProperties() -> DBusValue {
        .dictionary(key: "s", value: "a{sv}", interfaces.map { .init(.string($0.name), allProperties($0)) })
    }

    /// `interfacesAndProperties()` written straight from the slots, building no values
    /// (GetManagedObjects writes ten thousand of them).
    func writeInterfacesAndProperties(into writer: inout WireWriter) throws {
        try writer.array(of: "{sa{sv}}") { w in
            for (i, interface) in interfaces.enumerated() {
                try w.dictEntry { w in
                    try w.value(.string(interface.name))
                    try w.array(of: "{sv}") { w in
                        for j in interface.propertyOrder {
                            guard let v = value(i, j) else { continue }
                            if let head = interface.propertyEntryHeads[j], v.hasSignature(interface.properties[j].type[...]) {
                                try w.preparedEntry(head: head, variantContents: v)
                                continue
                            }
                            try w.dictEntry { w in
                                try w.value(.string(interface.properties[j].name))
                                try w.variant(v)
                            }
                        }
                    }
                }
            }
        }
    }
}

extension BusConnection {
    /// Serves `object` from now on. Objects are exported in call order, so export
    /// them before `requestName` to be complete when clients can see the name.
    /// `announce`: whether an object manager above it sends `InterfacesAdded`; pass
    /// false for objects exported before the name is requested (nobody can be
    /// listening yet, and a daemon restoring ten thousand objects would otherwise
    /// queue ten thousand signals nobody receives).
    public func export(_ object: ExportedObject, announce: Bool = true) {
        queue.async { [self] in exportNow(object, announce: announce) }
    }

    /// `export` for code already on the queue (work handed over in one `perform`).
    public func exportNow(_ object: ExportedObject, announce: Bool = true) {
        dispatchPrecondition(condition: .onQueue(queue))
        object.connection = self
        objects[object.path] = object
        if announce, let manager = managerPath(for: object.path) {
            do {
                try emitSignalOnQueue(path: manager, interface: StandardNames.objectManager, name: "InterfacesAdded",
                                      arguments: [.objectPath(object.path), object.interfacesAndProperties()], to: object.audience)
            } catch let e as BusError {
                _ = tooLarge("InterfacesAdded for \(object.path)", e)
            } catch {}
        }
    }

    /// Stops serving the object at `path`.
    public func unexport(_ path: String) {
        queue.async { [self] in unexportNow(path) }
    }

    /// `unexport` for code already on the queue.
    public func unexportNow(_ path: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let object = objects.removeValue(forKey: path) else { return }
        object.connection = nil
        if let manager = managerPath(for: path) {
            try? emitSignalOnQueue(path: manager, interface: StandardNames.objectManager, name: "InterfacesRemoved",
                                   arguments: [.objectPath(path), .stringArray(object.interfaces.map(\.name))], to: object.audience)
        }
    }

    /// Serves `org.freedesktop.DBus.ObjectManager` at `path` (the object there should
    /// be exported too); every object below it is one of its managed objects.
    public func addObjectManager(at path: String) {
        queue.async { [self] in objectManagerPaths.insert(path) }
    }

    /// The object exported at `path`, on the queue.
    public func object(at path: String) -> ExportedObject? {
        dispatchPrecondition(condition: .onQueue(queue))
        return objects[path]
    }

    func managerPath(for path: String) -> String? {
        objectManagerPaths.first { path.hasPrefix($0 == "/" ? "/" : $0 + "/") && path != $0 }
    }

    /// Keeps `object`'s changed properties back until the next flush; the first object
    /// held back arms the one timer. On the queue.
    func holdChanges(of object: ExportedObject) {
        if heldBack.isEmpty {
            queue.asyncAfter(deadline: .now() + changeSignalDelay) { [weak self] in self?.sendHeldBackChanges() }
        }
        heldBack.append(object)
    }

    /// Sends the `PropertiesChanged` of every object holding changes back, in the order
    /// they started to. On the queue.
    func sendHeldBackChanges() {
        let objects = heldBack
        heldBack = []
        for object in objects { object.signalUnsignalled() }
    }

    func sendOnQueue(_ m: BusMessage) {
        dispatchPrecondition(condition: .onQueue(queue))
        dbus_connection_send_if_open(self, m)
    }

    /// `audience`: who hears it (nil: broadcast).
    func emitSignalOnQueue(path: String, interface: String, name: String, arguments: [DBusValue],
                           to audience: SignalAudience? = nil) throws {
        let m = try BusMessage.signal(path: path, interface: interface, member: name)
        try m.append(arguments)
        sendSignal(m, to: audience)
    }
}
