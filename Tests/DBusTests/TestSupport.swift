import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// Asserts that `body` throws a `BusError` named `name` (and, if given, with `message`).
func assertBusError(_ name: String, message: String? = nil, file: StaticString = #filePath, line: UInt = #line,
                    _ body: () async throws -> Void) async {
    do {
        try await body()
        XCTFail("expected \(name), got success", file: file, line: line)
    } catch let e as BusError {
        XCTAssertEqual(e.name, name, "\(e)", file: file, line: line)
        if let message { XCTAssertEqual(e.message, message, file: file, line: line) }
    } catch {
        XCTFail("expected \(name), got \(error)", file: file, line: line)
    }
}

/// User plus system CPU time this process has used, in seconds.
func processCPUTime() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1_000_000 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Does nothing for `seconds`: the window in which idle CPU use is measured, not
/// a synchronisation. (Waiting on an expectation that times out would do too, but
/// XCTWaiter on Linux polls its run loop and burns a quarter of a core doing it.)
func idle(_ seconds: TimeInterval) async {
    try? await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
}

/// A test case with a private bus and two connections to it, `server` and `client`.
/// Dumps the daemon's log when a test fails.
class BusTestCase: XCTestCase {
    var bus: PrivateBus!
    var server: BusConnection!
    var client: BusConnection!

    override func setUpWithError() throws {
        try super.setUpWithError()
        bus = try PrivateBus()
        server = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.server"))
        client = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.client"))
    }

    override func tearDown() {
        if let run = testRun, !run.hasSucceeded, let bus { print("dbus-daemon log:\n\(bus.log)") }
        client?.close()
        server?.close()
        bus?.stop()
        client = nil
        server = nil
        bus = nil
        super.tearDown()
    }

    /// Exports the sample objects on `server` and takes `Sample.busName`.
    @discardableResult
    func startSample() async throws -> Sample {
        let sample = Sample()
        sample.export(on: server)
        let reply = try await server.requestName(Sample.busName)
        XCTAssertEqual(reply, .primaryOwner)
        return sample
    }

    /// Calls a method of the sample service from `client`.
    @discardableResult
    func callSample(_ method: String, _ arguments: [DBusValue] = [], path: String = Sample.objectPath,
                    interface: String = Sample.interfaceName, timeout: Double = 10) async throws -> [DBusValue] {
        try await Self.callSample(on: client, method, arguments, path: path, interface: interface, timeout: timeout)
    }

    /// The same from concurrent child tasks, which must not capture the test case.
    @discardableResult
    static func callSample(on client: BusConnection, _ method: String, _ arguments: [DBusValue] = [],
                           path: String = Sample.objectPath, interface: String = Sample.interfaceName,
                           timeout: Double = 10) async throws -> [DBusValue] {
        try await client.call(destination: Sample.busName, path: path, interface: interface, method: method,
                              arguments: arguments, timeout: timeout)
    }

    @discardableResult
    func getProperty(_ name: String, interface: String = Sample.interfaceName, path: String = Sample.objectPath) async throws -> DBusValue? {
        try await callSample("Get", [.string(interface), .string(name)], path: path, interface: StandardNames.properties).first
    }

    func setProperty(_ name: String, _ value: DBusValue, interface: String = Sample.interfaceName,
                     path: String = Sample.objectPath) async throws {
        try await callSample("Set", [.string(interface), .string(name), .variant(value)], path: path,
                             interface: StandardNames.properties)
    }

    /// Subscribes `connection` (default `client`) to `rule`, collecting what arrives.
    func collect(_ rule: MatchRule, on connection: BusConnection? = nil) async throws -> Mailbox<BusMessage> {
        let box = Mailbox<BusMessage>()
        _ = try await (connection ?? client).subscribe(rule) { box.put($0) }
        return box
    }
}

/// The service the bus tests talk to:
///
///     /org/ferry/Test                 org.ferry.Test.Manager1 + ObjectManager
///     /org/ferry/Test/objects/1       org.ferry.Test.Sample1
///     /org/ferry/Test/objects/2       org.ferry.Test.Sample1
final class Sample: @unchecked Sendable {
    // `@unchecked Sendable`: the objects are only mutated on the server's queue;
    // `neverAnswered` is a Mailbox.
    static let busName = "org.ferry.Test"
    static let rootPath = "/org/ferry/Test"
    static let objectPath = "/org/ferry/Test/objects/1"
    static let secondPath = "/org/ferry/Test/objects/2"
    static let interfaceName = "org.ferry.Test.Sample1"
    static let managerInterface = "org.ferry.Test.Manager1"
    static let customError = "org.ferry.Test.Error.Custom"
    static let outOfRange = "org.ferry.Test.Error.OutOfRange"

