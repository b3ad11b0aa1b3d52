/// Where the engine asks which proxy a request goes through when neither its session
/// (`proxy`) nor ferryd's environment (`http_proxy`, `https_proxy`, `all_proxy`) names
/// one: the desktop's proxy settings, as the XDG desktop portal's `ProxyResolver` gives
/// them (FerrySystem's `PortalProxyResolver`). The engine asks once per origin and
/// keeps the answer a minute, and until the network moves.
public protocol DesktopProxyLookup: Sendable {
    /// Asks which proxies `origin` goes through (`scheme://host:port/`: never a path or
    /// credentials, which stay in the daemon). `answer` is called once, on any thread.
    func lookup(_ origin: String, answer: @escaping @Sendable (DesktopProxyAnswer) -> Void)
}

public enum DesktopProxyAnswer: Sendable, Equatable {
    /// Of an answer, the proxies looked at (the rest are dropped where it is read).
    public static let maximumProxies = 32

    /// The proxies to try, in order, as URLs; `direct://` for none.
    case proxies([String])
    /// Nothing on this machine answers the question (no portal): requests go direct.
    case unavailable(String)
    /// The question failed this time (timed out, refused): this origin goes direct.
    case failed(String)
}
