import DBus
import FerryInterface
import FerryCore

/// Core snapshots as D-Bus property values.
enum PropertyMapping {
    private typealias T = FerryInterface.TransferProperty
    private typealias S = FerryInterface.SessionProperty
    private typealias M = FerryInterface.ManagerProperty

    /// How a transfer property reads a snapshot: its value, and whether two snapshots
    /// give it different values (compared on the fields it is made of, before any value
    /// is built).
    struct TransferValue: Sendable {
        let property: BusProperty
        let value: @Sendable (TransferSnapshot) -> DBusValue
        let differs: @Sendable (TransferSnapshot, TransferSnapshot) -> Bool
    }

    /// `property` made of `field` of a snapshot.
    private static func made<F: Equatable>(_ property: BusProperty, of field: @escaping @Sendable (TransferSnapshot) -> F,
                                           _ value: @escaping @Sendable (F) -> DBusValue) -> TransferValue {
        TransferValue(property: property, value: { value(field($0)) }, differs: { field($0) != field($1) })
    }

    /// Two fields as one, for a property made of both.
    private struct Both<A: Equatable, B: Equatable>: Equatable { let a: A, b: B }

    /// Each transfer property with its value in a snapshot: the one place the service
    /// says what a property holds (`IntrospectionTests.testServedPropertiesAreTheDeclaredOnes`
    /// checks that it covers the declarations). Read through `transferTable`.
    private static let transferValues: [TransferValue] = [
        made(T.kind, of: \.kind) { .string($0.rawValue) },
        // Without user:password@: every client of the bus can read this.
        made(T.url, of: \.url) { .string(Redaction.urlWithoutCredentials($0)) },
        made(T.session, of: \.session) { .objectPath(FerryInterface.sessionPath($0)) },
        made(T.description, of: \.description) { .string($0) },
        made(T.destination, of: \.shownDestination) { .string($0) },
        made(T.state, of: \.state) { .string($0.rawValue) },
        made(T.waitingReason, of: { $0.state == .waiting ? $0.waitingReason : "" }) { .string($0) },
        made(T.bytesTransferred, of: \.bytesTransferred) { .int64($0) },
        made(T.bytesExpected, of: \.bytesExpected) { .int64($0) },
        made(T.rate, of: \.rate) { .uint64($0) },
        made(T.expectedEnd, of: \.expectedEnd) { .uint64($0) },
        made(T.error, of: { Both(a: $0.errorName, b: $0.errorMessage) }) { .structure([.string($0.a), .string($0.b)]) },
        made(T.httpStatus, of: \.httpStatus) { .uint32($0) },
        made(T.attempts, of: \.attempts) { .uint32($0) },
        made(T.resumable, of: \.resumable) { .boolean($0) },
        made(T.sha256, of: \.sha256) { .string($0) },
        made(T.response, of: \.response) { .bytes($0) },
        made(T.created, of: \.created) { .uint64($0) },
        made(T.started, of: \.started) { .uint64($0) },
        made(T.completed, of: \.completed) { .uint64($0) },
        made(T.priority, of: \.priority) { .int32($0) },
        made(T.speedLimit, of: \.speedLimit) { .uint64($0) },
        made(T.nextAttempt, of: \.nextAttempt) { .uint64($0) },
        made(T.singleConnectionReason, of: \.singleConnectionReason) { .string($0) },
        made(T.connectionLimitReason, of: \.connectionLimitReason) { .string($0) },
        made(T.mirrors, of: \.mirrors) { .stringArray($0) },
        made(T.pieces, of: { Both(a: $0.pieceLength, b: $0.pieceCount) }) { .structure([.uint64($0.a), .uint32($0.b)]) },
        made(T.group, of: \.group) { .objectPath($0 == 0 ? "/" : FerryInterface.groupPath($0)) },
    ]

    /// `transferValues` in the order of the transfer interface's properties
    /// (`TransferProperty.all`), as `TransferProperties` reads them.
    static let transferTable: [TransferValue] = FerryInterface.TransferProperty.all.map { p in
        guard let entry = transferValues.first(where: { $0.property == p }) else {
            preconditionFailure("no value for the transfer property \(p.name)")
        }
        return entry
    }

    private typealias G = FerryInterface.GroupProperty

    /// A group's properties; `Transfers` only when the snapshot carries the members.
    static func group(_ g: GroupSnapshot) -> [String: DBusValue] {
        var values: [String: DBusValue] = [
            G.session.name: .objectPath(FerryInterface.sessionPath(g.session)),
            G.description.name: .string(g.description),
            G.state.name: .string(g.state.rawValue),
            G.succeeded.name: .uint32(g.succeeded),
            G.failed.name: .uint32(g.failed),
            G.cancelled.name: .uint32(g.cancelled),
            G.bytesTransferred.name: .int64(g.bytesTransferred),
            G.bytesExpected.name: .int64(g.bytesExpected),
        ]
        if let members = g.transfers { values[G.transfers.name] = .pathArray(members.map(FerryInterface.transferPath)) }
        return values
    }

    static func session(_ s: SessionSnapshot, defaultDirectory: String) -> [String: DBusValue] {
        [
            S.identifier.name: .string(s.identifier),
            S.configuration.name: OptionParsing.configurationValue(s.configuration, defaultDirectory: defaultDirectory),
            S.activeTransfers.name: .uint32(s.activeTransfers),
        ]
    }

    static func manager(_ m: ManagerSnapshot, version: String) -> [String: DBusValue] {
        [
            M.version.name: .string(version),
            M.activeTransfers.name: .uint32(m.activeTransfers),
            M.queuedTransfers.name: .uint32(m.queuedTransfers),
            M.downloadRate.name: .uint64(m.downloadRate),
            M.uploadRate.name: .uint64(m.uploadRate),
            M.maxConcurrentTransfers.name: .uint32(m.maxConcurrentTransfers),
            M.speedLimit.name: .uint64(m.speedLimit),
            M.notificationsEnabled.name: .boolean(m.notificationsEnabled),
            M.schedule.name: OptionParsing.scheduleValue(m.schedule),
            M.interfaceVersion.name: .string(FerryInterface.currentInterfaceVersion),
        ]
    }

    static func pendingEvent(_ e: PendingEvent) -> DBusValue {
        var details: [String: DBusValue] = [:]
        if let v = e.location { details["location"] = .string(v) }
        if let v = e.errorName { details["error-name"] = .string(v) }
        if let v = e.errorMessage { details["error-message"] = .string(v) }
        if let v = e.httpStatus { details["http-status"] = .uint32(v) }
        if let v = e.bytes { details["bytes"] = .int64(v) }
        if let v = e.sha256 { details["sha256"] = .string(v) }
        return .structure([.uint64(e.serial), .objectPath(FerryInterface.transferPath(e.transfer)),
                           .string(e.kind.rawValue), .vardict(details)])
    }
}

/// A transfer's snapshot as the source of its bus object's properties: the object keeps
/// the snapshot (312 bytes) rather than its 28 values as `DBusValue`s (704 bytes), and a
/// change compares fields before it builds the values that changed.
struct TransferProperties: PropertySource {
    let snapshot: TransferSnapshot

    func value(ofProperty index: Int) -> DBusValue? {
        PropertyMapping.transferTable[index].value(snapshot)
    }

    func changedProperties(since old: any PropertySource) -> [Int]? {
        guard let old = old as? TransferProperties else { return nil }
        var changed: [Int] = []
        for (j, entry) in PropertyMapping.transferTable.enumerated() where entry.differs(old.snapshot, snapshot) {
            changed.append(j)
        }
        return changed
    }
}
