/// What the network allows, as the system reports it (NetworkManager on the system
/// bus; see `FerrySystem.NetworkMonitor`).
public struct NetworkConditions: Sendable, Equatable, CustomStringConvertible {
    /// The connection costs money or data allowance (`allowsExpensiveNetworkAccess`).
    public var metered: Bool
    /// There is a connection at all; false = nothing can reach a server.
    public var online: Bool

    public init(metered: Bool, online: Bool) {
        self.metered = metered
        self.online = online
    }

    /// What Ferry assumes when nothing tells it otherwise (no NetworkManager): it
    /// lets transfers run, and their own errors say whether the network works.
    public static let assumed = NetworkConditions(metered: false, online: true)

    public var description: String {
        (online ? "online" : "offline") + ", " + (metered ? "metered" : "not metered")
    }
}
