import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// Private signals (v1.2): a sandboxed app's session, and a session opened with
/// `private-signals`, are heard only by their own clients and by watchers.
extension SandboxedCallerTests {

    /// A plain unconfined connection with a broad match rule (every signal on ferryd's
    /// paths, from anyone): a bus monitor that never asked for private signals.
    func plainMonitor() async throws -> SignalRecorder {
        let conn = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.monitor"))
        cleanups.append { conn.close() }
        let recorder = try await SignalRecorder.start(conn, matching: MatchRule(pathNamespace: BusClient.managerPath))
        cleanups.append { recorder.stop() }
        return recorder
    }

    /// The recorded signals that tell of one of `paths`: on them, or naming them
    /// (the manager's InterfacesAdded/Removed).
    func signals(in recorder: SignalRecorder, about paths: Set<String>) -> [RecordedSignal] {
        recorder.all.filter { s in
            paths.contains(s.path) || s.args.contains { v in
                if case .objectPath(let p) = v { return paths.contains(p) }
                return false
            }
        }
    }

    /// The manager's AllFinished signals a recorder got.
    func managerAllFinished(_ recorder: SignalRecorder) -> [RecordedSignal] {
        recorder.signals(path: BusClient.managerPath, member: "AllFinished")
    }

    /// A round trip to ferryd on `client`'s connection: ferryd's signals sent before its
    /// reply have been read (one sender's messages arrive in order).
    func roundTrip(_ client: BusClient) async throws {
        _ = try await call(client, BusClient.managerPath, StandardNames.peer, "Ping")
    }

    /// A sandboxed app's session is private: every signal of it and of its transfers
    /// (InterfacesAdded, PropertiesChanged, Progress, Finished, Completed, AllFinished,
    /// InterfacesRemoved) reaches the app itself and a watcher (`Manager.Watch`), and
    /// nobody else — not a bus monitor with a broad rule, not another unconfined client
    /// of ferryd, not another sandboxed app; the manager's AllFinished of a batch of
    /// private work goes to the watcher only. A sandboxed app may not watch.
    func testASandboxedAppsSignalsReachOnlyItAndWatchers() async throws {
        serve("/private.bin", size: 600_000)
        let appDir = try appDirectory(appID)
        let monitor = try await plainMonitor()
        let bystander = try BusClient(address: bus.address)
        cleanups.append { bystander.close() }
        _ = try await bystander.openSession("com.example.Bystander") // it knows ferryd: a unicast to it would be taken
        let bystanderSignals = try await SignalRecorder.start(bystander.bus)
        let app = try await sandboxedClient(appID) // the harness's client watches
        let appSignals = try await SignalRecorder.start(app.bus)
        let other = try await proxiedClient("org.example.Other")
        _ = try await other.openSession("org.example.Other.Mine")
        let otherSignals = try await SignalRecorder.start(other.bus)

        // A sandboxed caller's Watch: refused.
        await assertBusError(ok + "AccessDenied", "Watch from a sandboxed app") { try await app.watch() }
        await assertBusError(ok + "AccessDenied", "Watch from another sandboxed app") { try await other.watch() }

        let s = try await app.openSession("\(appID).Private")
        let config = try await s.properties()["Configuration"]?.vardict
        XCTAssertEqual(config?["private-signals"]?.bool, true, "a sandboxed app's session is private whatever it asked for")
        let t = try await s.download(server.url("/private.bin"), options: ["destination": .string(appDir + "/data/private.bin")])
        // The app hears its own transfer to the end.
        try await appSignals.completed(t.path, timeout: 20)
        try await appSignals.wait("the session's AllFinished at the app") { $0.contains { $0.path == s.path && $0.member == "AllFinished" } }
        let info = try await t.info()
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        // The watcher hears it all, the manager's AllFinished of this private batch too.
        try await signals.completed(t.path, timeout: 20)
        try await signals.wait("the manager's AllFinished at the watcher") { $0.contains { $0.path == BusClient.managerPath && $0.member == "AllFinished" } }
        try await t.remove()
        try await appSignals.wait("InterfacesRemoved at the app") { $0.contains { $0.member == "InterfacesRemoved" && $0.args.first == .objectPath(t.path) } }
        try await signals.wait("InterfacesRemoved at the watcher") { $0.contains { $0.member == "InterfacesRemoved" && $0.args.first == .objectPath(t.path) } }

        let paths: Set<String> = [s.path, t.path]
        let appMembers = Set(signals(in: appSignals, about: paths).map(\.member))
        XCTAssertTrue(appMembers.isSuperset(of: ["InterfacesAdded", "PropertiesChanged", "Progress", "Finished", "Completed",
                                                 "AllFinished", "InterfacesRemoved"]), "the app heard \(appMembers.sorted())")
        let watcherMembers = Set(signals(in: signals, about: paths).map(\.member))
        XCTAssertTrue(watcherMembers.isSuperset(of: appMembers), "the watcher heard \(watcherMembers.sorted())")

        // Nobody else heard anything of it (each has read everything ferryd sent before).
        try await roundTrip(bystander)
        try await roundTrip(other)
        try await roundTrip(app)
        XCTAssertEqual(signals(in: monitor, about: paths).map(\.description), [], "a bus monitor heard the app's signals")
        XCTAssertEqual(signals(in: bystanderSignals, about: paths).map(\.description), [], "another client of ferryd heard them")
        XCTAssertEqual(signals(in: otherSignals, about: paths).map(\.description), [], "another sandboxed app heard them")
        XCTAssertEqual(managerAllFinished(monitor).map(\.description), [], "a bus monitor heard the private batch end")
        XCTAssertEqual(managerAllFinished(bystanderSignals).map(\.description), [])
        XCTAssertEqual(managerAllFinished(otherSignals).map(\.description), [])
        XCTAssertEqual(managerAllFinished(appSignals).map(\.description), [], "the manager's count of private work is the watchers' only")
    }

