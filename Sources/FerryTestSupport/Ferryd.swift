import DBus
import FerryBusClient
import Foundation

/// Starting the real `ferryd` for a test.
public enum Ferryd {
    /// Starts `path --verbose ARGUMENTS` with `environment`, from a thread with no
    /// blocked signals (so that `terminate()` stops it). Does not wait for it.
    public static func launch(_ path: String, arguments: [String] = [], environment: [String: String]) throws -> ChildProcess {
        try withUnblockedSignals {
            try ChildProcess(executable: path, arguments: ["--verbose"] + arguments, environment: environment)
        }
    }

    /// Waits (bounded) until `process` owns org.ferry.Ferry1 on `bus`; throws
    /// `TimedOut`, with its log, if it exits first or `timeout` passes.
    public static func waitForName(_ process: ChildProcess, on bus: BusConnection, timeout: TimeInterval = 15) async throws {
        try await waitForBusName(FerryClient.busName, on: bus, process: process, timeout: timeout)
    }
}