    /// Calls to `Never`, which are never answered.
    let neverAnswered = Mailbox<MethodInvocation>()
    private(set) var root: ExportedObject!
    private(set) var first: ExportedObject!
    private(set) var second: ExportedObject!

    static func interface(neverAnswered: Mailbox<MethodInvocation>) -> InterfaceSpec {
        InterfaceSpec(
            name: interfaceName,
            methods: [
                MethodSpec("Add", in: [ArgSpec("a", "i"), ArgSpec("b", "i")], out: [ArgSpec("sum", "i")]) { inv in
                    inv.reply([.int32(inv.arguments[0].int32! &+ inv.arguments[1].int32!)])
                },
                MethodSpec("Echo", in: [ArgSpec("value", "v")], out: [ArgSpec("value", "v")]) { inv in
                    inv.reply(inv.arguments)
                },
                MethodSpec("Concat", in: [ArgSpec("parts", "as"), ArgSpec("separator", "s")], out: [ArgSpec("joined", "s")]) { inv in
                    let parts = inv.arguments[0].arrayElements!.map { $0.string! }
                    inv.reply([.string(parts.joined(separator: inv.arguments[1].string!))])
                },
                // "key:signature=value" for each entry, sorted, comma-separated.
                MethodSpec("Describe", in: [ArgSpec("options", "a{sv}")], out: [ArgSpec("summary", "s")]) { inv in
                    let entries = inv.arguments[0].dictionaryEntries!.sorted { $0.0 < $1.0 }
                    let text = entries.map { key, value -> String in
                        let inner = value.unwrapped
                        let shown: String
                        switch inner {
                        case .string(let s): shown = s
                        case .boolean(let b): shown = b ? "true" : "false"
                        default: shown = inner.description
                        }
                        return "\(key):\(inner.signature)=\(shown)"
                    }
                    inv.reply([.string(text.joined(separator: ","))])
                },
                MethodSpec("Fail", in: [ArgSpec("name", "s"), ArgSpec("message", "s")]) { inv in
                    inv.fail(name: inv.arguments[0].string!, message: inv.arguments[1].string!)
                },
                // Answers from another thread, later.
                MethodSpec("Later", in: [ArgSpec("milliseconds", "u")], out: [ArgSpec("answer", "s")]) { inv in
                    let ms = Int(inv.arguments[0].uint32!)
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) {
                        inv.reply([.string("later \(ms)")])
                    }
                },
                MethodSpec("Never") { inv in neverAnswered.put(inv) },
                MethodSpec("Nothing") { inv in inv.reply() },
            ],
            properties: [
                PropertySpec("Volume", "u", access: .readwrite) { value in
                    guard value.uint32! <= 100 else {
                        throw BusError(name: outOfRange, message: "volume \(value.uint32!) is above 100")
                    }
                },
                PropertySpec("Title", "s"),
                PropertySpec("Counter", "t", emitsChange: false),
                PropertySpec("Tag", "v", access: .readwrite) { _ in },
            ],
            signals: [SignalSpec("Pinged", [ArgSpec("text", "s")])]
        )
    }

    static let managerSpec = InterfaceSpec(name: managerInterface,
                                           properties: [PropertySpec("Version", "s")])

    static func makeObject(path: String, title: String, neverAnswered: Mailbox<MethodInvocation>) -> ExportedObject {
        ExportedObject(path: path, interfaces: [interface(neverAnswered: neverAnswered)], initialValues: [
            interfaceName: ["Volume": .uint32(50), "Title": .string(title), "Counter": .uint64(0), "Tag": .variant(.string("none"))],
        ])
    }

    func export(on connection: BusConnection) {
        root = ExportedObject(path: Sample.rootPath, interfaces: [Sample.managerSpec],
                              initialValues: [Sample.managerInterface: ["Version": .string("1.0")]])
        first = Sample.makeObject(path: Sample.objectPath, title: "first", neverAnswered: neverAnswered)
        second = Sample.makeObject(path: Sample.secondPath, title: "second", neverAnswered: neverAnswered)
        connection.export(root)
        connection.addObjectManager(at: Sample.rootPath)
        connection.export(first)
        connection.export(second)
    }
}
