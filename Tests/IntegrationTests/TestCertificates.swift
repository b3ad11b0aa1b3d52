import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

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
