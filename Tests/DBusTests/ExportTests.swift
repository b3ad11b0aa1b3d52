import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// Methods and errors of an exported object, over a private bus.
final class ExportTests: BusTestCase {
    func testMethodsAnswer() async throws {
        try await startSample()
        let sum = try await callSample("Add", [.int32(2), .int32(40)])
        XCTAssertEqual(sum, [.int32(42)])
        let negative = try await callSample("Add", [.int32(.max), .int32(1)])
        XCTAssertEqual(negative, [.int32(.min)])
        let joined = try await callSample("Concat", [.stringArray(["a", "b", "c"]), .string("-")])
        XCTAssertEqual(joined, [.string("a-b-c")])
        let echoed = try await callSample("Echo", [.variant(.vardict(["k": .bytes([1, 2]), "n": .variant(.int64(-5))]))])
        XCTAssertEqual(echoed, [.variant(.vardict(["k": .bytes([1, 2]), "n": .variant(.int64(-5))]))])
        let described = try await callSample("Describe", [.vardict(["b": .boolean(true), "a": .uint32(1), "s": .string("x")])])
        XCTAssertEqual(described, [.string("a:u=uint32 1,b:b=true,s:s=x")])
        // As deep as D-Bus allows: 64 variants.
        let deep = (0..<64).reduce(DBusValue.string("core")) { inner, _ in .variant(inner) }
        let deepEcho = try await callSample("Echo", [deep])
        XCTAssertEqual(deepEcho, [deep])
        let nothing = try await callSample("Nothing")
        XCTAssertEqual(nothing, [])
        // The second object answers too, and to its unique name as well as the well-known one.
        let direct = try await client.call(destination: server.uniqueName, path: Sample.secondPath, interface: Sample.interfaceName,
                                           method: "Add", arguments: [.int32(1), .int32(1)])
        XCTAssertEqual(direct, [.int32(2)])
    }

    func testCallWithoutInterfaceFindsTheMethod() async throws {
        try await startSample()
        let m = try BusMessage.methodCall(destination: Sample.busName, path: Sample.objectPath, interface: nil, member: "Add")
        try m.append(.int32(3), .int32(4))
        let reply = try await client.call(m, timeout: 10)
        XCTAssertEqual(try reply.arguments(), [.int32(7)])
        XCTAssertEqual(reply.type, .methodReturn)
    }

    func testWrongArgumentsAreInvalidArgs() async throws {
        try await startSample()
        await assertBusError(StandardErrors.invalidArgs) { try await self.callSample("Add", [.string("2"), .string("3")]) }
        await assertBusError(StandardErrors.invalidArgs) { try await self.callSample("Add", [.int32(2)]) }
        await assertBusError(StandardErrors.invalidArgs) { try await self.callSample("Add", [.int32(2), .int32(3), .int32(4)]) }
        await assertBusError(StandardErrors.invalidArgs) { try await self.callSample("Add", []) }
        await assertBusError(StandardErrors.invalidArgs) { try await self.callSample("Echo", [.string("not a variant")]) }
        // The service is still fine.
        let sum = try await callSample("Add", [.int32(1), .int32(2)])
        XCTAssertEqual(sum, [.int32(3)])
    }

    func testUnknownMethodInterfaceObject() async throws {
        try await startSample()
        await assertBusError(StandardErrors.unknownMethod) { try await self.callSample("NoSuchMethod") }
        await assertBusError(StandardErrors.unknownInterface) {
            try await self.callSample("Add", [.int32(1), .int32(2)], interface: "org.ferry.Test.NoSuchInterface")
        }
        await assertBusError(StandardErrors.unknownObject) {
            try await self.callSample("Add", [.int32(1), .int32(2)], path: "/org/ferry/Test/objects/99")
        }
        await assertBusError(StandardErrors.unknownObject) {
            try await self.callSample("Add", [.int32(1), .int32(2)], path: "/org/ferry/Test/objects")
        }
        // Properties on a path with no object.
        await assertBusError(StandardErrors.unknownObject) {
            try await self.getProperty("Volume", path: "/org/ferry/Test/objects")
        }
        // Nobody owns the name at all.
        await assertBusError(StandardErrors.serviceUnknown) {
            try await self.client.call(destination: "org.ferry.Nobody", path: "/", interface: "a.b", method: "M", timeout: 10)
        }
    }

