import DBus
import FerryCore

/// Core snapshots as D-Bus property values.
enum PropertyMapping {
    static func transfer(_ t: TransferSnapshot) -> [String: DBusValue] {
        [
            "Kind": .string(t.kind.rawValue),
            // Without user:password@: every client of the bus can read this.
            "Url": .string(Redaction.urlWithoutCredentials(t.url)),
            "Session": .objectPath(FerryBusNames.sessionPath(t.session)),
            "Description": .string(t.description),
            "Destination": .string(t.destination),
            "State": .string(t.state.rawValue),
            "WaitingReason": .string(t.state == .waiting ? t.waitingReason : ""),
            "BytesTransferred": .int64(t.bytesTransferred),
            "BytesExpected": .int64(t.bytesExpected),
            "Rate": .uint64(t.rate),
            "ExpectedEnd": .uint64(t.expectedEnd),
            "Error": .structure([.string(t.errorName), .string(t.errorMessage)]),
            "HttpStatus": .uint32(t.httpStatus),
            "Attempts": .uint32(t.attempts),
            "Resumable": .boolean(t.resumable),
            "Sha256": .string(t.sha256),
            "Response": .bytes(t.response),
            "Created": .uint64(t.created),
            "Started": .uint64(t.started),
            "Completed": .uint64(t.completed),
            "Priority": .int32(t.priority),
            "SpeedLimit": .uint64(t.speedLimit),
        ]
    }

    static func session(_ s: SessionSnapshot, defaultDirectory: String) -> [String: DBusValue] {
        [
            "Identifier": .string(s.identifier),
            "Configuration": OptionParsing.configurationValue(s.configuration, defaultDirectory: defaultDirectory),
            "ActiveTransfers": .uint32(s.activeTransfers),
        ]
    }

    static func manager(_ m: ManagerSnapshot, version: String) -> [String: DBusValue] {
        [
            "Version": .string(version),
            "ActiveTransfers": .uint32(m.activeTransfers),
            "QueuedTransfers": .uint32(m.queuedTransfers),
            "DownloadRate": .uint64(m.downloadRate),
            "UploadRate": .uint64(m.uploadRate),
            "MaxConcurrentTransfers": .uint32(m.maxConcurrentTransfers),
            "SpeedLimit": .uint64(m.speedLimit),
            "NotificationsEnabled": .boolean(m.notificationsEnabled),
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
        return .structure([.uint64(e.serial), .objectPath(FerryBusNames.transferPath(e.transfer)),
                           .string(e.kind.rawValue), .vardict(details)])
    }
}
