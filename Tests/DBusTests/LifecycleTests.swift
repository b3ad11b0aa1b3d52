import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// Idle cost, disconnection and closing.
final class LifecycleTests: BusTestCase {
    /// An idle connection must not wake up: guards against arming a dispatch
    /// source for a disabled watch (the write watch), which spins the CPU.
    func testIdleConnectionUsesNoCPU() async throws {
        try await startSample()
        // Some traffic first, so that the write watch has been enabled and disabled.
        _ = try await collect(MatchRule(member: "Pinged"))
        for i in Int32(0)..<20 {
            let r = try await callSample("Add", [.int32(i), .int32(1)])
            XCTAssertEqual(r, [.int32(i + 1)])
        }
        try server.emitSignal(path: Sample.objectPath, interface: Sample.interfaceName, name: "Pinged", arguments: [.string("x")])
        _ = try await callSample("Echo", [.variant(.bytes(Array(repeating: 7, count: 4 << 20)))], timeout: 20)

        await assertNearlyNoCPU(over: 1.0, "idle connections")
    }

    /// This process uses under 50 ms of CPU over `seconds` of doing nothing.
    private func assertNearlyNoCPU(over seconds: Double, _ what: String, line: UInt = #line) async {
        let before = processCPUTime()
        await idle(seconds)
        let used = processCPUTime() - before
        XCTAssertLessThan(used, 0.05, "\(what) used \(Int(used * 1000)) ms of CPU in \(seconds) s", line: line)
    }

    func testBusGoingAwayFailsPendingCallsAndNotifies() async throws {
        let sample = try await startSample()
        let clientGone = Mailbox<Bool>()
        let serverGone = Mailbox<Bool>()
        client.onDisconnect { clientGone.put(true) }
        server.onDisconnect { serverGone.put(true) }

        let client = self.client!
        let pending = callNever(on: client)
        // The call is in the server's hands when the bus goes.
        _ = try await sample.neverAnswered.next(timeout: 5, "the Never call")

        bus.stop()
        _ = try await clientGone.next(timeout: 5, "the client's disconnect handler")
        _ = try await serverGone.next(timeout: 5, "the server's disconnect handler")

        let result = try await pending.next(timeout: 5, "the pending call to fail")
        switch result {
        case .success(let r): XCTFail("a call with no bus succeeded: \(r)")
        case .failure(let e as BusError):
            XCTAssertTrue([StandardErrors.noReply, StandardErrors.disconnected].contains(e.name), "\(e)")
        case .failure(let e): XCTFail("not a BusError: \(e)")
        }

        // New calls fail at once.
        await assertBusError(StandardErrors.disconnected) {
            _ = try await withDeadline(5, "a call on a dead connection") {
                try await client.call(destination: Sample.busName, path: Sample.objectPath, interface: Sample.interfaceName,
                                      method: "Add", arguments: [.int32(1), .int32(2)])
            }
        }
        // Sending signals and closing are harmless.
        try server.emitSignal(path: Sample.objectPath, interface: Sample.interfaceName, name: "Pinged", arguments: [.string("x")])

        // A disconnected connection does not spin on its dead socket.
        await assertNearlyNoCPU(over: 0.5, "disconnected connections")
    }

    func testCloseFailsPendingCalls() async throws {
        let sample = try await startSample()
        let client = self.client!
        let pending = callNever(on: client)
        _ = try await sample.neverAnswered.next(timeout: 5, "the Never call")
        client.close()
        let result = try await pending.next(timeout: 5, "the pending call to fail after close()")
        if case .success = result { XCTFail("a call on a closed connection succeeded") }
        if case .failure(let e) = result { XCTAssertTrue(e is BusError, "\(e)") }

        await assertBusError(StandardErrors.disconnected) {
            _ = try await withDeadline(5, "a call on a closed connection") {
                try await client.call(destination: Sample.busName, path: Sample.objectPath, interface: Sample.interfaceName,
                                      method: "Add", arguments: [.int32(1), .int32(2)])
            }
        }
        client.close()
        // The server noticed nothing wrong.
        let other = try BusConnection(address: bus.address)
        defer { other.close() }
        let r = try await other.call(destination: Sample.busName, path: Sample.objectPath, interface: Sample.interfaceName,
                                     method: "Add", arguments: [.int32(1), .int32(2)], timeout: 10)
        XCTAssertEqual(r, [.int32(3)])
    }