    func testHandlerErrorsReachTheCallerByName() async throws {
        try await startSample()
        await assertBusError(Sample.customError, message: "it broke: ünïcode") {
            try await self.callSample("Fail", [.string(Sample.customError), .string("it broke: ünïcode")])
        }
        await assertBusError(StandardErrors.invalidArgs, message: "bad input") {
            try await self.callSample("Fail", [.string(StandardErrors.invalidArgs), .string("bad input")])
        }
        // An invalid error name from a handler becomes Failed rather than aborting.
        await assertBusError(StandardErrors.failed, message: "odd") {
            try await self.callSample("Fail", [.string("not a valid name"), .string("odd")])
        }
        // So does a NUL in the message, and a reply that cannot be marshalled.
        let odd = InterfaceSpec(name: "org.ferry.Test.Odd1", methods: [
            MethodSpec("NulMessage") { inv in inv.fail(name: Sample.customError, message: "a\u{0}b") },
            MethodSpec("BadReply", out: [ArgSpec("p", "o")]) { inv in inv.reply([.objectPath("not/a/path")]) },
        ])
        server.export(ExportedObject(path: "/odd", interfaces: [odd]))
        await assertBusError(Sample.customError, message: "ab") {
            try await self.client.call(destination: self.server.uniqueName, path: "/odd", interface: "org.ferry.Test.Odd1",
                                       method: "NulMessage", timeout: 10)
        }
        await assertBusError(StandardErrors.invalidArgs) {
            try await self.client.call(destination: self.server.uniqueName, path: "/odd", interface: "org.ferry.Test.Odd1",
                                       method: "BadReply", timeout: 10)
        }
    }

    func testPeerPing() async throws {
        try await startSample()
        let pong = try await callSample("Ping", path: Sample.objectPath, interface: StandardNames.peer)
        XCTAssertEqual(pong, [])
        // Peer works on any path, object or not.
        let anywhere = try await callSample("Ping", path: "/", interface: StandardNames.peer)
        XCTAssertEqual(anywhere, [])
        let id = try await callSample("GetMachineId", path: "/", interface: StandardNames.peer)
        XCTAssertEqual(id.first?.string?.count, 32)
    }

    func testRequestName() async throws {
        try await startSample()
        let taken = try await client.requestName(Sample.busName)
        XCTAssertEqual(taken, .exists)
        let again = try await server.requestName(Sample.busName)
        XCTAssertEqual(again, .alreadyOwner)
        let owned = try await client.nameHasOwner(Sample.busName)
        XCTAssertTrue(owned)
        let unowned = try await client.nameHasOwner("org.ferry.Nobody")
        XCTAssertFalse(unowned)
        XCTAssertTrue(server.uniqueName.hasPrefix(":"))
        XCTAssertNotEqual(server.uniqueName, client.uniqueName)
    }

    func testReplyLaterFromAnotherThread() async throws {
        try await startSample()
        let answer = try await callSample("Later", [.uint32(50)])
        XCTAssertEqual(answer, [.string("later 50")])
        // Several at once, answered out of order.
        let client = self.client!
        async let a = BusTestCase.callSample(on: client, "Later", [.uint32(300)])
        async let b = BusTestCase.callSample(on: client, "Later", [.uint32(10)])
        async let c = BusTestCase.callSample(on: client, "Later", [.uint32(100)])
        let (ra, rb, rc) = try await (a, b, c)
        XCTAssertEqual([ra, rb, rc], [[.string("later 300")], [.string("later 10")], [.string("later 100")]])
    }

    func testCallTimesOutWithNoReply() async throws {
        let sample = try await startSample()
        let started = Date()
        await assertBusError(StandardErrors.noReply) { try await self.callSample("Never", timeout: 0.3) }
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(elapsed, 0.25)
        XCTAssertLessThan(elapsed, 5)
        // The handler did get the call.
        let invocation = try await sample.neverAnswered.next(timeout: 5, "the Never call")
        XCTAssertEqual(invocation.member, "Never")
        XCTAssertEqual(invocation.sender, client.uniqueName)
        XCTAssertEqual(invocation.path, Sample.objectPath)
        // Answering after the caller gave up is harmless; the connection carries on.
        invocation.reply()
        let sum = try await callSample("Add", [.int32(1), .int32(2)])
        XCTAssertEqual(sum, [.int32(3)])
    }

