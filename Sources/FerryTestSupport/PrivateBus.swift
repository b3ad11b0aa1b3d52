import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What went wrong starting or talking to a test process.
public struct TestProcessError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Polls `condition` every `interval` until it holds or `timeout` has passed.
/// Returns whether it held. For waiting on things that have no notification of
/// their own (a file appearing, a process exiting); the deadline keeps a broken
/// test from hanging.
@discardableResult
public func waitUntil(timeout: TimeInterval = 10, interval: TimeInterval = 0.01,
                      _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try condition() { return true }
        if Date() >= deadline { return false }
        usleep(useconds_t(max(1_000, interval * 1_000_000)))
    }
}

/// The processes `pid` started (from /proc), children first-level and below, each
/// before its own.
public func childProcesses(of pid: Int32) -> [Int32] {
    let list = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
    let direct = list.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    return direct.flatMap { [$0] + childProcesses(of: $0) }
}

/// The path of an executable: `name` itself when it contains a slash, else the
/// first match on `PATH`.
public func findExecutable(_ name: String, path: String? = ProcessInfo.processInfo.environment["PATH"]) -> String? {
    if name.contains("/") { return FileManager.default.isExecutableFile(atPath: name) ? name : nil }
    for dir in (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
        let candidate = "\(dir)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// Makes a fresh directory under the system's temporary directory.
/// It lies inside this test process's run directory (see `TestRunDirectory`), so
/// that it goes when the process exits even if its owner is never released: XCTest
/// keeps every test case, and the processes they started, until the end.
private func makeTemporaryDirectory(prefix: String) throws -> String {
    try makeShortTemporaryDirectory(prefix: prefix, in: TestRunDirectory.path())
}

/// A process started for a test, with stdout and stderr going to files in a
/// temporary directory so that a failing test can print them (`log`).
///
/// `@unchecked Sendable`: every stored property is immutable after `init`; the exit
/// status lives in `ExitState`, behind its lock.
public final class ChildProcess: @unchecked Sendable {
    public let executable: String
    public let arguments: [String]
    /// Where stdout and stderr go.
    public let stdoutPath: String
    public let stderrPath: String
    public let pid: Int32

    private let process = Process()
    private let directory: String
    private let exit = ExitState()

    /// Starts `executable` (a path, or a name looked up on `PATH`) with `arguments`.
    /// `environment` nil means this process's environment.
    public convenience init(executable: String, arguments: [String] = [], environment: [String: String]? = nil,
                            currentDirectory: String? = nil) throws {
        try self.init(executable: executable, arguments: arguments, environment: environment,
                      currentDirectory: currentDirectory, stdoutPipe: nil)
    }

    /// `stdoutPipe`: send stdout there instead of to the file.
    init(executable: String, arguments: [String], environment: [String: String]?,
         currentDirectory: String?, stdoutPipe: Pipe?) throws {
        guard let path = findExecutable(executable, path: environment?["PATH"] ?? ProcessInfo.processInfo.environment["PATH"]) else {
            throw TestProcessError("no executable '\(executable)'")
        }
        self.executable = path
        self.arguments = arguments
        directory = try makeTemporaryDirectory(prefix: "ferry-proc")
        stdoutPath = directory + "/stdout"
        stderrPath = directory + "/stderr"
        guard FileManager.default.createFile(atPath: stdoutPath, contents: nil),
              FileManager.default.createFile(atPath: stderrPath, contents: nil),
              let out = FileHandle(forWritingAtPath: stdoutPath),
              let err = FileHandle(forWritingAtPath: stderrPath) else {
            throw TestProcessError("cannot create log files in \(directory)")
        }
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = environment }
        if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = stdoutPipe ?? out
        process.standardError = err
        process.terminationHandler = { [exit] p in
            // The shell's convention: 128 + n for "killed by signal n".
            exit.set(p.terminationReason == .uncaughtSignal ? 128 + p.terminationStatus : p.terminationStatus)
        }
        do {
            try ChildProcess.launch(process)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        pid = process.processIdentifier
        // The child has its own copies now.
        try? out.close()
        try? err.close()
    }

    /// Starts `process` from a thread that blocks no signals. A child inherits the
    /// signal mask of the thread that spawns it, and Dispatch and Swift concurrency
    /// threads block nearly all signals: a child started from one of them ignores
    /// SIGTERM (and so do the services a bus started that way activates).
    private static func launch(_ process: Process) throws {
        try withUnblockedSignals { try process.run() }
    }

    deinit {
        if isRunning {
            kill(SIGKILL)
            _ = waitForExit(timeout: 5)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a command to completion and returns its exit status and output;
    /// kills it if it has not finished within `timeout`.
    public static func run(_ executable: String, _ arguments: [String] = [], environment: [String: String]? = nil,
                           timeout: TimeInterval = 30) throws -> (status: Int32, stdout: String, stderr: String) {
        let child = try ChildProcess(executable: executable, arguments: arguments, environment: environment)
        guard let status = child.waitForExit(timeout: timeout) else {
            child.kill(SIGKILL)
            _ = child.waitForExit(timeout: 5)
            throw TestProcessError("\(executable) \(arguments) did not finish in \(timeout) s\n\(child.log)")
        }
        return (status, child.stdout, child.stderr)
    }

    public var isRunning: Bool { exit.status == nil }

    /// The exit status once it has exited (128 + n when killed by signal n).
    public var exitStatus: Int32? { exit.status }

    public var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Both outputs, labelled, for a failure message.
    public var log: String {
        "--- \(executable) \(arguments.joined(separator: " ")) (pid \(pid)) stdout:\n\(stdout)--- stderr:\n\(stderr)---"
    }

    /// Sends SIGTERM.
    public func terminate() { kill(SIGTERM) }

    /// Sends `signal` (if it has not exited yet).
    public func kill(_ signal: Int32 = SIGKILL) {
        if isRunning { _ = Glibc.kill(pid, signal) }
    }

    /// Waits until it exits; returns the exit status, or nil on timeout.
    @discardableResult
    public func waitForExit(timeout: TimeInterval) -> Int32? {
        exit.wait(timeout: timeout)
    }
}

/// A child's exit status, set once from `Process`'s termination handler.
private final class ExitState: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read and written under `lock` (a condition, to wait for it).
    private let lock = NSCondition()
    private var value: Int32?

    var status: Int32? {
        lock.lock()
        defer { lock.unlock() }
        return value
    }

    func set(_ status: Int32) {
        lock.lock()
        value = status
        lock.broadcast()
        lock.unlock()
    }

    func wait(timeout: TimeInterval) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock()
        defer { lock.unlock() }
        while value == nil, lock.wait(until: deadline) {}
        return value
    }
}

/// A private `dbus-daemon` of session type, with its own configuration file and
/// socket in a temporary directory, and the generous limits of a desktop session
/// bus (the built-in defaults allow only 128 pending calls per connection).
/// Stops when `stop()` is called or when it is released.
///
/// `@unchecked Sendable`: the stored properties are immutable after `init`, except
/// `stopped`, which is guarded by `lock`.
public final class PrivateBus: @unchecked Sendable {
    /// The address clients connect to (`unix:path=…,guid=…`).
    public let address: String
    /// The temporary directory holding the configuration file and the socket.
    public let directory: String
    public let configPath: String
    private let daemon: ChildProcess
    private let addressPipe: Pipe
    private let lock = NSLock()
    private var stopped = false

    /// Starts the daemon and waits (at most `startTimeout`) until it prints its address.
    /// `serviceDirectory`: a directory of `.service` files for bus activation.
    /// `activationEnvironment`: extra variables for activated services.
    /// `maxRepliesPerConnection`: calls awaiting replies per connection (the session
    /// bus's 50,000 by default; dbus-daemon's own default is 128).
    /// `maxMatchRulesPerConnection`: match rules one connection may hold (50,000).
    public init(serviceDirectory: String? = nil, activationEnvironment: [String: String] = [:],
                maxRepliesPerConnection: Int = 50000, maxMatchRulesPerConnection: Int = 50000,
                startTimeout: TimeInterval = 10) throws {
        guard let daemonPath = findExecutable("dbus-daemon") ?? findExecutable("/usr/bin/dbus-daemon") else {
            throw TestProcessError("dbus-daemon not found")
        }
        directory = try makeTemporaryDirectory(prefix: "ferry-bus")
        configPath = directory + "/bus.conf"
        let socket = directory + "/bus"

        func xml(_ s: String) -> String {
            s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
        }
        var config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <keep_umask/>
              <listen>unix:path=\(xml(socket))</listen>
              <auth>EXTERNAL</auth>
              <limit name="max_replies_per_connection">\(maxRepliesPerConnection)</limit>
              <limit name="max_match_rules_per_connection">\(maxMatchRulesPerConnection)</limit>
              <limit name="max_names_per_connection">50000</limit>
              <limit name="max_incoming_bytes">1000000000</limit>
              <limit name="max_outgoing_bytes">1000000000</limit>
              <limit name="max_message_size">1000000000</limit>
              <limit name="service_start_timeout">120000</limit>

            """
        if let serviceDirectory { config += "  <servicedir>\(xml(serviceDirectory))</servicedir>\n" }
        config += """
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>

            """
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)

        // The address goes to a pipe on stdout; stderr goes to the log file.
        addressPipe = Pipe()
        var env = ProcessInfo.processInfo.environment
        for (k, v) in activationEnvironment { env[k] = v }
        env.removeValue(forKey: "DBUS_SESSION_BUS_ADDRESS")
        daemon = try ChildProcess(executable: daemonPath,
                                  arguments: ["--config-file=\(configPath)", "--nofork", "--print-address=1", "--nopidfile"],
                                  environment: env, currentDirectory: nil, stdoutPipe: addressPipe)
        do {
            let (line, rest) = try PrivateBus.readLine(from: addressPipe.fileHandleForReading.fileDescriptor, timeout: startTimeout)
            address = line
            // Activated services inherit the daemon's stdout: keep the pipe drained
            // (into the log) so that they never block writing to it. A thread of its
            // own reads a duplicate of the pipe until every writer has gone, then
            // closes it. Not a readabilityHandler: its dispatch source is cancelled
            // after the pipe is closed, and libdispatch may keep the closed number
            // registered, so that the process's next descriptor of that number (a bus
            // connection's socket) is never reported readable.
            let log = FileHandle(forWritingAtPath: daemon.stdoutPath)
            log?.write(Data(rest))
            let drained = fcntl(addressPipe.fileHandleForReading.fileDescriptor, F_DUPFD_CLOEXEC, 0)
            // Undrained, the pipe would block the services the bus starts once it is full.
            guard drained >= 0 else { throw TestProcessError("cannot duplicate the bus's stdout: errno \(errno)") }
            let thread = Thread {
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = buffer.withUnsafeMutableBytes { Glibc.read(drained, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { break }
                    log?.write(Data(buffer[..<n]))
                }
                close(drained)
                try? log?.close()
            }
            thread.name = "private-bus-stdout"
            thread.start()
        } catch {
            daemon.kill(SIGKILL)
            _ = daemon.waitForExit(timeout: 5)
            try? FileManager.default.removeItem(atPath: directory)
            throw TestProcessError("\(error)\n\(daemon.log)")
        }
    }

    deinit { stop() }

    /// The daemon's stderr (warnings, activation failures).
    public var log: String { daemon.log }

    public var isRunning: Bool { daemon.isRunning }

    /// This process's environment with `DBUS_SESSION_BUS_ADDRESS` pointing at this
    /// bus, plus `extra`: for starting ferryd, the ferry CLI, gdbus…
    public func environment(extra: [String: String] = [:]) -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        env.removeValue(forKey: "DBUS_STARTER_ADDRESS")
        env.removeValue(forKey: "DBUS_STARTER_BUS_TYPE")
        for (k, v) in extra { env[k] = v }
        return env
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after 5 s) and removes its directory.
    public func stop() {
        lock.lock()
        if stopped {
            lock.unlock()
            return
        }
        stopped = true
        lock.unlock()
        daemon.terminate()
        if daemon.waitForExit(timeout: 5) == nil {
            daemon.kill(SIGKILL)
            _ = daemon.waitForExit(timeout: 5)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Reads up to the first newline, waiting at most `timeout` in all; returns the
    /// line and whatever was read after it.
    private static func readLine(from fd: Int32, timeout: TimeInterval) throws -> (String, [UInt8]) {
        let deadline = Date().addingTimeInterval(timeout)
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            if let nl = bytes.firstIndex(of: UInt8(ascii: "\n")) {
                return (String(decoding: bytes[..<nl], as: UTF8.self), Array(bytes[(nl + 1)...]))
            }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw TestProcessError("dbus-daemon printed no address within \(timeout) s") }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&pfd, 1, Int32(remaining * 1000) + 1)
            if r < 0 {
                if errno == EINTR { continue }
                throw TestProcessError("poll: \(String(cString: strerror(errno)))")
            }
            if r == 0 { continue }
            let n = read(fd, &buffer, buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                throw TestProcessError("read: \(String(cString: strerror(errno)))")
            }
            if n == 0 { throw TestProcessError("dbus-daemon exited before printing its address") }
            bytes.append(contentsOf: buffer[0..<n])
        }
    }
}
