import DBus
import Dispatch
import FerryCore
import Foundation
import Logging

/// Follows NetworkManager on the system bus and reports whether the network is
/// metered and online, and which connection it goes out through (see
/// `NetworkManagerState` for the rule).
///
/// It reads `Metered`, `Connectivity`, `State` and `PrimaryConnection` of
/// `/org/freedesktop/NetworkManager`,
/// follows their `PropertiesChanged`, and follows NetworkManager leaving and coming
/// back (`NameOwnerChanged`). Without a system bus, or without NetworkManager on it,
/// it reports `NetworkConditions.assumed` (online, not metered) and logs that once.
///
/// The bus work is `SystemBusFollower`'s: its own connection on its own queue, never
/// blocking a caller. `start` returns at once; `onChange` is called on the follower's
/// queue, in order, whenever the conditions change (and once when they are first known).
///
/// `@unchecked Sendable`: the mutable state is confined to the follower's queue;
/// `onChange` and `logger` are immutable.
public final class NetworkMonitor: SystemBusMonitor<NetworkConditions>, @unchecked Sendable {
    public static let busName = "org.freedesktop.NetworkManager"
    public static let path = "/org/freedesktop/NetworkManager"
    public static let interface = "org.freedesktop.NetworkManager"
    static let assuming = "assuming the network is online and not metered"

    /// On the follower's queue, as all below: "absent" was logged since NetworkManager last answered.
    private var saidAbsent = false

    /// - Parameters:
    ///   - connect: opens the system bus on the queue given (tests pass an address);
    ///     by default the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket).
    ///   - onChange: the new conditions, on the monitor's queue.
    public init(logger: Logger = Logger(label: "ferry.network"),
                connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection = { try BusConnection.system(queue: $0) },
                onChange: @escaping @Sendable (NetworkConditions) -> Void) {
        super.init(label: "ferry.network",
                   sources: [.init(name: "NetworkManager", busName: Self.busName, path: Self.path, interface: Self.interface,
                                   properties: NetworkManagerState.propertyNames)],
                   assumed: .assumed, logger: logger, connect: connect, onChange: onChange)
    }

    override func changed(_ change: SystemBusFollower.Change, _ known: SystemBusFollower.Known) {
        switch change {
        case .unavailable(let noBus, let message):
            sayUnavailable(noBus: noBus, message, followed: "NetworkManager", assuming: Self.assuming)
            reports.report(.assumed)
        case .answered, .changed:
            var state = NetworkManagerState()
            state.update(from: known.values[0] ?? [:])
            let first = !present
            present = true
            saidAbsent = false
            reports.report(state.conditions)
            // After the report: once this line is in the log, the core has the state
            // queued before anything a client sends afterwards.
            if first { logger.info("following NetworkManager on the system bus") }
        case .absent(_, let reason, _):
            absent(because: reason)
        case .left:
            absent(because: "NetworkManager left the system bus")
        case .appeared:
            logger.info("NetworkManager is on the system bus")
        case .busLost:
            present = false
            logger.notice("the system bus connection closed; \(Self.assuming)")
            reports.report(.assumed)
        }
    }

    /// Whether NetworkManager answered since it last came (or since the start).
    private var present = false

    private func absent(because reason: String) {
        present = false
        if !saidAbsent {
            saidAbsent = true
            logger.notice("\(reason); \(Self.assuming)")
        }
        reports.report(.assumed)
    }
}
