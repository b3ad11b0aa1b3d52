import DBus
import Foundation

/// Waits until `name` has an owner on `bus`, asking the bus every `interval`.
/// Throws `TimedOut` (with the process's log) when `process`, the one expected to
/// take the name, exits first, or when `timeout` has passed.
public func waitForBusName(_ name: String, on bus: BusConnection, process: ChildProcess? = nil,
                           timeout: TimeInterval, interval: TimeInterval = 0.01) async throws {
    let deadline = Date().addingTimeInterval(timeout)
    while try await !bus.nameHasOwner(name) {
        if let process, !process.isRunning {
            throw TimedOut(description: "\(process.executable) exited with status \(process.exitStatus ?? -1) before taking \(name)\n\(process.log)")
        }
        if Date() > deadline {
            throw TimedOut(description: "\(name) has no owner after \(timeout) s\n\(process?.log ?? "")")
        }
        try await Task.sleep(nanoseconds: UInt64(interval * 1_000_000_000))
    }
}
