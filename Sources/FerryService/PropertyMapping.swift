import DBus
import FerryInterface
import FerryCore

/// Core snapshots as D-Bus property values.
enum PropertyMapping {
    private typealias T = FerryInterface.TransferProperty
    private typealias S = FerryInterface.SessionProperty
    private typealias M = FerryInterface.ManagerProperty

    /// Each transfer property with its value in a snapshot: the one place the service
    /// says what a property holds (`IntrospectionTests.testServedPropertiesAreTheDeclaredOnes`
    /// checks that it covers the declarations).
    static let transferValues: [(BusProperty, @Sendable (TransferSnapshot) -> DBusValue)] = [
        (T.kind, { .string($0.kind.rawValue) }),
        // Without user:password@: every client of the bus can read this.
        (T.url, { .string(Redaction.urlWithoutCredentials($0.url)) }),
        (T.session, { .objectPath(FerryInterface.sessionPath($0.session)) }),
        (T.description, { .string($0.description) }),
        (T.destination, { .string($0.shownDestination) }),
        (T.state, { .string($0.state.rawValue) }),
        (T.waitingReason, { .string($0.state == .waiting ? $0.waitingReason : "") }),
        (T.bytesTransferred, { .int64($0.bytesTransferred) }),
        (T.bytesExpected, { .int64($0.bytesExpected) }),
        (T.rate, { .uint64($0.rate) }),
        (T.expectedEnd, { .uint64($0.expectedEnd) }),
        (T.error, { .structure([.string($0.errorName), .string($0.errorMessage)]) }),
        (T.httpStatus, { .uint32($0.httpStatus) }),
        (T.attempts, { .uint32($0.attempts) }),
        (T.resumable, { .boolean($0.resumable) }),
        (T.sha256, { .string($0.sha256) }),
        (T.response, { .bytes($0.response) }),
        (T.created, { .uint64($0.created) }),
        (T.started, { .uint64($0.started) }),
        (T.completed, { .uint64($0.completed) }),
        (T.priority, { .int32($0.priority) }),
        (T.speedLimit, { .uint64($0.speedLimit) }),
        (T.nextAttempt, { .uint64($0.nextAttempt) }),
        (T.singleConnectionReason, { .string($0.singleConnectionReason) }),
        (T.connectionLimitReason, { .string($0.connectionLimitReason) }),
        (T.mirrors, { .stringArray($0.mirrors) }),
        (T.pieces, { .structure([.uint64($0.pieceLength), .uint32($0.pieceCount)]) }),
        (T.group, { .objectPath($0.group == 0 ? "/" : FerryInterface.groupPath($0.group)) }),
    ]

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

    static func transfer(_ t: TransferSnapshot) -> [String: DBusValue] {
        var values = [String: DBusValue](minimumCapacity: transferValues.count)
        for (property, value) in transferValues { values[property.name] = value(t) }
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