    /// Calls awaiting replies share one timer (MainLoop's heap of deadlines): a short
    /// timeout behind many long ones still comes on time, answered calls never time
    /// out, and once all are answered a new call's timeout still comes.
    func testTimeoutsOfManyPendingCallsEachComeOnTime() async throws {
        let sample = try await startSample()
        let client = self.client!
        // 150 calls that would time out in a minute, all awaiting replies at once.
        let long = Task {
            try await withThrowingTaskGroup(of: [DBusValue].self) { group in
                for _ in 0..<150 { group.addTask { try await BusTestCase.callSample(on: client, "Never", timeout: 60) } }
                var n = 0
                for try await _ in group { n += 1 }
                return n
            }
        }
        var invocations: [MethodInvocation] = []
        for _ in 0..<150 { invocations.append(try await sample.neverAnswered.next(timeout: 10, "the long calls")) }

        // A short one after them times out at its own time, not theirs.
        var started = Date()
        await assertBusError(StandardErrors.noReply) { try await self.callSample("Never", timeout: 0.3) }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        _ = try await sample.neverAnswered.next(timeout: 5, "the short call")

        // Two short ones in the other order: the later deadline first, then an earlier one.
        started = Date()
        async let slower: Void = assertBusError(StandardErrors.noReply) { try await BusTestCase.callSample(on: client, "Never", timeout: 0.8) }
        async let faster: Void = assertBusError(StandardErrors.noReply) { try await BusTestCase.callSample(on: client, "Never", timeout: 0.2) }
        _ = await (slower, faster)
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.7)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)

        // Every long call answered: none of them timed out.
        for i in invocations { i.reply() }
        let answered = try await long.value
        XCTAssertEqual(answered, 150)

        // With nothing pending, a new call's timeout still comes.
        started = Date()
        await assertBusError(StandardErrors.noReply) {
            _ = try await client.call(destination: Sample.busName, path: Sample.objectPath, interface: Sample.interfaceName,
                                      method: "Never", arguments: [], timeout: 0.3)
        }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.25)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
    }

    /// Large messages are read on in one wake-up (MainLoop.read): several replies of
    /// a few MiB each, pipelined with small calls between them, all arrive whole and
    /// each to its own call.
    func testLargeRepliesArriveWholeBetweenSmallOnes() async throws {
        try await startSample()
        let client = self.client!
        let sizes = [3 << 20, 17, 5 << 20, 1, 70_000]
        try await withThrowingTaskGroup(of: (Int, [DBusValue], [DBusValue]).self) { group in
            for (i, size) in sizes.enumerated() {
                let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
                group.addTask {
                    let sent: [DBusValue] = [.variant(.bytes(bytes))]
                    return (i, sent, try await BusTestCase.callSample(on: client, "Echo", sent, timeout: 30))
                }
                group.addTask {
                    let sent: [DBusValue] = [.variant(.string("small \(i)"))]
                    return (i, sent, try await BusTestCase.callSample(on: client, "Echo", sent))
                }
            }
            var answered = 0
            for try await (i, sent, echoed) in group {
                XCTAssertEqual(echoed, sent, "call \(i)")
                answered += 1
            }
            XCTAssertEqual(answered, 2 * sizes.count)
        }
        let sum = try await callSample("Add", [.int32(2), .int32(3)])
        XCTAssertEqual(sum, [.int32(5)])
    }

    func testAnsweringTwiceSendsOneReply() async throws {
        let once = InterfaceSpec(name: "org.ferry.Test.Twice1", methods: [
            MethodSpec("Twice", out: [ArgSpec("n", "i")]) { inv in
                inv.reply([.int32(1)])
                inv.reply([.int32(2)])
                inv.fail(name: Sample.customError, message: "too late")
            },
        ])
        server.export(ExportedObject(path: "/twice", interfaces: [once]))
        for _ in 0..<3 {
            let r = try await client.call(destination: server.uniqueName, path: "/twice", interface: "org.ferry.Test.Twice1",
                                          method: "Twice", timeout: 10)
            XCTAssertEqual(r, [.int32(1)])
        }
    }

    func testManyConcurrentCalls() async throws {
        try await startSample()
        let client = self.client!
        let results = try await withThrowingTaskGroup(of: (Int32, [DBusValue]).self) { group in
            for i in Int32(0)..<200 {
                group.addTask {
                    let method = i % 10 == 0 ? "Later" : "Add"
                    let args: [DBusValue] = i % 10 == 0 ? [.uint32(UInt32(i % 7))] : [.int32(i), .int32(1000)]
                    let r = try await client.call(destination: Sample.busName, path: Sample.objectPath,
                                                  interface: Sample.interfaceName, method: method, arguments: args, timeout: 20)
                    return (i, r)
                }
            }
            var all: [Int32: [DBusValue]] = [:]
            for try await (i, r) in group { all[i] = r }
            return all
        }
        XCTAssertEqual(results.count, 200)
        for i in Int32(0)..<200 {
            let expected: [DBusValue] = i % 10 == 0 ? [.string("later \(i % 7)")] : [.int32(i + 1000)]
            XCTAssertEqual(results[i], expected, "call \(i)")
        }
    }

    func testCallsFromManyThreadsAtOnce() async throws {
        try await startSample()
        let client = self.client!
        let answers = Mailbox<Result<[DBusValue], BusError>>()
        DispatchQueue.concurrentPerform(iterations: 100) { i in
            guard let m = try? BusMessage.methodCall(destination: Sample.busName, path: Sample.objectPath,
                                                     interface: Sample.interfaceName, member: "Add"),
                  (try? m.append(.int32(Int32(i)), .int32(-Int32(i)))) != nil else { return }
            client.send(m, timeout: 20) { result in answers.put(result.map { (try? $0.arguments()) ?? [] }) }
        }
        for _ in 0..<100 {
            let r = try await answers.next(timeout: 20, "a reply")
            XCTAssertEqual(try r.get(), [.int32(0)])
        }
    }
}
