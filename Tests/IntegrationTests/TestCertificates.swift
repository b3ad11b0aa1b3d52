import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A certificate authority made for one test with openssl, and a certificate it signed
/// for 127.0.0.1 and localhost: what a loopback HTTPS server needs, and what ferryd is
/// told to trust (`CURL_CA_BUNDLE`), as a user would with a company's own CA.
struct TestCertificates {
    let authority: String
    let certificate: String
    let key: String

    init(in dir: String, runTool: (String, [String]) throws -> (status: Int32, stdout: String, stderr: String)) throws {
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

extension FerryTestCase {
    /// Test certificates under `dir`.
    func makeTestCertificates(in dir: String) throws -> TestCertificates {
        try TestCertificates(in: dir) { tool, args in
            try self.runTool(tool, args, environment: ProcessInfo.processInfo.environment)
        }
    }
}

extension FerryTestCase {
    /// Runs a loopback server written in Python (`script`, saved as `dir/serve.py`) that
    /// prints its port on its first line; stopped when the test ends. Returns the port.
    func startPythonServer(_ script: String, in dir: String, arguments: [String], what: String) throws -> String {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try script.write(toFile: dir + "/serve.py", atomically: true, encoding: .utf8)
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: [dir + "/serve.py"] + arguments)
        cleanups.append { child.kill(SIGKILL); _ = child.waitForExit(timeout: 5) }
        extraLogs.append { child.log }
        var port = ""
        waitUntil(timeout: 15) {
            port = child.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            return !port.isEmpty || !child.isRunning
        }
        guard !port.isEmpty, child.isRunning else { throw TimedOut(description: "\(what) did not start\n\(child.log)") }
        return port
    }
}
