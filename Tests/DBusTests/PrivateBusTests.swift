import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// The test support itself: ChildProcess and PrivateBus (activation, stop).
final class PrivateBusTests: XCTestCase {
    func testChildProcessCapturesOutputAndStatus() throws {
        let r = try ChildProcess.run("/bin/sh", ["-c", "echo out; echo err >&2; echo \"$FERRY_TEST_VAR\"; exit 3"],
                                     environment: ["FERRY_TEST_VAR": "from env", "PATH": "/usr/bin:/bin"])
        XCTAssertEqual(r.status, 3)
        XCTAssertEqual(r.stdout, "out\nfrom env\n")
        XCTAssertEqual(r.stderr, "err\n")
    }

    func testChildProcessTerminateKillAndTimeout() throws {
        let sleeper = try ChildProcess(executable: "sleep", arguments: ["30"])
        XCTAssertTrue(sleeper.isRunning)
        XCTAssertNil(sleeper.waitForExit(timeout: 0.1), "still running")
        sleeper.terminate()
        XCTAssertEqual(sleeper.waitForExit(timeout: 10), 128 + SIGTERM)
        XCTAssertFalse(sleeper.isRunning)
        XCTAssertEqual(sleeper.exitStatus, 128 + SIGTERM)

        let stubborn = try ChildProcess(executable: "/bin/sh", arguments: ["-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
        XCTAssertTrue(waitUntil(timeout: 10) { stubborn.stdout == "ready\n" }, stubborn.log)
        stubborn.kill(SIGKILL)
        XCTAssertEqual(stubborn.waitForExit(timeout: 10), 128 + SIGKILL)
        XCTAssertTrue(stubborn.log.contains("ready"), stubborn.log)

        XCTAssertThrowsError(try ChildProcess(executable: "no-such-program-ferry"))
        XCTAssertThrowsError(try ChildProcess.run("sleep", ["30"], timeout: 0.2))
    }

    /// Started from a Swift concurrency thread (which blocks most signals), a
    /// child still gets SIGTERM, and a bus stops promptly.
    func testTerminateWorksFromAsyncCode() async throws {
        let sleeper = try ChildProcess(executable: "sleep", arguments: ["30"])
        sleeper.terminate()
        XCTAssertEqual(sleeper.waitForExit(timeout: 5), 128 + SIGTERM)
        let bus = try PrivateBus()
        let started = Date()
        bus.stop()
        XCTAssertLessThan(Date().timeIntervalSince(started), 2, "dbus-daemon ignored SIGTERM")
    }

    func testWaitUntil() {
        let start = Date()
        XCTAssertFalse(waitUntil(timeout: 0.1) { false })
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 0.1)
        var n = 0
        XCTAssertTrue(waitUntil(timeout: 5) { n += 1; return n == 3 })
    }

    func testStopEndsTheBus() async throws {
        let bus = try PrivateBus()
        XCTAssertTrue(bus.address.hasPrefix("unix:path="), bus.address)
        XCTAssertEqual(bus.environment()["DBUS_SESSION_BUS_ADDRESS"], bus.address)
        XCTAssertEqual(bus.environment(extra: ["A": "b"])["A"], "b")
        let c = try BusConnection(address: bus.address)
        let gone = Mailbox<Bool>()
        c.onDisconnect { gone.put(true) }
        let owned = try await c.nameHasOwner(c.uniqueName)
        XCTAssertTrue(owned)
        bus.stop()
        XCTAssertFalse(bus.isRunning)
        _ = try await gone.next(timeout: 5, "the disconnect")
        XCTAssertFalse(FileManager.default.fileExists(atPath: bus.directory))
        bus.stop()
        XCTAssertThrowsError(try BusConnection(address: bus.address))
        c.close()
    }

    /// A `.service` file in the service directory is started on demand, with
    /// `DBUS_SESSION_BUS_ADDRESS` pointing at the private bus.
    func testActivation() async throws {
        guard let python = ["/usr/bin/python3", "python3"].compactMap({ findExecutable($0) })
            .first(where: { (try? ChildProcess.run($0, ["-c", "import dbus"]).status) == 0 }) else {
            throw XCTSkip("no python3 with dbus-python")
        }
        let services = NSTemporaryDirectory() + "ferry-services-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: services) }
        let name = "org.ferry.Test.Activated"
        // Takes the name and stays (killed below; at worst it exits by itself).
        let script = "import dbus, time; b = dbus.SessionBus(); b.request_name('\(name)'); print('activated', flush=True); time.sleep(30)"
        try """
            [D-BUS Service]
            Name=\(name)
            Exec=\(python) -c "\(script)"

            """.write(toFile: services + "/\(name).service", atomically: true, encoding: .utf8)

        let bus = try PrivateBus(serviceDirectory: services)
        defer { bus.stop() }
        let c = try BusConnection(address: bus.address)
        defer { c.close() }
        let activatable = try await c.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                           method: "ListActivatableNames", timeout: 10)
        XCTAssertTrue(activatable.first?.arrayElements?.contains(.string(name)) ?? false, "\(activatable)\n\(bus.log)")
        let started = try await c.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                       method: "StartServiceByName", arguments: [.string(name), .uint32(0)], timeout: 20)
        XCTAssertEqual(started, [.uint32(1)], bus.log)
        let owned = try await c.nameHasOwner(name)
        XCTAssertTrue(owned, bus.log)
        // What a service prints ends up in the bus's log (and never blocks it).
        XCTAssertTrue(waitUntil(timeout: 10) { bus.log.contains("activated") }, bus.log)
        let pid = try await c.call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                   method: "GetConnectionUnixProcessID", arguments: [.string(name)], timeout: 10)
        let servicePID = try XCTUnwrap(pid.first?.uint32)
        Glibc.kill(pid_t(servicePID), SIGTERM)
    }
}
