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

    public init(metered: Bool, online: Bool, portal: Bool = false) {
        self.metered = metered
        self.online = online
        self.portal = portal
    }

    /// What Ferry assumes when nothing tells it otherwise (no NetworkManager): it
    /// lets transfers run, and their own errors say whether the network works.
    public static let assumed = NetworkConditions(metered: false, online: true)

    public var description: String {
        (online ? "online" : "offline") + ", " + (metered ? "metered" : "not metered") + (portal ? ", behind a sign-in page" : "")
    }
}