    /// `private-signals` makes an unconfined session's signals private the same way:
    /// its own client hears them, other clients (a monitor, another client of ferryd, a
    /// sandboxed app) do not; a client hears them after `Watch` and no more after
    /// `Unwatch`. The key is validated and shown in `Configuration`.
    func testAnUnconfinedSessionWithPrivateSignalsIsHeardOnlyByItsClientsAndWatchers() async throws {
        serve("/one.bin", size: 300_000)
        let monitor = try await plainMonitor()
        let owner = try BusClient(address: bus.address)
        cleanups.append { owner.close() }
        await assertBusError(ok + "InvalidArgument", "private-signals of the wrong type") {
            try await owner.openSession("com.example.Quiet", configuration: ["private-signals": .string("yes")])
        }
        let s = try await owner.openSession("com.example.Quiet", configuration: ["private-signals": .boolean(true)])
        let ownerSignals = try await SignalRecorder.start(owner.bus)
        let sandboxed = try await proxiedClient(appID)
        _ = try await sandboxed.openSession("\(appID).Mine")
        let sandboxedSignals = try await SignalRecorder.start(sandboxed.bus)
        let config = try await s.properties()["Configuration"]?.vardict
        XCTAssertEqual(config?["private-signals"]?.bool, true)
        let publicConfig = try await session("com.example.Loud").properties()["Configuration"]?.vardict
        XCTAssertEqual(publicConfig?["private-signals"]?.bool, false, "default false")

        func download(_ name: String) async throws -> FerryTransfer {
            let t = try await s.download(server.url("/one.bin"), options: ["destination": .string(work + "/" + name)])
            try await ownerSignals.completed(t.path, timeout: 20)
            try await roundTrip(client)
            return t
        }
        // The harness's client has not asked to watch: it hears nothing of it.
        let first = try await download("first.bin")
        XCTAssertEqual(signals(in: signals, about: [first.path]).map(\.description), [], "a client that did not watch heard it")
        // After Watch it does.
        try await client.watch()
        let second = try await download("second.bin")
        XCTAssertTrue(signals(in: signals, about: [second.path]).contains { $0.member == "Completed" }, "the watcher missed Completed")
        // After Unwatch no more.
        try await client.unwatch()
        let third = try await download("third.bin")
        XCTAssertEqual(signals(in: signals, about: [third.path]).map(\.description), [], "Unwatch did not stop the signals")

        // A client that acts on one of its transfers uses the session: it hears of it.
        let helper = try BusClient(address: bus.address)
        cleanups.append { helper.close() }
        let helperSignals = try await SignalRecorder.start(helper.bus)
        try await helper.transfer(id: first.id).remove()
        try await helperSignals.wait("InterfacesRemoved at a client that removed the transfer") {
            $0.contains { $0.member == "InterfacesRemoved" && $0.args.first == .objectPath(first.path) }
        }

        let paths: Set<String> = [s.path, first.path, second.path, third.path]
        XCTAssertTrue(Set(signals(in: ownerSignals, about: [first.path]).map(\.member))
            .isSuperset(of: ["InterfacesAdded", "PropertiesChanged", "Progress", "Finished", "Completed"]), "its client heard its own")
        XCTAssertTrue(ownerSignals.all.contains { $0.path == s.path && $0.member == "AllFinished" }, "its client heard AllFinished")
        try await roundTrip(sandboxed)
        try await roundTrip(client)
        XCTAssertEqual(signals(in: monitor, about: paths).map(\.description), [], "a bus monitor heard a private session")
        XCTAssertEqual(signals(in: sandboxedSignals, about: paths).map(\.description), [], "a sandboxed app heard it")
        XCTAssertEqual(managerAllFinished(monitor).map(\.description), [], "a bus monitor heard the private batch end")
    }
}
