import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A certificate authority made for one test with openssl, and a certificate it signed
/// for 127.0.0.1 and localhost: what a loopback HTTPS server needs, and what ferryd is
/// told to trust (`CURL_CA_BUNDLE`), as a user would with a company's own CA.
public struct TestCertificates: Sendable {
    public let authority: String
    public let certificate: String
    public let key: String

    /// Makes them under `dir`; `runTool` runs openssl (by default as a child process).
    public init(in dir: String,
                runTool: (String, [String]) throws -> (status: Int32, stdout: String, stderr: String) = { try ChildProcess.run($0, $1, timeout: 60) }) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        authority = dir + "/ca.pem"
        certificate = dir + "/server.pem"
        key = dir + "/server.key"
        func openssl(_ args: [String]) throws {
            let r = try runTool("/usr/bin/openssl", args)
            guard r.status == 0 else { throw TestProcessError("openssl \(args.joined(separator: " ")): \(r.stderr)") }
        }
        try openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=Ferry Test CA",
                     "-keyout", dir + "/ca.key", "-out", authority])
        try openssl(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                     "-keyout", key, "-out", dir + "/server.csr"])
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\n".write(toFile: dir + "/san.ext", atomically: true, encoding: .utf8)
        try openssl(["x509", "-req", "-in", dir + "/server.csr", "-CA", authority, "-CAkey", dir + "/ca.key",
                     "-CAcreateserial", "-days", "2", "-extfile", dir + "/san.ext", "-out", certificate])
    }
}

/// nginx serving a folder over TLS (with HTTP/2 unless told not to) on a free loopback
/// port: `/NAME` as is, `/slow/NAME` at 16 KiB/s a request. Its access log has a line per
/// request: the connection's serial number, the protocol, the status, the path and
/// whether the TLS session was resumed (`r`) or new (`.`).
public final class TestNginx: @unchecked Sendable {
    /// "https://127.0.0.1:PORT".
    public let base: String
    public let accessLog: String
    public let process: ChildProcess
    private let directory: String

    /// Starts it with its files under `dir` and waits until it listens.
    public init(in dir: String, root: String, certificates: TestCertificates, httpDirectives: String = "",
                serverDirectives: String = "", http2: Bool = true) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let port = try Self.freePort()
        let user = geteuid() == 0 ? "user root root;\n" : ""
        let conf = """
        \(user)worker_processes 1;
        pid \(dir)/nginx.pid;
        error_log \(dir)/error.log warn;
        events { worker_connections 1024; }
        http {
            log_format ferry '$connection $server_protocol $status $uri $ssl_session_reused';
            access_log \(dir)/access.log ferry;
            client_body_temp_path \(dir)/body;
            proxy_temp_path \(dir)/proxy;
            fastcgi_temp_path \(dir)/fastcgi;
            uwsgi_temp_path \(dir)/uwsgi;
            scgi_temp_path \(dir)/scgi;
            default_type application/octet-stream;
            \(httpDirectives)
            server {
                listen 127.0.0.1:\(port) ssl\(http2 ? " http2" : "");
                ssl_certificate \(certificates.certificate);
                ssl_certificate_key \(certificates.key);
                root \(root);
                location / { }
                location /slow/ { alias \(root)/; limit_rate 16k; }
                \(serverDirectives)
            }
        }
        """
        try conf.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
        let child = try ChildProcess(executable: "/usr/sbin/nginx",
                                     arguments: ["-p", dir, "-c", dir + "/nginx.conf", "-e", dir + "/error.log", "-g", "daemon off;"])
        process = child
        directory = dir
        base = "https://127.0.0.1:\(port)"
        accessLog = dir + "/access.log"
        let listening = waitUntil(timeout: 10) {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
        }
        guard listening else {
            stop()
            throw TestProcessError("nginx did not listen on \(port)\n\(child.log)")
        }
    }

    /// Its output and error log, for a failure report.
    public var log: String {
        process.log + ((try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? "")
    }

    public func stop() {
        process.kill(SIGTERM)
        if process.waitForExit(timeout: 5) == nil { process.kill(SIGKILL) }
    }

    /// An access log, a line per request: connection serial, protocol, status, path, TLS session reused.
    public static func accessLogLines(_ path: String) throws -> [[Substring]] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
    }

    /// A free loopback port (bound, read, closed).
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw TestProcessError("no free port: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
