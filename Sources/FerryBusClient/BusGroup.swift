import DBus
import FerryInterface
import Foundation

/// A group object (`org.ferry.Ferry1.Group`, v1.2): downloads made by one
/// `Session.DownloadGroup` call.
public struct BusGroup: BusObject {
    public let client: BusClient
    /// `/org/ferry/Ferry1/group/N`.
    public let path: String

    public init(client: BusClient, path: String) { (self.client, self.path) = (client, path) }

    public func pause() async throws { try await client.bus.call(FerryInterface.GroupMethod.pause, on: path) }
    public func resume() async throws { try await client.bus.call(FerryInterface.GroupMethod.resume, on: path) }
    public func cancel() async throws { try await client.bus.call(FerryInterface.GroupMethod.cancel, on: path) }
    public func remove() async throws { try await client.bus.call(FerryInterface.GroupMethod.remove, on: path) }

    public func info() async throws -> GroupInfo {
        GroupInfo(path: path, properties: try await client.getAll(path, FerryInterface.groupInterface))
    }
}

/// A group's properties, typed.
public struct GroupInfo: Sendable, Equatable {
    public var path: String
    public var session: String
    public var description: String
    public var transfers: [String]
    public var state: String
    public var succeeded: UInt32
    public var failed: UInt32
    public var cancelled: UInt32
    public var bytesTransferred: Int64
    public var bytesExpected: Int64

    public init(path: String, properties p: [String: DBusValue]) {
        typealias G = FerryInterface.GroupProperty
        self.path = path
        session = p[G.session.name]?.string ?? "/"
        description = p[G.description.name]?.string ?? ""
        transfers = p[G.transfers.name]?.arrayElements?.compactMap(\.string) ?? []
        state = p[G.state.name]?.string ?? ""
        succeeded = p[G.succeeded.name]?.uint32 ?? 0
        failed = p[G.failed.name]?.uint32 ?? 0
        cancelled = p[G.cancelled.name]?.uint32 ?? 0
        bytesTransferred = p[G.bytesTransferred.name]?.int64 ?? 0
        bytesExpected = p[G.bytesExpected.name]?.int64 ?? 0
    }
}
