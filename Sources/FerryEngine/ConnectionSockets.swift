import CCurl
import Glibc

/// Every socket of the engine's connections: libcurl opens and closes them through
/// this registry's callbacks (set on each handle as it joins the multi), so the engine
/// can end the connections of a network it has left (`shutDown(sparing:)`), which
/// libcurl's API cannot: its connection cache has no call to drop idle connections.
///
/// Engine thread only (libcurl calls the callbacks from `curl_multi_perform`,
/// `curl_multi_remove_handle` and `curl_multi_cleanup`, all on it). A connection keeps
/// the registry of the handle that made it, so the loop keeps the registry until after
/// `curl_multi_cleanup`.
final class ConnectionSockets {
    /// A TCP connection as both ends see it: the local and the peer's (the server's or
    /// the proxy's) address and port, as "ADDRESS PORT" (the address as `inet_ntop`
    /// writes it, as libcurl reports it).
    struct Ends: Hashable {
        let local: String
        let peer: String
    }

    private var open: Set<Int32> = []
    /// Sockets made before the network moved that a request going on still used then
    /// (`shutDown(sparing:)`), each with whether its connection may carry other
    /// requests as streams (HTTP/2, or not known): shut down as soon as no request uses
    /// it (`shutDownCondemned`).
    private var condemned: [Int32: Bool] = [:]

    /// Sockets open now.
    var count: Int { open.count }

    /// Some connection of the old network is in use and could take a new request as a
    /// stream (an HTTP/1.1 one in use takes none, and is shut down once free).
    var hasCondemnedShared: Bool { condemned.values.contains(true) }

    /// Has `easy`'s connections open and close their sockets here.
    func track(_ easy: UnsafeMutableRawPointer) -> CURLcode {
        ferry_easy_track_sockets(easy, connectionSocketOpened, connectionSocketClosing,
                                 Unmanaged.passUnretained(self).toOpaque())
    }

    fileprivate func opened(_ fd: Int32) { open.insert(fd) }
    fileprivate func closing(_ fd: Int32) {
        open.remove(fd)
        condemned[fd] = nil
    }

    /// Shuts down every socket (both ways) but those of connections in `sparing` (the
    /// requests that go on, with whether their connection may be shared), which are
    /// condemned instead. libcurl then finds such a connection closed, at its check
    /// before reusing an idle one or at its next read, and opens a new one; it still
    /// closes the socket itself. Returns how many were shut down.
    func shutDown(sparing inUse: [Ends: Bool]) -> Int {
        var count = 0
        for fd in open {
            if !inUse.isEmpty, let ends = Self.ends(of: fd), let shared = inUse[ends] {
                condemned[fd] = shared
                continue
            }
            if Glibc.shutdown(fd, Int32(SHUT_RDWR)) == 0 { count += 1 }
        }
        return count
    }

    /// Shuts down the condemned sockets no request in `inUse` uses any more.
    func shutDownCondemned(inUse: [Ends: Bool]) {
        for fd in condemned.keys {
            if let ends = Self.ends(of: fd), inUse[ends] != nil { continue }
            condemned[fd] = nil
            _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
        }
    }

    /// Whether any socket is condemned (`shutDownCondemned` has work).
    var hasCondemned: Bool { !condemned.isEmpty }

    /// `fd`'s two ends (TCP over IPv4 or IPv6), nil if not connected.
    static func ends(of fd: Int32) -> Ends? {
        guard let local = address(fd, getsockname), let peer = address(fd, getpeername) else { return nil }
        return Ends(local: local, peer: peer)
    }

    private static func address(_ fd: Int32, _ name: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> String? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { name(fd, $0, &length) }
        }
        guard rc == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let port: UInt16
        switch Int32(storage.ss_family) {
        case AF_INET:
            port = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    _ = inet_ntop(AF_INET, &$0.pointee.sin_addr, &text, socklen_t(text.count))
                    return UInt16(bigEndian: $0.pointee.sin_port)
                }
            }
        case AF_INET6:
            port = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    _ = inet_ntop(AF_INET6, &$0.pointee.sin6_addr, &text, socklen_t(text.count))
                    return UInt16(bigEndian: $0.pointee.sin6_port)
                }
            }
        default:
            return nil
        }
        return end(String(cString: text), Int(port))
    }

    /// One end as `Ends` holds it.
    static func end(_ address: String, _ port: Int) -> String { "\(address) \(port)" }
}

/// libcurl's open-socket callback: the socket it would open itself (close-on-exec:
/// ferryd's child processes get none), recorded.
private let connectionSocketOpened: curl_opensocket_callback = { registry, _, address in
    guard let registry, let address else { return CURL_SOCKET_BAD }
    let fd = socket(address.pointee.family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
    guard fd >= 0 else { return CURL_SOCKET_BAD }
    Unmanaged<ConnectionSockets>.fromOpaque(registry).takeUnretainedValue().opened(fd)
    return fd
}

/// libcurl's close-socket callback: forgotten, then closed.
private let connectionSocketClosing: curl_closesocket_callback = { registry, fd in
    if let registry { Unmanaged<ConnectionSockets>.fromOpaque(registry).takeUnretainedValue().closing(fd) }
    return close(fd)
}
