import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// Other D-Bus implementations talking to our exported objects: gdbus (GDBus)
/// and dbus-python (libdbus), as docs/bus-api.md promises.
final class InteropTests: BusTestCase {
    private func gdbus(_ args: [String], file: StaticString = #filePath, line: UInt = #line) throws -> (status: Int32, stdout: String, stderr: String) {
        guard let gdbus = findExecutable("gdbus") else { throw XCTSkip("gdbus is not installed") }
        // Run off the cooperative pool: this blocks until gdbus exits.
        return try ChildProcess.run(gdbus, args, environment: bus.environment(), timeout: 30)
    }

    private func gdbusCall(_ path: String, _ method: String, _ args: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        try gdbus(["call", "--session", "--dest", Sample.busName, "--object-path", path, "--method", method] + args)
    }

    func testGdbusCall() async throws {
        try await startSample()
        let add = try gdbusCall(Sample.objectPath, "\(Sample.interfaceName).Add", ["2", "40"])
        XCTAssertEqual(add.status, 0, add.stderr)
        XCTAssertEqual(add.stdout, "(42,)\n")

        let concat = try gdbusCall(Sample.objectPath, "\(Sample.interfaceName).Concat", ["['x', 'y', 'z']", "+"])
        XCTAssertEqual(concat.stdout, "('x+y+z',)\n", concat.stderr)

        let describe = try gdbusCall(Sample.objectPath, "\(Sample.interfaceName).Describe",
                                     ["{'name': <'ferry'>, 'size': <uint64 10>, 'on': <true>}"])
        XCTAssertEqual(describe.stdout, "('name:s=ferry,on:b=true,size:t=uint64 10',)\n", describe.stderr)

        let get = try gdbusCall(Sample.objectPath, "org.freedesktop.DBus.Properties.Get", [Sample.interfaceName, "Volume"])
        XCTAssertEqual(get.stdout, "(<uint32 50>,)\n", get.stderr)

        let set = try gdbusCall(Sample.objectPath, "org.freedesktop.DBus.Properties.Set", [Sample.interfaceName, "Volume", "<uint32 60>"])
        XCTAssertEqual(set.status, 0, set.stderr)
        let volume = try await getProperty("Volume")
        XCTAssertEqual(volume, .variant(.uint32(60)))

        let managed = try gdbusCall(Sample.rootPath, "org.freedesktop.DBus.ObjectManager.GetManagedObjects", [])
        XCTAssertTrue(managed.stdout.hasPrefix("({objectpath '/org/ferry/Test/objects/1': {'org.ferry.Test.Sample1': {"), managed.stdout)
        XCTAssertTrue(managed.stdout.contains("'/org/ferry/Test/objects/2': {'org.ferry.Test.Sample1': {'Counter': <uint64 0>, "
                                              + "'Tag': <<'none'>>, 'Title': <'second'>, 'Volume': <uint32 50>}}"), managed.stdout)

        let ping = try gdbusCall("/", "org.freedesktop.DBus.Peer.Ping", [])
        XCTAssertEqual(ping.stdout, "()\n", ping.stderr)
    }

    func testGdbusSeesErrorsByName() async throws {
        try await startSample()
        let failed = try gdbusCall(Sample.objectPath, "\(Sample.interfaceName).Fail", [Sample.customError, "it broke"])
        XCTAssertNotEqual(failed.status, 0)
        XCTAssertTrue(failed.stderr.contains("GDBus.Error:\(Sample.customError): it broke"), failed.stderr)

        let refused = try gdbusCall(Sample.objectPath, "org.freedesktop.DBus.Properties.Set", [Sample.interfaceName, "Volume", "<uint32 1000>"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("GDBus.Error:\(Sample.outOfRange): volume 1000 is above 100"), refused.stderr)

        let unknown = try gdbusCall(Sample.objectPath, "\(Sample.interfaceName).Missing", [])
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("org.freedesktop.DBus.Error.UnknownMethod"), unknown.stderr)
    }

