/// The manager's settings a client sets, kept in the store as `StoredSettings`.
///
/// Rule: `maxConcurrentTransfers` is always within `Limits.concurrentTransfers` (a
/// stored value outside it, from an older or damaged database, gives the default).
struct ManagerSettings {
    static let defaultMaxConcurrentTransfers: UInt32 = 6

    /// How many transfers may run at once.
    private(set) var maxConcurrentTransfers = Self.defaultMaxConcurrentTransfers
    /// Bytes/s over all transfers, 0 = none (before the discretionary policy's cut).
    var speedLimit: UInt64 = 0
    /// Whether AllFinished posts a desktop notification.
    var notificationsEnabled = true

    /// - Throws: `CoreError.invalidArgument` outside `Limits.concurrentTransfers`; then
    ///   nothing changes.
    mutating func setMaxConcurrentTransfers(_ n: UInt32) throws {
        guard Limits.concurrentTransfers.contains(n) else {
            throw CoreError.invalidArgument("MaxConcurrentTransfers is \(n); it must be between \(Limits.concurrentTransfers.lowerBound) and \(Limits.concurrentTransfers.upperBound)")
        }
        maxConcurrentTransfers = n
    }

    /// Takes the stored settings (the schedule is the discretionary policy's).
    mutating func restore(_ stored: StoredSettings) {
        maxConcurrentTransfers = Limits.concurrentTransfers.contains(stored.maxConcurrentTransfers)
            ? stored.maxConcurrentTransfers : Self.defaultMaxConcurrentTransfers
        speedLimit = stored.speedLimit
        notificationsEnabled = stored.notificationsEnabled
    }

    /// What the store keeps, with the schedule's windows.
    func stored(schedule: [ScheduleWindow]) -> StoredSettings {
        StoredSettings(maxConcurrentTransfers: maxConcurrentTransfers, speedLimit: speedLimit,
                       notificationsEnabled: notificationsEnabled, schedule: schedule)
    }
}
