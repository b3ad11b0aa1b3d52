import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Clients that know only the XML: gdbus, busctl and dbus-python.
final class ExternalClientTests: FerryTestCase {
    func tool(_ name: String) -> String? {
        let path = findExecutable(name) ?? findExecutable("/usr/bin/\(name)")
        if path == nil { XCTFail("\(name) is not installed; it is needed for this test") }
        return path
    }

    /// The gdbus calls of docs/bus-api.md work: OpenSession with `{}`, Download with an options
    /// dict, Properties.Get; gdbus introspects before it calls.
    func testGdbus() async throws {
        guard let gdbus = tool("gdbus") else { return }
        let env = environment()
        var r = try runTool(gdbus, ["call", "--session", "--dest", "org.ferry.Ferry1", "--object-path", "/org/ferry/Ferry1",
                                             "--method", "org.ferry.Ferry1.Manager.OpenSession", "com.example.Test", "{}"], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        guard let match = r.stdout.range(of: #"/org/ferry/Ferry1/session/[0-9]+"#, options: .regularExpression) else {
            return XCTFail("no session path in \(r.stdout)")
        }
        let sessionPath = String(r.stdout[match])

        let body = serve("/g.bin", size: 12_345)
        let dest = work + "/g.bin"
        r = try runTool(gdbus, ["call", "--session", "--dest", "org.ferry.Ferry1", "--object-path", sessionPath,
                                         "--method", "org.ferry.Ferry1.Session.Download", server.url("/g.bin"),
                                         "{'destination': <'\(dest)'>}"], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        guard let tmatch = r.stdout.range(of: #"/org/ferry/Ferry1/transfer/[0-9]+"#, options: .regularExpression) else {
            return XCTFail("no transfer path in \(r.stdout)")
        }
        let transferPath = String(r.stdout[tmatch])
        try await signals.completed(transferPath)
        assertFile(dest, equals: body)

        r = try runTool(gdbus, ["call", "--session", "--dest", "org.ferry.Ferry1", "--object-path", transferPath,
                                         "--method", "org.freedesktop.DBus.Properties.Get", "org.ferry.Ferry1.Transfer", "State"], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.contains("'completed'"), r.stdout)

        r = try runTool(gdbus, ["introspect", "--session", "--dest", "org.ferry.Ferry1", "--object-path", "/org/ferry/Ferry1", "--recurse"],
                                 environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.contains("OpenSession"), r.stdout)
        XCTAssertTrue(r.stdout.contains("org.ferry.Ferry1.Transfer"), "recursion reaches the transfer: \(r.stdout.prefix(2000))")

        // A named error reaches gdbus intact.
        r = try runTool(gdbus, ["call", "--session", "--dest", "org.ferry.Ferry1", "--object-path", "/org/ferry/Ferry1",
                                         "--method", "org.ferry.Ferry1.Manager.OpenSession", "bad id", "{}"], environment: env)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("org.ferry.Ferry1.Error.InvalidArgument"), r.stderr)
    }

    /// The busctl calls of docs/bus-api.md work with the 'sa{sv}' signatures given there.
    func testBusctl() async throws {
        guard let busctl = tool("busctl") else { return }
        let env = environment()
        var r = try runTool(busctl, ["--user", "call", "org.ferry.Ferry1", "/org/ferry/Ferry1", "org.ferry.Ferry1.Manager",
                                              "OpenSession", "sa{sv}", "com.example.Test", "0"], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.hasPrefix("o \"/org/ferry/Ferry1/session/"), r.stdout)
        let sessionPath = r.stdout.split(separator: "\"").dropFirst().first.map(String.init) ?? ""

        let body = serve("/b.bin", size: 4321)
        let dest = work + "/b.bin"
        r = try runTool(busctl, ["--user", "call", "org.ferry.Ferry1", sessionPath, "org.ferry.Ferry1.Session",
                                          "Download", "sa{sv}", server.url("/b.bin"), "1", "destination", "s", dest], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        let transferPath = r.stdout.split(separator: "\"").dropFirst().first.map(String.init) ?? ""
        XCTAssertTrue(transferPath.hasPrefix(BusClient.transferPathPrefix), r.stdout)
        try await signals.completed(transferPath)
        assertFile(dest, equals: body)

        r = try runTool(busctl, ["--user", "get-property", "org.ferry.Ferry1", transferPath, "org.ferry.Ferry1.Transfer",
                                          "State", "BytesTransferred"], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init), ["s \"completed\"", "x 4321"])

        r = try runTool(busctl, ["--user", "introspect", "org.ferry.Ferry1", transferPath], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.contains(".Pause"), r.stdout)

        r = try runTool(busctl, ["--user", "set-property", "org.ferry.Ferry1", "/org/ferry/Ferry1", "org.ferry.Ferry1.Manager",
                                          "SpeedLimit", "t", "1048576"], environment: env)
        XCTAssertEqual(r.status, 0, r.stderr)
        let limit = try await managerProperty("SpeedLimit")
        XCTAssertEqual(limit?.uint64, 1_048_576)
    }

    /// A dbus-python client with a GLib main loop: open a session, download, wait for Completed.
    func testPythonClient() async throws {
        let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : tool("python3")
        guard let python else { return }
        let script = home + "/client.py"
        try """
            import sys
            import dbus
            import dbus.mainloop.glib
            from gi.repository import GLib

            NAME = "org.ferry.Ferry1"
            dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
            bus = dbus.SessionBus()
            manager = dbus.Interface(bus.get_object(NAME, "/org/ferry/Ferry1"), NAME + ".Manager")
            session_path = manager.OpenSession("com.example.Python", {"retries": dbus.UInt32(0)})
            session = dbus.Interface(bus.get_object(NAME, session_path), NAME + ".Session")
            loop = GLib.MainLoop()
            outcome = {}
            wanted = []

            def completed(serial, error_name, error_message, path=None):
                if path in wanted:
                    outcome.update(serial=int(serial), error=str(error_name), message=str(error_message))
                    loop.quit()

            def give_up():
                outcome["error"] = "timeout"
                loop.quit()
                return False

            bus.add_signal_receiver(completed, "Completed", NAME + ".Transfer", NAME, path_keyword="path")
            transfer = session.Download(sys.argv[1], {"destination": sys.argv[2], "description": "from python"})
            wanted.append(transfer)
            GLib.timeout_add_seconds(20, give_up)
            loop.run()
            if outcome.get("error"):
                sys.exit("failed: %s %s" % (outcome.get("error"), outcome.get("message")))
            state = bus.get_object(NAME, transfer).Get(NAME + ".Transfer", "State", dbus_interface="org.freedesktop.DBus.Properties")
            session.AcknowledgeEvents(dbus.UInt64(outcome["serial"]))
            print("done", transfer, state)

            """.write(toFile: script, atomically: true, encoding: .utf8)
        let body = serve("/py.bin", size: 65_000)
        let dest = work + "/py.bin"
        let r = try runTool(python, [script, server.url("/py.bin"), dest], environment: environment(), timeout: 40)
        XCTAssertEqual(r.status, 0, "stdout: \(r.stdout)\nstderr: \(r.stderr)")
        XCTAssertTrue(r.stdout.hasPrefix("done /org/ferry/Ferry1/transfer/"), r.stdout)
        XCTAssertTrue(r.stdout.contains("completed"), r.stdout)
        assertFile(dest, equals: body)
        let s = try await session("com.example.Python")
        let pending = try await s.pendingEvents()
        XCTAssertEqual(pending.count, 0, "the script acknowledged its event")
    }
}