    func testGdbusIntrospect() async throws {
        try await startSample()
        let r = try gdbus(["introspect", "--session", "--dest", Sample.busName, "--object-path", Sample.objectPath])
        XCTAssertEqual(r.status, 0, r.stderr)
        let out = r.stdout
        XCTAssertTrue(out.contains("node \(Sample.objectPath) {"), out)
        XCTAssertTrue(out.contains("interface \(Sample.interfaceName) {"), out)
        XCTAssertTrue(out.contains("""
                  Add(in  i a,
                      in  i b,
                      out i sum);
            """), out)
        XCTAssertTrue(out.contains("Pinged(s text);"), out)
        // gdbus reads the properties' values with GetAll.
        XCTAssertTrue(out.contains("readwrite u Volume = 50;"), out)
        XCTAssertTrue(out.contains("readonly s Title = 'first';"), out)
        XCTAssertTrue(out.contains("@org.freedesktop.DBus.Property.EmitsChangedSignal(\"false\")"), out)

        let tree = try gdbus(["introspect", "--session", "--dest", Sample.busName, "--object-path", "/", "--recurse"])
        XCTAssertEqual(tree.status, 0, tree.stderr)
        for path in ["node /org/ferry/Test {", "node /org/ferry/Test/objects/1 {", "node /org/ferry/Test/objects/2 {"] {
            XCTAssertTrue(tree.stdout.contains(path), "\(path) missing from:\n\(tree.stdout)")
        }
        XCTAssertTrue(tree.stdout.contains("interface org.freedesktop.DBus.ObjectManager {"), tree.stdout)
    }

    func testGdbusMonitorSeesOurSignals() async throws {
        try await startSample()
        guard let gdbus = findExecutable("gdbus") else { throw XCTSkip("gdbus is not installed") }
        let monitor = try ChildProcess(executable: gdbus, arguments: ["monitor", "--session", "--dest", Sample.busName],
                                       environment: bus.environment())
        defer {
            monitor.terminate()
            _ = monitor.waitForExit(timeout: 5)
        }
        // gdbus monitor prints a line once it has subscribed.
        XCTAssertTrue(waitUntil(timeout: 10) { monitor.stdout.contains("Monitoring signals") }, monitor.log)
        // Keep emitting (bounded) until the monitor shows one: its AddMatch may land a moment after the banner.
        var seen = false
        for i in 0..<100 where !seen {
            try server.emitSignal(path: Sample.objectPath, interface: Sample.interfaceName, name: "Pinged", arguments: [.string("hello \(i)")])
            seen = waitUntil(timeout: 0.1) { monitor.stdout.contains("\(Sample.interfaceName).Pinged ('hello") }
        }
        XCTAssertTrue(seen, monitor.log)
    }

    /// dbus-python (libdbus underneath, and its own introspection parser).
    func testPythonClient() async throws {
        try await startSample()
        let python = ["/usr/bin/python3", "python3"].compactMap { findExecutable($0) }
            .first { (try? ChildProcess.run($0, ["-c", "import dbus"]).status) == 0 }
        guard let python else { throw XCTSkip("no python3 with dbus-python") }
        let script = """
            import dbus
            bus = dbus.SessionBus()
            obj = bus.get_object('\(Sample.busName)', '\(Sample.objectPath)')
            sample = dbus.Interface(obj, '\(Sample.interfaceName)')
            print(sample.Describe({'count': dbus.Int32(3), 'name': 'ferry', 'ok': True, 'list': dbus.Array(['a'], signature='s')}))
            print(sample.Add(20, 22))
            props = dbus.Interface(obj, 'org.freedesktop.DBus.Properties')
            print(int(props.Get('\(Sample.interfaceName)', 'Volume')))
            props.Set('\(Sample.interfaceName)', 'Volume', dbus.UInt32(99))
            print(sorted(str(k) for k in props.GetAll('\(Sample.interfaceName)').keys()))
            try:
                sample.Fail('\(Sample.customError)', 'from python')
            except dbus.DBusException as e:
                print(e.get_dbus_name(), e.get_dbus_message())
            """
        let r = try ChildProcess.run(python, ["-c", script], environment: bus.environment(), timeout: 30)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, """
            count:i=3,list:as=['a'],name:s=ferry,ok:b=true
            42
            50
            ['Counter', 'Tag', 'Title', 'Volume']
            \(Sample.customError) from python

            """, r.stderr)
        let volume = try await getProperty("Volume")
        XCTAssertEqual(volume, .variant(.uint32(99)))
    }
}
