import DBus
import FerryInterface
import Foundation

/// A transfer object.
public struct FerryTransfer: BusObject {
    public let client: BusClient
    /// `/org/ferry/Ferry1/transfer/N`.
    public let path: String

    public init(client: BusClient, path: String) { (self.client, self.path) = (client, path) }

    func call(_ method: BusMethod, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.bus.call(method, on: path, args)
    }

    /// Stops the transfer, keeping the partial file; returns the resume data
    /// (empty when the server cannot resume).
    @discardableResult
    public func pause() async throws -> [UInt8] { try await call(FerryInterface.TransferMethod.pause).first?.bytes ?? [] }
    public func resume() async throws { _ = try await call(FerryInterface.TransferMethod.resume) }
    public func cancel() async throws { _ = try await call(FerryInterface.TransferMethod.cancel) }
    public func remove() async throws { _ = try await call(FerryInterface.TransferMethod.remove) }
    public func setURL(_ url: String) async throws { _ = try await call(FerryInterface.TransferMethod.setURL, [.string(url)]) }

    public func info() async throws -> TransferInfo {
        TransferInfo(id: id, path: path, properties: try await client.getAll(path, BusClient.transferInterface))
    }

    public func setProperty(_ name: String, _ value: DBusValue) async throws {
        try await client.bus.call(destination: BusClient.busName, path: path, interface: StandardNames.properties,
                                  method: "Set", arguments: [.string(BusClient.transferInterface), .string(name), .variant(value)])
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
    /// An upload's server answer: its first 64 KiB (v1.1 `Response`), empty when none.
    public var response: [UInt8]
    /// While waiting for a time (a retry, `start-after`): when it is tried again (µs
    /// since the epoch, the `NextAttempt` addition); 0 otherwise or from an older ferryd.
    public var nextAttempt: UInt64
    /// Why a download that asked for several connections runs on one (the
    /// `SingleConnectionReason` addition); "" otherwise.
    public var singleConnectionReason: String
    /// Why a download runs on fewer connections than it asked for (the
    /// `ConnectionLimitReason` addition); "" otherwise.
    public var connectionLimitReason: String
    /// The object path of the group it was made in (v1.2 `Group`); "/" when none, ""
    /// from an older ferryd.
    public var group: String
    /// The download's `mirrors` (v1.2 `Mirrors`), without credentials; empty when none.
    public var mirrors: [String]
    /// The `pieces` option's piece length and number of pieces (v1.2 `Pieces`); 0 when none.
    public var pieceLength: UInt64
    public var pieceCount: UInt32

    private typealias T = FerryInterface.TransferProperty

    /// Each transfer property with the field it sets (a value of another type gives the
    /// field's default): the one place a client says what a property means.
    private static let readers: [String: @Sendable (inout TransferInfo, DBusValue) -> Void] = [
        T.kind.name: { $0.kind = $1.string ?? "" },
        T.session.name: { $0.session = $1.string ?? "" },
        T.url.name: { $0.url = $1.string ?? "" },
        T.description.name: { $0.description = $1.string ?? "" },
        T.destination.name: { $0.destination = $1.string ?? "" },
        T.state.name: { $0.state = $1.string ?? "" },
        T.waitingReason.name: { $0.waitingReason = $1.string ?? "" },
        T.bytesTransferred.name: { $0.bytesTransferred = $1.int64 ?? 0 },
        T.bytesExpected.name: { $0.bytesExpected = $1.int64 ?? -1 },
        T.rate.name: { $0.rate = $1.uint64 ?? 0 },
        T.expectedEnd.name: { $0.expectedEnd = $1.uint64 ?? 0 },
        T.error.name: { info, value in
            let error = value.structFields ?? []
            info.errorName = error.first?.string ?? ""
            info.errorMessage = error.dropFirst().first?.string ?? ""
        },
        T.httpStatus.name: { $0.httpStatus = $1.uint32 ?? 0 },
        T.attempts.name: { $0.attempts = $1.uint32 ?? 0 },
        T.resumable.name: { $0.resumable = $1.bool ?? false },
        T.sha256.name: { $0.sha256 = $1.string ?? "" },
        T.created.name: { $0.created = $1.uint64 ?? 0 },
        T.started.name: { $0.started = $1.uint64 ?? 0 },
        T.completed.name: { $0.completed = $1.uint64 ?? 0 },
        T.priority.name: { $0.priority = $1.int32 ?? 0 },
        T.speedLimit.name: { $0.speedLimit = $1.uint64 ?? 0 },
        T.response.name: { $0.response = $1.bytes ?? [] },
        T.nextAttempt.name: { $0.nextAttempt = $1.uint64 ?? 0 },
        T.singleConnectionReason.name: { $0.singleConnectionReason = $1.string ?? "" },
        T.group.name: { $0.group = $1.string ?? "" },
        T.connectionLimitReason.name: { $0.connectionLimitReason = $1.string ?? "" },
        T.mirrors.name: { $0.mirrors = $1.arrayElements?.compactMap(\.string) ?? [] },
        T.pieces.name: { info, value in
            let fields = value.structFields ?? []
            info.pieceLength = fields.first?.uint64 ?? 0
            info.pieceCount = fields.dropFirst().first?.uint32 ?? 0
        },
    ]

    /// A transfer with no properties known: every field at its default.
    public init(id: UInt64, path: String) {
        self.id = id
        self.path = path
        kind = ""; session = ""; url = ""; description = ""; destination = ""; state = ""; waitingReason = ""
        bytesTransferred = 0; bytesExpected = -1; rate = 0; expectedEnd = 0
        errorName = ""; errorMessage = ""; httpStatus = 0; attempts = 0; resumable = false; sha256 = ""
        created = 0; started = 0; completed = 0; priority = 0; speedLimit = 0; response = []
        nextAttempt = 0; singleConnectionReason = ""; connectionLimitReason = ""; group = ""
        mirrors = []; pieceLength = 0; pieceCount = 0
    }

    /// From `GetAll`/`GetManagedObjects` entries in one pass (no dictionary: a
    /// listing of 10,000 transfers reads 240,000 of them).
    public init(id: UInt64, path: String, entries: [DBusValue.DictEntry]) {
        self.init(id: id, path: path)
        for e in entries {
            guard case .string(let key) = e.key else { continue }
            Self.readers[key]?(&self, e.value)
        }
    }

    public init(id: UInt64, path: String, properties p: [String: DBusValue]) {
        self.init(id: id, path: path)
        apply(p)
    }

    /// Takes a `ListTransferProperties` column: `values[k]` is property `name` of
    /// `transfers[k]`. A name that is not a transfer property is ignored.
    static func apply(column name: String, _ values: [DBusValue], to transfers: inout [TransferInfo]) {
        guard let read = readers[name] else { return }
        for k in values.indices where k < transfers.count { read(&transfers[k], values[k]) } // counts checked by the caller
    }

    /// Takes one property's value; a name that is not a transfer property is ignored.
    public mutating func apply(property name: String, _ value: DBusValue) {
        Self.readers[name]?(&self, value)
    }

    /// Takes the values of a `PropertiesChanged` (or any property dictionary); names
    /// that are not transfer properties are ignored.
    public mutating func apply(_ changed: [String: DBusValue]) {
        for (name, value) in changed { Self.readers[name]?(&self, value) }
    }

    /// completed, failed or cancelled.
    public var isFinal: Bool { ["completed", "failed", "cancelled"].contains(state) }
}
