import Foundation

/// What the machine's power allows, as the system reports it (UPower and
/// power-profiles-daemon on the system bus; see `FerrySystem.PowerMonitor`).
public struct PowerConditions: Sendable, Equatable, CustomStringConvertible {
    /// Running on battery (UPower `OnBattery`).
    public var onBattery: Bool
    /// The power-saver profile is active (power-profiles-daemon `ActiveProfile`).
    public var powerSaver: Bool

    public init(onBattery: Bool, powerSaver: Bool) {
        self.onBattery = onBattery
        self.powerSaver = powerSaver
    }

    /// What Ferry assumes when nothing tells it otherwise (no UPower, no
    /// power-profiles-daemon): on mains power, no power saving, so nothing waits.
    public static let assumed = PowerConditions(onBattery: false, powerSaver: false)

    public var description: String {
        (onBattery ? "on battery" : "on mains power") + (powerSaver ? ", power-saver profile" : "")
    }
}

/// The rules for discretionary transfers and the schedule's windows, with their state:
/// the power conditions, the schedule and which window is on. The coordinator holds one
/// and asks it; nothing else decides who waits for power or for the schedule.
///
/// A transfer is discretionary by its `discretionary` option, or, without one, by its
/// session's `discretionary` key. It waits (state `waiting`) with the first reason that
/// applies, in this order (`offline` comes before all, from the network policy):
/// - `metered` — the network is metered (whatever the session's `allow-metered`);
/// - `battery` — the machine runs on battery;
/// - `power-saver` — the power-saver profile is active;
/// - `schedule` — the schedule has a `discretionary-only` window and none is on now.
/// A running discretionary transfer that has to wait stops at a resumable point, as for
/// the network; it goes on by itself when the reason clears.
///
/// A transfer that is not discretionary waits for the schedule only while a
/// `discretionary-only` window is on, and only to start: one that is running goes on;
/// one that is queued (new, resumed, retried) waits with reason `schedule` until the
/// window ends. Power never holds it back.
///
/// Inside a window its `speed_limit` replaces the Manager's `SpeedLimit` (0 = none);
/// outside every window `SpeedLimit` applies and nothing else changes.
struct DiscretionaryPolicy {
    private(set) var power = PowerConditions.assumed
    private(set) var schedule = ScheduleWindows()
    /// The window on, as of the last `evaluate`.
    private(set) var activeWindow: ScheduleWindow?
    /// The next edge the timeline was given (µs), nil when none.
    private(set) var edgeDue: UInt64?

    /// Why a transfer must wait, nil when it may run.
    /// - Parameters:
    ///   - discretionary: the transfer is discretionary (option or session key).
    ///   - running: it runs now (a non-discretionary one is only kept from starting).
    ///   - metered: the network is metered.
    func blocker(discretionary: Bool, running: Bool, metered: Bool) -> WaitingReason? {
        if discretionary {
            if metered { return .metered }
            if power.onBattery { return .battery }
            if power.powerSaver { return .powerSaver }
            if schedule.hasDiscretionaryOnlyWindow && activeWindow?.discretionaryOnly != true { return .schedule }
            return nil
        }
        if !running && activeWindow?.discretionaryOnly == true { return .schedule }
        return nil
    }

    /// The global speed limit now: the window's while one is on, else `manual`.
    func globalSpeedLimit(manual: UInt64) -> UInt64 {
        activeWindow?.speedLimit ?? manual
    }

    /// Takes new power conditions; true when they changed.
    mutating func setPower(_ new: PowerConditions) -> Bool {
        guard new != power else { return false }
        power = new
        return true
    }

    /// Takes a new (checked) schedule; the caller evaluates it next.
    mutating func setSchedule(_ new: ScheduleWindows) {
        schedule = new
    }

    /// Decides which window is on at `now` and when to look again.
    /// - Parameter zone: read only when there is a schedule: the local time zone and its
    ///   calendar load ICU's tables (1.7 MiB of ferryd's memory), which a daemon without
    ///   a schedule never needs.
    /// - Returns: whether the window on changed, and the next edge (µs) to put on the
    ///   timeline when it is a new one (nil when the timeline already has it or there is none).
    mutating func evaluate(now: UInt64, zone: () -> TimeZone) -> (changed: Bool, newEdge: UInt64?) {
        var window: ScheduleWindow?
        var edge: UInt64?
        if !schedule.isEmpty {
            let date = Date(timeIntervalSince1970: Double(now) / 1_000_000)
            let zone = zone()
            window = schedule.activeWindow(at: date, in: zone)
            edge = schedule.nextEdge(after: date, in: zone).map { UInt64(max(0, $0.timeIntervalSince1970) * 1_000_000) }
        }
        let changed = window != activeWindow
        activeWindow = window
        guard edge != edgeDue else { return (changed, nil) }
        edgeDue = edge
        return (changed, edge)
    }

    /// Whether a timeline entry due at `due` is the current edge (older ones are stale).
    func isCurrentEdge(_ due: UInt64) -> Bool { due == edgeDue }

    /// The edge came: the timeline no longer holds it.
    mutating func edgeTaken() { edgeDue = nil }
}
