import Foundation
internal import DBus
internal import FerryInterface

extension FerrySession {
    /// Queues many downloads in one call, as one group (`Session.DownloadGroup`,
    /// contract v1.2): every item is checked as ``download(from:to:options:)`` checks
    /// it, then all are created, or none — the first bad one throws, its message
    /// starting "item K: " (K from 0). At most 100,000 items.
    /// - Parameters:
    ///   - items: each a URL, where to save it (nil: the session's directory) and its options.
    ///   - description: shown with the group.
    ///   - allOrNothing: a member's final failure cancels the rest, deletes the files of
    ///     those that completed, and the group ends ``FerryGroup/State/failed``.
    ///   - start: false creates every member paused; nil leaves it to each item's options.
    /// - Returns: the group, with a task for each item, in order.
    public func downloadGroup(_ items: [(url: URL, destination: URL?, options: DownloadOptions)], description: String = "",
                              allOrNothing: Bool = false, start: Bool? = nil) async throws -> FerryGroup {
        typealias O = FerryInterface.GroupOption
        var options: [String: DBusValue] = [O.allOrNothing.name: .boolean(allOrNothing)]
        if !description.isEmpty { options[O.description.name] = .string(description) }
        if let start { options[O.start.name] = .boolean(start) }
        let list = DBusValue.array(element: "(sa{sv})", items.map {
            .structure([.string($0.url.absoluteString), .vardict($0.options.busValue(destination: $0.destination))])
        })
        let r = try await core.callSession(FerryInterface.SessionMethod.downloadGroup, [list, .vardict(options)])
        let group = FerryGroup(session: self, path: r.first?.string ?? "/")
        let members = try await group.snapshot().transferPaths
        group.tasks = members.map { core.handOut($0, upload: false) }
        return group
    }
}

/// Downloads made together by ``FerrySession/downloadGroup(_:description:allOrNothing:start:)``,
/// followed and steered as one.
public final class FerryGroup: @unchecked Sendable {
    /// A group's `State`.
    public enum State: String, Sendable, Codable {
        case running, paused, completed, failed, cancelled
    }

    /// The group's properties at one moment.
    public struct Snapshot: Sendable, Equatable {
        public var description: String
        public var state: State
        public var succeeded: Int
        public var failed: Int
        public var cancelled: Int
        public var bytesTransferred: Int64
        public var bytesExpected: Int64
        /// The members' ids, in the items' order (a removed one leaves the list).
        public var transferIDs: [UInt64]
        var transferPaths: [String]

        public init(description: String, state: State, succeeded: Int, failed: Int, cancelled: Int,
                    bytesTransferred: Int64, bytesExpected: Int64, transferIDs: [UInt64]) {
            self.description = description; self.state = state; self.succeeded = succeeded; self.failed = failed
            self.cancelled = cancelled; self.bytesTransferred = bytesTransferred; self.bytesExpected = bytesExpected
            self.transferIDs = transferIDs
            transferPaths = transferIDs.map(FerryInterface.transferPath)
        }
    }

    private let session: FerrySession
    let path: String
    /// A task for each item, in order (set once, when the group is made).
    public internal(set) var tasks: [FerryTask] = []
    /// The group's id (the N of `/org/ferry/Ferry1/group/N`).
    public var id: UInt64 { UInt64(path.split(separator: "/").last ?? "") ?? 0 }

    init(session: FerrySession, path: String) {
        self.session = session
        self.path = path
    }

    /// Its properties now.
    public func snapshot() async throws -> Snapshot {
        typealias G = FerryInterface.GroupProperty
        let r = try await session.core.call(path, StandardNames.properties, "GetAll", [.string(FerryInterface.groupInterface)])
        let p = r.first?.vardict ?? [:]
        let paths = p[G.transfers.name]?.arrayElements?.compactMap(\.string) ?? []
        var s = Snapshot(description: p[G.description.name]?.string ?? "",
                         state: State(rawValue: p[G.state.name]?.string ?? "") ?? .running,
                         succeeded: Int(p[G.succeeded.name]?.uint32 ?? 0), failed: Int(p[G.failed.name]?.uint32 ?? 0),
                         cancelled: Int(p[G.cancelled.name]?.uint32 ?? 0),
                         bytesTransferred: p[G.bytesTransferred.name]?.int64 ?? 0,
                         bytesExpected: p[G.bytesExpected.name]?.int64 ?? 0,
                         transferIDs: paths.map { UInt64($0.split(separator: "/").last ?? "") ?? 0 })
        s.transferPaths = paths
        return s
    }

    /// Pauses its queued, waiting and running downloads.
    public func pause() async throws { try await call(FerryInterface.GroupMethod.pause) }
    /// Resumes its paused and failed downloads.
    public func resume() async throws { try await call(FerryInterface.GroupMethod.resume) }
    /// Cancels every download of it not ended yet; it ends ``State/cancelled``.
    public func cancel() async throws { try await call(FerryInterface.GroupMethod.cancel) }
    /// Forgets the group and its downloads once all have ended (completed files stay).
    public func remove() async throws { try await call(FerryInterface.GroupMethod.remove) }

    private func call(_ method: BusMethod) async throws {
        _ = try await session.core.call(method, on: path)
    }
}
