import DBus
import Foundation

/// A transfer object.
public struct FerryTransfer: Sendable, Hashable {
    public let client: FerryClient
    public let path: String

    /// The transfer object at `path` (`/org/ferry/Ferry1/transfer/N`).
    public init(client: FerryClient, path: String) {
        self.client = client
        self.path = path
    }

    public static func == (a: FerryTransfer, b: FerryTransfer) -> Bool { a.path == b.path }
    public func hash(into h: inout Hasher) { h.combine(path) }

    /// The id in the object path (what the CLI shows).
    public var id: UInt64 { UInt64(path.split(separator: "/").last ?? "") ?? 0 }

    func call(_ method: String, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.bus.call(destination: FerryClient.busName, path: path, interface: FerryClient.transferInterface,
                                  method: method, arguments: args)
    }

    /// Stops the transfer, keeping the partial file; returns the resume data
    /// (empty when the server cannot resume).
    @discardableResult
    public func pause() async throws -> [UInt8] { try await call("Pause").first?.bytes ?? [] }
    public func resume() async throws { _ = try await call("Resume") }
    public func cancel() async throws { _ = try await call("Cancel") }
    public func remove() async throws { _ = try await call("Remove") }
    public func setURL(_ url: String) async throws { _ = try await call("SetUrl", [.string(url)]) }

    public func info() async throws -> TransferInfo {
        TransferInfo(id: id, path: path, properties: try await client.getAll(path, FerryClient.transferInterface))
    }

    public func setProperty(_ name: String, _ value: DBusValue) async throws {
        try await client.bus.call(destination: FerryClient.busName, path: path, interface: StandardNames.properties,
                                  method: "Set", arguments: [.string(FerryClient.transferInterface), .string(name), .variant(value)])
    }
}

/// A transfer's properties, typed.
public struct TransferInfo: Sendable, Equatable {
    public var id: UInt64
    public var path: String
    public var kind: String
    /// The object path of the transfer's session.
    public var session: String
    public var url: String
    public var description: String
    public var destination: String
    public var state: String
    public var waitingReason: String
    public var bytesTransferred: Int64
    public var bytesExpected: Int64
    public var rate: UInt64
    public var expectedEnd: UInt64
    public var errorName: String
    public var errorMessage: String
    public var httpStatus: UInt32
    public var attempts: UInt32
    public var resumable: Bool
    public var sha256: String
    public var created: UInt64
    public var started: UInt64
    public var completed: UInt64
    public var priority: Int32
    public var speedLimit: UInt64

    /// From `GetAll`/`GetManagedObjects` entries in one pass (no dictionary: a
    /// listing of 10,000 transfers reads 240,000 of them).
    public init(id: UInt64, path: String, entries: [DBusValue.DictEntry]) {
        self.init(id: id, path: path, properties: [:])
        for e in entries {
            guard case .string(let key) = e.key else { continue }
            let v = e.value
            switch key {
            case "Kind": kind = v.string ?? ""
            case "Session": session = v.string ?? ""
            case "Url": url = v.string ?? ""
            case "Description": description = v.string ?? ""
            case "Destination": destination = v.string ?? ""
            case "State": state = v.string ?? ""
            case "WaitingReason": waitingReason = v.string ?? ""
            case "BytesTransferred": bytesTransferred = v.int64 ?? 0
            case "BytesExpected": bytesExpected = v.int64 ?? -1
            case "Rate": rate = v.uint64 ?? 0
            case "ExpectedEnd": expectedEnd = v.uint64 ?? 0
            case "Error":
                let error = v.structFields ?? []
                errorName = error.first?.string ?? ""
                errorMessage = error.dropFirst().first?.string ?? ""
            case "HttpStatus": httpStatus = v.uint32 ?? 0
            case "Attempts": attempts = v.uint32 ?? 0
            case "Resumable": resumable = v.bool ?? false
            case "Sha256": sha256 = v.string ?? ""
            case "Created": created = v.uint64 ?? 0
            case "Started": started = v.uint64 ?? 0
            case "Completed": completed = v.uint64 ?? 0
            case "Priority": priority = v.int32 ?? 0
            case "SpeedLimit": speedLimit = v.uint64 ?? 0
            default: break
            }
        }
    }

    public init(id: UInt64, path: String, properties p: [String: DBusValue]) {
        self.id = id
        self.path = path
        kind = p["Kind"]?.string ?? ""
        session = p["Session"]?.string ?? ""
        url = p["Url"]?.string ?? ""
        description = p["Description"]?.string ?? ""
        destination = p["Destination"]?.string ?? ""
        state = p["State"]?.string ?? ""
        waitingReason = p["WaitingReason"]?.string ?? ""
        bytesTransferred = p["BytesTransferred"]?.int64 ?? 0
        bytesExpected = p["BytesExpected"]?.int64 ?? -1
        rate = p["Rate"]?.uint64 ?? 0
        expectedEnd = p["ExpectedEnd"]?.uint64 ?? 0
        let error = p["Error"]?.structFields ?? []
        errorName = error.first?.string ?? ""
        errorMessage = error.dropFirst().first?.string ?? ""
        httpStatus = p["HttpStatus"]?.uint32 ?? 0
        attempts = p["Attempts"]?.uint32 ?? 0
        resumable = p["Resumable"]?.bool ?? false
        sha256 = p["Sha256"]?.string ?? ""
        created = p["Created"]?.uint64 ?? 0
        started = p["Started"]?.uint64 ?? 0
        completed = p["Completed"]?.uint64 ?? 0
        priority = p["Priority"]?.int32 ?? 0
        speedLimit = p["SpeedLimit"]?.uint64 ?? 0
    }

    /// completed, failed or cancelled.
    public var isFinal: Bool { ["completed", "failed", "cancelled"].contains(state) }
}
