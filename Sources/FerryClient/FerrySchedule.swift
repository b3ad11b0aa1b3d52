import Foundation
internal import DBus
internal import FerryInterface

/// One window of the service's schedule (the Manager's `Schedule`, contract v1.2):
/// on its `days` from `start` to `end`, local time, its `speedLimit` replaces the
/// service's speed limit; a `discretionaryOnly` window lets only discretionary
/// transfers start, and outside such windows discretionary transfers wait.
public struct FerryScheduleWindow: Sendable, Equatable, Codable {
    /// `*`, or day names and ranges separated by commas: `Mon-Fri`, `Sat,Sun`.
    public var days: String
    /// `HH:MM`.
    public var start: String
    /// `HH:MM` (up to `24:00`); not after `start`: the window runs overnight.
    public var end: String
    /// Bytes per second over all transfers while the window is on; nil: none.
    public var speedLimit: UInt64?
    public var discretionaryOnly: Bool

    public init(days: String, start: String, end: String, speedLimit: UInt64? = nil, discretionaryOnly: Bool = false) {
        self.days = days; self.start = start; self.end = end
        self.speedLimit = speedLimit; self.discretionaryOnly = discretionaryOnly
    }

    var busValue: DBusValue {
        .structure([.string(days), .string(start), .string(end), .uint64(speedLimit ?? 0),
                    .vardict(discretionaryOnly ? [FerryInterface.ScheduleExtra.discretionaryOnly.name: .boolean(true)] : [:])])
    }

    init?(bus value: DBusValue) {
        guard let f = value.structFields, f.count == 5, let days = f[0].string, let start = f[1].string,
              let end = f[2].string, let limit = f[3].uint64 else { return nil }
        self.init(days: days, start: start, end: end, speedLimit: limit == 0 ? nil : limit,
                  discretionaryOnly: f[4].vardict?[FerryInterface.ScheduleExtra.discretionaryOnly.name]?.bool ?? false)
    }
}

extension FerryManager {
    /// The service's schedule, in order (empty: none).
    public func schedule() async throws -> [FerryScheduleWindow] {
        let p = try await mapped { try await self.connected().managerProperties() }
        return (p[FerryInterface.ManagerProperty.schedule.name]?.arrayElements ?? []).compactMap(FerryScheduleWindow.init(bus:))
    }

    /// Replaces the service's schedule (an empty list removes it). A bad window throws
    /// ``FerryError/invalidArgument(_:)`` naming it, and changes nothing; a sandboxed
    /// app gets ``FerryError/accessDenied(_:)``.
    public func setSchedule(_ windows: [FerryScheduleWindow]) async throws {
        try await mapped {
            try await self.connected().setManagerProperty(FerryInterface.ManagerProperty.schedule.name,
                                                               .array(element: "(sssta{sv})", windows.map(\.busValue)))
        }
    }
}
