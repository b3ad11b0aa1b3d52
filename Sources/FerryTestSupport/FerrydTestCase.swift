import FerryBusClient
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// What the test suites that run the real ferryd share (the integration, desktop and
/// system-bus tests): per test a loopback HTTP server, a temporary HOME, the ferryd it
/// started and a client with its recorded signals; stopping them; and, when the test
/// failed, ferryd's log with whatever else it started. Each suite adds its own buses,
/// mocks and helpers, and calls `setUpFerrydWorld` from its `setUp`.
open class FerrydTestCase: XCTestCase {
    /// The built ferryd (`BuiltProducts.locate`).
    public var ferrydPath: String!
    public var server: TestHTTPServer!
    public var temporaryHome: TemporaryHome!
    /// The temporary HOME; everything the test makes lives below it.
    public var home: String!
    public var ferryd: ChildProcess?
    public var client: BusClient!
    /// Signals from ferryd's manager, sessions and transfers.
    public var signals: SignalRecorder!
    /// Extra logs to print on failure (other processes a test started).
    public var extraLogs: [() -> String] = []

    /// Whether the test has failed so far.
    public var hasFailed: Bool { (testRun?.totalFailureCount ?? 0) > 0 }

    /// Takes `ferryd` as `ferrydPath` (none: a test failure saying `missing`, and a
    /// thrown error), makes the temporary HOME and starts the HTTP server.
    public func setUpFerrydWorld(ferryd: String?, missing: @autoclosure () -> String,
                                 home makeHome: () throws -> TemporaryHome) throws {
        guard let ferryd else {
            XCTFail(missing())
            throw TimedOut(description: "the built ferryd is missing")
        }
        ferrydPath = ferryd
        temporaryHome = try makeHome()
        home = temporaryHome.path
        server = TestHTTPServer()
        try server.start()
    }

    /// For a failed test: ferryd's log, the extra logs and the last `signalCount`
    /// recorded signals.
    public func failureReport(signalCount: Int) -> String {
        var text = "\n===== ferryd log for \(name) =====\n" + (ferryd?.log ?? "(ferryd not started by the test)")
        for log in extraLogs { text += "\n" + log() }
        text += "\n===== recorded signals =====\n"
        text += signals?.all.suffix(signalCount).map(\.description).joined(separator: "\n") ?? ""
        return text
    }
}

extension ChildProcess {
    /// Stops the process if it runs: SIGTERM, and SIGKILL if it has not exited within
    /// `grace` seconds. False when it needed SIGKILL.
    @discardableResult
    public func stop(grace: TimeInterval = 10) -> Bool {
        guard isRunning else { return true }
        terminate()
        if waitForExit(timeout: grace) != nil { return true }
        kill(SIGKILL)
        _ = waitForExit(timeout: 5)
        return false
    }
}
