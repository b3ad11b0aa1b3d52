import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Bus activation and idle exit: the bus starts ferryd from its `.service` file on the
/// first call, ferryd leaves when idle, and the next call brings it back with its
/// state.
final class ActivationTests: DesktopTestCase {
    /// Where the activated ferryd writes its log (it is not the test's child).
    var activatedLog: String { home + "/ferryd.log" }

    /// A service directory whose org.ferry.Ferry1.service runs the built ferryd through
    /// a wrapper that gives it the test's HOME and XDG directories.
    func makeServiceDirectory(ferrydArguments: String) throws -> String {
        let dir = home + "/services"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let wrapper = dir + "/ferryd-for-test"
        let script = """
            #!/bin/sh
            export HOME='\(home!)' XDG_CONFIG_HOME='\(home!)/.config' XDG_STATE_HOME='\(home!)/.local/state'
            export XDG_DATA_HOME='\(home!)/.local/share' XDG_CACHE_HOME='\(home!)/.cache' NO_PROXY='*' no_proxy='*'
            unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy XDG_DOWNLOAD_DIR
            exec '\(ferrydPath!)' "$@" 2>>'\(activatedLog)'

            """
        try script.write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        try """
            [D-BUS Service]
            Name=org.ferry.Ferry1
            Exec=\(wrapper) --verbose \(ferrydArguments)

            """.write(toFile: dir + "/org.ferry.Ferry1.service", atomically: true, encoding: .utf8)
        return dir
    }

    override func tearDown() async throws {
        if (testRun?.totalFailureCount ?? 0) > 0 {
            print("===== activated ferryd log =====\n" + ((try? String(contentsOfFile: activatedLog, encoding: .utf8)) ?? "(none)"))
        }
        try await super.tearDown()
    }

    /// The current owner of org.ferry.Ferry1, nil when none (never activates it).
    func owner() async -> String? {
        try? await client.bus.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                   method: "GetNameOwner", arguments: [.string(BusClient.busName)]).first?.string
    }

    func testFirstCallStartsFerrydWhichLeavesWhenIdleAndComesBackWithItsState() async throws {
        try await startBus(serviceDirectory: try makeServiceDirectory(ferrydArguments: "--idle-timeout 1"))
        let owners = try await SignalRecorder.start(client.bus, matching: MatchRule(sender: StandardNames.bus, interface: StandardNames.bus,
                                                                     member: "NameOwnerChanged", arg0: BusClient.busName))
        let ownerless = await owner()
        XCTAssertNil(ownerless, "nothing runs before the first call")

        // The first call starts ferryd.
        serve("/first.bin", size: 64_000)
        let session = try await client.openSession("com.example.Activation")
        let activated = await owner()
        let firstOwner = try XCTUnwrap(activated)
        let t = try await session.download(server.url("/first.bin"))
        let completed = try await eventually(15) { try await t.info().state == "completed" }
        XCTAssertTrue(completed)
        let destination = try await t.info().destination
        XCTAssertEqual(destination, downloads + "/first.bin")

        // With nothing to do for 1 s, it gives up its name and exits.
        let left = await eventually(15) {
            owners.all.contains { $0.args.count == 3 && $0.args[1].string == firstOwner && $0.args[2].string == "" }
        }
        XCTAssertTrue(left, "ferryd released its name when idle")
        let gone = await owner()
        XCTAssertNil(gone)
        let log = (try? String(contentsOfFile: activatedLog, encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("releasing org.ferry.Ferry1 and exiting"), log)

        // The next call starts a new ferryd, which knows the finished transfer.
        let again = try await t.info()
        let secondOwner = await owner()
        XCTAssertNotNil(secondOwner)
        XCTAssertNotEqual(secondOwner, firstOwner)
        XCTAssertEqual(again.state, "completed")
        XCTAssertEqual(again.destination, destination)
        let sessions = try await client.listSessions()
        XCTAssertEqual(sessions.count, 1, "the session survived the restart")
        XCTAssertTrue(FileManager.default.fileExists(atPath: destination))
    }

    func testAShownNotificationWithButtonsKeepsFerrydUntilItIsClosed() async throws {
        try await startBus()
        let notifications = try await startNotificationServer()
        try await startFerryd(["--idle-timeout", "1"])
        serve("/n.bin", size: 1_000)
        let session = try await client.openSession("com.example.Pending")
        try await batch(session, [server.url("/n.bin")])
        _ = try await notifyCalls(notifications, atLeast: 1)

        // Three idle timeouts pass while the notification's buttons can be clicked.
        // (Checking that something does not happen needs a wait.)
        try await Task.sleep(nanoseconds: 3_000_000_000)
        XCTAssertTrue(ferryd?.isRunning == true, "ferryd stays while a notification action is pending")

        // The user dismisses it (reason 2); ferryd leaves.
        try await notifications.emit("org.freedesktop.Notifications", "NotificationClosed", signature: "uu", [.uint32(1), .uint32(2)])
        XCTAssertNotNil(ferryd?.waitForExit(timeout: 10), "ferryd exits once the notification is closed")
        XCTAssertEqual(ferryd?.exitStatus, 0)
    }

    func testNoIdleExitKeepsFerrydRunning() async throws {
        try await startBus()
        try await startFerryd(["--idle-timeout", "1", "--no-idle-exit"])
        try await Task.sleep(nanoseconds: 2_500_000_000)
        XCTAssertTrue(ferryd?.isRunning == true)
    }
}
