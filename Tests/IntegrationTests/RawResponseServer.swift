import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A loopback server that answers every connection with fixed bytes and then closes
/// it: for replies no well-behaved HTTP server would send (HTTP/0.9, a lying or
/// impossible Content-Length, a body of unknown length ended by closing).
final class RawResponseServer: @unchecked Sendable {
    private let listener: Int32
    let port: Int
    /// Path -> the whole reply (status line, headers, body), as bytes.
    private let replies: [String: [UInt8]]
    private let lock = NSLock()
    private var stopped = false

    init(replies: [String: [UInt8]]) throws {
        self.replies = replies
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    func stop() {
        lock.lock(); stopped = true; lock.unlock()
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                lock.lock(); let done = stopped; lock.unlock()
                if done || errno == EBADF || errno == EINVAL { return }
                continue
            }
            Thread { [self] in serve(connection) }.start()
        }
    }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        var request = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !request.containsHeaderEnd {
            let n = buffer.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            request += buffer[0..<n]
        }
        let firstLine = String(decoding: request.prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self)
        let target = firstLine.split(separator: " ").dropFirst().first.map(String.init) ?? "/"
        let reply = replies[target] ?? Array("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
        var sent = 0
        while sent < reply.count {
            let n = reply.withUnsafeBytes { write(connection, $0.baseAddress! + sent, reply.count - sent) }
            if n <= 0 { return }
            sent += n
        }
        shutdown(connection, Int32(SHUT_WR))
        // Drain until the client closes, so it reads everything before the reset.
        while buffer.withUnsafeMutableBytes({ read(connection, $0.baseAddress, $0.count) }) > 0 {}
    }
}

private extension Array where Element == UInt8 {
    var containsHeaderEnd: Bool {
        guard count >= 4 else { return false }
        for i in 0...(count - 4) where self[i] == 0x0D && self[i + 1] == 0x0A && self[i + 2] == 0x0D && self[i + 3] == 0x0A {
            return true
        }
        return false
    }
}