    /// Connections that are dropped without `close()` go away quietly, and the bus
    /// sees them go.
    func testReleasingAConnectionClosesIt() async throws {
        try await startSample()
        let gone = try await collect(MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus",
                                               member: "NameOwnerChanged"))
        var name = ""
        do {
            let temporary = try BusConnection(address: bus.address)
            name = temporary.uniqueName
            let owned = try await client.nameHasOwner(name)
            XCTAssertTrue(owned)
            _ = try await temporary.requestName("org.ferry.Test.Temporary")
        }
        var released = try await client.nameHasOwner(name) == false
        while !released {
            _ = try await gone.next(timeout: 5, "NameOwnerChanged for the released connection")
            released = try await client.nameHasOwner(name) == false
        }
        let owner = try await client.nameHasOwner("org.ferry.Test.Temporary")
        XCTAssertFalse(owner)
    }

    func testConnectingToNothingThrows() {
        XCTAssertThrowsError(try BusConnection(address: "unix:path=/nonexistent/ferry-test-bus")) { error in
            XCTAssertNotNil(error as? BusError, "\(error)")
        }
        XCTAssertThrowsError(try BusConnection(address: "not an address")) { error in
            XCTAssertNotNil(error as? BusError, "\(error)")
        }
    }

    func testManyConnectionsComeAndGo() async throws {
        try await startSample()
        for i in Int32(0)..<20 {
            let c = try BusConnection(address: bus.address)
            let r = try await c.call(destination: Sample.busName, path: Sample.objectPath, interface: Sample.interfaceName,
                                     method: "Add", arguments: [.int32(i), .int32(i)], timeout: 10)
            XCTAssertEqual(r, [.int32(2 * i)])
            if i % 2 == 0 { c.close() }
        }
    }
}

extension LifecycleTests {
    /// A connection closed while signals are coming in, and the next one opened (it
    /// usually gets the closed one's descriptor number), still hears its replies.
    /// Before the dispatch sources watched a descriptor of their own, with the cores
    /// busy, one such connection in a few hundred never read anything: its calls timed
    /// out with the reply waiting unread in the socket (FerryClient apps that detach
    /// and attach again).
    func testAConnectionOpenedAsAnotherClosesReadsItsReplies() async throws {
        try await startSample()
        let flooding = Flag()
        let server = server!
        // A steady stream of signals, so that reads are under way at each close.
        let flood = Thread {
            while !flooding.isRaised {
                try? server.emitSignal(path: "/org/ferry/Test/Flood", interface: "org.ferry.Test.Flood", name: "Tick",
                                       arguments: [.int32(1)])
                usleep(200) // pace, not synchronisation: about 5,000 signals a second
            }
        }
        flood.start()
        // Busy threads, two per core: the connection's queue then runs late,
        // as on a loaded machine, and a cancelled source lets go of its descriptor late.
        // (On an idle machine the old code passed; with these it failed 4 runs of 4.)
        let spinners = (0..<2 * ProcessInfo.processInfo.activeProcessorCount).map { _ in
            Thread { while !flooding.isRaised {} }
        }
        for spinner in spinners { spinner.start() }
        defer { flooding.raise() }
        for i in Int32(0)..<1500 {
            let c = try BusConnection(address: bus.address)
            do {
                let r = try await c.call(destination: Sample.busName, path: Sample.objectPath, interface: Sample.interfaceName,
                                         method: "Add", arguments: [.int32(i), .int32(1)], timeout: 5)
                XCTAssertEqual(r, [.int32(i + 1)])
            } catch {
                c.close()
                return XCTFail("connection \(i), after \(i) others were closed while signals came in: \(error)")
            }
            _ = try await c.subscribe(MatchRule(interface: "org.ferry.Test.Flood")) { _ in }
            c.close()
        }
    }
}

/// A flag raised once, read from any thread.
private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var raised = false
    var isRaised: Bool { lock.withLock { raised } }
    func raise() { lock.withLock { raised = true } }
}

extension LifecycleTests {
    /// Calls the sample's `Never` method (never answered) from a task; the call's outcome
    /// arrives in the mailbox returned.
    func callNever(on client: BusConnection) -> Mailbox<Result<[DBusValue], Error>> {
        let pending = Mailbox<Result<[DBusValue], Error>>()
        Task {
            do {
                pending.put(.success(try await client.call(destination: Sample.busName, path: Sample.objectPath,
                                                           interface: Sample.interfaceName, method: "Never", timeout: 60)))
            } catch {
                pending.put(.failure(error))
            }
        }
        return pending
    }
}
