import DBus
import FerryCore

/// The desktop's proxy settings through the XDG desktop portal
/// (`org.freedesktop.portal.ProxyResolver.Lookup(s uri) -> as proxies`, on the session
/// bus): what GNOME's or KDE's network settings say, a PAC script run for the URL
/// included, as the portal's own `GProxyResolver` answers for every application.
/// ferryd asks it for the requests that neither their session nor its environment give
/// a proxy (`DesktopProxyLookup`). The call may start the portal (bus activation). Where
/// the portal is not there, or has no `ProxyResolver`, the answer is `.unavailable`.
///
/// Asked with an origin only (`scheme://host:port/`): a path or credentials never
/// leave the daemon. Of the answer, at most `DesktopProxyAnswer.maximumProxies` strings
/// are looked at.
public struct PortalProxyResolver: DesktopProxyLookup {
    public static let busName = "org.freedesktop.portal.Desktop"
    public static let path = "/org/freedesktop/portal/desktop"
    public static let interface = "org.freedesktop.portal.ProxyResolver"
    /// How long an answer is waited for (the portal may be starting, or running a PAC
    /// script); then requests go direct for a while (`DesktopProxies.failedFor`).
    public static let timeout: Double = 5

    private let bus: BusConnection

    public init(bus: BusConnection) {
        self.bus = bus
    }

    public func lookup(_ origin: String, answer: @escaping @Sendable (DesktopProxyAnswer) -> Void) {
        let call: BusMessage
        do {
            call = try BusMessage.methodCall(destination: Self.busName, path: Self.path, interface: Self.interface, member: "Lookup")
            try call.append(.string(origin))
        } catch {
            return answer(.failed("cannot build the call: \(error)"))
        }
        bus.send(call, timeout: Self.timeout) { result in
            switch result {
            case .success(let reply):
                guard let list = (try? reply.arguments())?.first?.arrayElements else {
                    return answer(.failed("the portal's answer is not a list of proxies"))
                }
                answer(.proxies(list.prefix(DesktopProxyAnswer.maximumProxies).compactMap(\.string)))
            case .failure(let error) where Self.absent.contains(error.name) || error.name.hasPrefix(Self.spawnErrors):
                answer(.unavailable(Self.shown(error)))
            case .failure(let error):
                answer(.failed(Self.shown(error)))
            }
        }
    }

    /// An error for the log: whoever owns the portal's name wrote its message, so it is
    /// clipped and has no control characters.
    static func shown(_ error: BusError) -> String {
        let text = "\(error.name): \(error.message)"
        return String(String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }).prefix(300))
    }

    /// The errors that say no portal with a `ProxyResolver` is here.
    static let absent: Set<String> = [StandardErrors.serviceUnknown, StandardErrors.nameHasNoOwner,
                                      StandardErrors.unknownMethod, StandardErrors.unknownInterface,
                                      StandardErrors.unknownObject]
    /// The bus could not start the portal (`…Spawn.ChildExited` and the like).
    static let spawnErrors = "org.freedesktop.DBus.Error.Spawn."
}
