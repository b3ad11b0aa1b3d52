import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A loopback TCP relay between ferryd and a server (nginx) that can cut every
/// connection it carries at once, with whatever was in flight lost: closed (each side
/// reads the end of the stream, as when a server goes away without a GOAWAY) or reset
/// (each side gets an RST, as from a middlebox that drops the connection). TLS passes
/// through untouched (the client still talks to the server's certificate).
/// (`@unchecked Sendable`: its mutable state is guarded by `lock`; the rest is constant.)
final class CuttingProxy: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let targetPort: Int
    private let lock = NSLock()
    /// The open relays: client side and server side of each.
    private var relays: [Int: Relay] = [:]
    private var nextRelay = 0
    private var stopped = false
    private var accepted = 0

    init(to targetPort: Int) throws {
        self.targetPort = targetPort
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 64) == 0 else {
            close(listener)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in acceptLoop() }.start()
    }

    /// Connections accepted so far.
    var connectionsAccepted: Int { lock.withLock { accepted } }

    /// Cuts every connection open now, both sides: with an RST when `reset`, else an
    /// end of stream; returns how many there were.
    @discardableResult
    func cutAll(reset: Bool) -> Int {
        lock.withLock {
            for relay in relays.values { relay.cut(reset: reset) }
            return relays.count
        }
    }

    /// Accepts no more and cuts what is open.
    func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR)) // wakes accept(), whose loop then closes it
        cutAll(reset: false)
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return address
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                break
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            let relay = Relay(client: client, server: server)
            let id: Int? = lock.withLock {
                guard connected == 0, !stopped else { return nil }
                accepted += 1
                nextRelay += 1
                relays[nextRelay] = relay
                return nextRelay
            }
            guard let id else {
                close(client)
                close(server)
                continue
            }
            // Each direction on a thread of its own; the second to end closes both.
            let finish: @Sendable () -> Void = { [self] in
                guard relay.ended() else { return }
                lock.withLock { _ = relays.removeValue(forKey: id) }
                close(client)
                close(server)
            }
            Thread { relay.pump(from: client, to: server); finish() }.start()
            Thread { relay.pump(from: server, to: client); finish() }.start()
        }
        close(listener)
    }

    /// One relayed connection: its two sockets. (`@unchecked Sendable`: the descriptors
    /// are constant, the counters guarded by `lock`.)
    private final class Relay: @unchecked Sendable {
        let client: Int32
        let server: Int32
        private let lock = NSLock()
        private var pumpsEnded = 0
        private var resetting = false

        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }

        /// An end of stream: both directions shut now. A reset: linger 0 and only the
        /// reading shut, which wakes both pumps without a FIN; closing the sockets then
        /// sends each side an RST.
        func cut(reset: Bool) {
            if reset {
                lock.withLock { resetting = true }
                var abort = linger(l_onoff: 1, l_linger: 0)
                for fd in [client, server] {
                    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
                    shutdown(fd, Int32(SHUT_RD))
                }
            } else {
                for fd in [client, server] { shutdown(fd, Int32(SHUT_RDWR)) }
            }
        }

        /// True for the second pump to end (it closes the sockets).
        func ended() -> Bool { lock.withLock { pumpsEnded += 1; return pumpsEnded == 2 } }

        /// Copies until either side ends or fails, then ends the other direction too.
        func pump(from source: Int32, to sink: Int32) {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            copying: while true {
                let n = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break }
                var sent = 0
                while sent < n {
                    let w = buffer.withUnsafeBytes { send(sink, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                    if w < 0, errno == EINTR { continue }
                    guard w > 0 else { break copying }
                    sent += w
                }
            }
            let how = lock.withLock { resetting } ? SHUT_RD : SHUT_RDWR
            shutdown(source, Int32(how))
            shutdown(sink, Int32(how))
        }
    }
}
