/// What the manager last told the bus: the snapshot its last managerChanged carried,
/// and when its rates last went out with a progress event.
///
/// Rules: a snapshot is announced only when it differs from the last one in more than
/// its rates (rates have no change signal); rates go out with progress at most once a
/// second, and at once when the clock went back.
struct PublishedManager {
    /// The snapshot of the last managerChanged (or the restored one).
    private(set) var last = ManagerSnapshot()
    /// When the rates last went with a progress event (µs).
    private var ratesSentAt: UInt64 = 0

    /// Whether `current` must be announced; if so, it is the last one from now on.
    mutating func announces(_ current: ManagerSnapshot) -> Bool {
        var comparable = current
        comparable.downloadRate = last.downloadRate
        comparable.uploadRate = last.uploadRate
        guard comparable != last else { return false }
        last = current
        return true
    }

    /// Takes `current` as announced (what a restart carries on from needs no signal).
    mutating func assume(_ current: ManagerSnapshot) {
        last = current
    }

    /// Whether the rates go with a progress event made at `now` (µs); if so, they are
    /// taken as sent then.
    mutating func ratesDue(at now: UInt64) -> Bool {
        guard now >= ratesSentAt &+ 1_000_000 || now < ratesSentAt else { return false }
        ratesSentAt = now
        return true
    }
}
