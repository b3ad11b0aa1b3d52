import DBus
import FerryCore

/// NetworkManager's view of the network, as its manager object's properties say, and
/// what Ferry makes of it.
///
/// Online or not comes from `Connectivity` (NMConnectivityState): only `NONE` (1),
/// "no active connection with a default route", means offline. `PORTAL` (2) and
/// `LIMITED` (3) still count as online: the server may be on the local network or
/// behind a proxy, and a transfer that cannot reach it fails and retries as usual,
/// except that behind a `PORTAL` its failures wait for the sign-in and spend no retry
/// (`NetworkConditions.portal`, `TransferCoordinator.attemptFailed`).
/// `Connectivity` is NetworkManager's own reachability verdict (GLib's network
/// monitor uses it too); the coarser `State` (NMState) is consulted only while
/// `Connectivity` is `UNKNOWN` (0: checks disabled, or not run yet): `ASLEEP` (10)
/// up to `CONNECTING` (40) means no connection is up, so offline.
///
/// Metered comes from `Metered` (NMMetered): `YES` (1) and `GUESS_YES` (3) are
/// metered; `NO`, `GUESS_NO` and `UNKNOWN` are not.
///
/// The route comes from `PrimaryConnection`: the active connection that holds the
/// default route (`/` when none). When it changes from one to another, the machine
/// moved to another network (`NetworkConditions.route`).
public struct NetworkManagerState: Sendable, Equatable {
    public var metered: UInt32?
    public var connectivity: UInt32?
    public var state: UInt32?
    public var primaryConnection: String?

    public init(metered: UInt32? = nil, connectivity: UInt32? = nil, state: UInt32? = nil, primaryConnection: String? = nil) {
        self.metered = metered
        self.connectivity = connectivity
        self.state = state
        self.primaryConnection = primaryConnection
    }

    /// The properties this reads.
    public static let propertyNames: Set<String> = ["Metered", "Connectivity", "State", "PrimaryConnection"]

    /// Takes the values present in `properties` (variants unwrapped or not); keeps
    /// the others. A value of the wrong type counts as unknown. Returns whether one
    /// of ours was there.
    @discardableResult
    public mutating func update(from properties: [String: DBusValue]) -> Bool {
        var touched = false
        if let v = properties["Metered"] { metered = v.uint32; touched = true }
        if let v = properties["Connectivity"] { connectivity = v.uint32; touched = true }
        if let v = properties["State"] { state = v.uint32; touched = true }
        if let v = properties["PrimaryConnection"] {
            if case .objectPath(let path) = v.unwrapped { primaryConnection = path } else { primaryConnection = nil }
            touched = true
        }
        return touched
    }

    public var isMetered: Bool { metered == 1 || metered == 3 }

    public var isOnline: Bool {
        switch connectivity {
        case 1: return false
        case 2, 3, 4: return true
        default:
            guard let state else { return true }
            return !(10..<50).contains(state)
        }
    }

    /// `Connectivity` is `PORTAL` (2): NetworkManager's check was answered by a sign-in
    /// page instead of the internet.
    public var isBehindPortal: Bool { connectivity == 2 }

    /// The primary connection's object path; nil when there is none (`/`) or it is not known.
    public var route: String? {
        guard let primaryConnection, primaryConnection != "/" else { return nil }
        return primaryConnection
    }

    public var conditions: NetworkConditions {
        NetworkConditions(metered: isMetered, online: isOnline, portal: isBehindPortal, route: route)
    }
}
