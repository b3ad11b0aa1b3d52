import DBus
import FerryBusClient
import Foundation

/// Starting the real `ferryd` for a test.
public enum Ferryd {
    /// Starts `path --verbose ARGUMENTS` with `environment`, from a thread with no
    /// blocked signals (so that `terminate()` stops it). Does not wait for it.
    ///
    /// Through `env --default-signal=PIPE`, which then execs ferryd (same pid): the test
    /// runner ignores SIGPIPE and a child would inherit that, where ferryd started from
    /// a shell or by dbus-daemon gets the default (the signal ends it). ferryd must
    /// look after that itself.
    /// `wrapper` runs it (as `prlimit --nofile=N:N`): its command line comes first.
    public static func launch(_ path: String, arguments: [String] = [], environment: [String: String],
                              wrapper: [String] = []) throws -> ChildProcess {
        try withUnblockedSignals {
            try ChildProcess(executable: "/usr/bin/env",
                             arguments: ["--default-signal=PIPE"] + wrapper + [path, "--verbose"] + arguments,
                             environment: environment)
        }
    }

    /// Waits (bounded) until `process` owns org.ferry.Ferry1 on `bus`; throws
    /// `TimedOut`, with its log, if it exits first or `timeout` passes.
    public static func waitForName(_ process: ChildProcess, on bus: BusConnection, timeout: TimeInterval = 15) async throws {
        try await waitForBusName(BusClient.busName, on: bus, process: process, timeout: timeout)
    }
}
