/// What the network allows, as the system reports it (NetworkManager on the system
/// bus; see `FerrySystem.NetworkMonitor`).
public struct NetworkConditions: Sendable, Equatable, CustomStringConvertible {
    /// The connection costs money or data allowance (`allowsExpensiveNetworkAccess`).
    public var metered: Bool
    /// There is a connection at all; false = nothing can reach a server.
    public var online: Bool
    /// The network wants a sign-in first (a captive portal, as on hotel or train
    /// Wi-Fi): it intercepts what goes beyond it until the user signs in on its page.
    public var portal: Bool
    /// Which connection the traffic goes out through (NetworkManager's
    /// `PrimaryConnection`, the active connection holding the default route), nil
    /// when not known or none. A change from one to another (Wi-Fi to wired, a VPN)
    /// is a move to another network: connections made on the old one may be dead
    /// without a word (`TransferCoordinator.networkMoved`).
    public var route: String?

    public init(metered: Bool, online: Bool, portal: Bool = false, route: String? = nil) {
        self.metered = metered
        self.online = online
        self.portal = portal
        self.route = route
    }

    /// What Ferry assumes when nothing tells it otherwise (no NetworkManager): it
    /// lets transfers run, and their own errors say whether the network works.
    public static let assumed = NetworkConditions(metered: false, online: true)

    public var description: String {
        (online ? "online" : "offline") + ", " + (metered ? "metered" : "not metered") + (portal ? ", behind a sign-in page" : "")
    }
}
