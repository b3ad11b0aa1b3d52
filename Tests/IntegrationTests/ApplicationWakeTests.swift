import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A session with `application-id` whose client has left the bus gets its
/// application woken with ActivateAction("ferry-events", [identifier], {}) when
/// its batch ends with events pending.
final class ApplicationWakeTests: FerryTestCase {
    /// A stand-in for a DBusActivatable application: owns its name and records
    /// the ActivateAction calls it gets.
    final class FakeApplication: @unchecked Sendable {
        let connection: BusConnection
        private let lock = NSLock()
        private var calls: [[DBusValue]] = []
        private var waiter: CheckedContinuation<[DBusValue], Never>?

        init(address: String, appID: String) async throws {
            connection = try BusConnection(address: address)
            let path = "/" + appID.replacingOccurrences(of: ".", with: "/")
            let spec = InterfaceSpec(name: "org.freedesktop.Application", methods: [
                MethodSpec("ActivateAction", in: [ArgSpec("action_name", "s"), ArgSpec("parameter", "av"),
                                                  ArgSpec("platform_data", "a{sv}")]) { [weak self] inv in
                    self?.record(inv.arguments)
                    inv.reply()
                },
            ])
            connection.export(ExportedObject(path: path, interfaces: [spec]))
            _ = try await connection.requestName(appID)
        }

        private func record(_ args: [DBusValue]) {
            lock.lock()
            calls.append(args)
            let w = waiter
            waiter = nil
            lock.unlock()
            w?.resume(returning: args)
        }

        var recorded: [[DBusValue]] {
            lock.lock()
            defer { lock.unlock() }
            return calls
        }

        /// The first call, waiting for it with a bound.
        func firstCall(timeout: TimeInterval) async throws -> [DBusValue] {
            if let first = recorded.first { return first }
            return try await withThrowingTaskGroup(of: [DBusValue].self) { group in
                group.addTask {
                    await withCheckedContinuation { c in
                        self.lock.lock()
                        if let first = self.calls.first {
                            self.lock.unlock()
                            c.resume(returning: first)
                        } else {
                            self.waiter = c
                            self.lock.unlock()
                        }
                    }
                }
                group.addTask {
                    try await Task.sleep(nanoseconds: UInt64(timeout * 1e9))
                    throw TimedOut(description: "no ActivateAction within \(timeout) s")
                }
                let r = try await group.next()!
                group.cancelAll()
                return r
            }
        }
    }

    func testApplicationIsWokenWhenItsClientHasLeft() async throws {
        let app = try await FakeApplication(address: bus.address, appID: "org.example.Podcasts")
        cleanups.append { app.connection.close() }
        let body = serve("/episode.mp3", size: 192 * 1024)
        server.set(.slow(bytesPerSecond: 256 * 1024), on: "/episode.mp3")

        // The application's background client: opens its session, queues, quits.
        let appClient = try BusClient(address: bus.address)
        let session = try await appClient.openSession("org.example.Podcasts.background",
                                                      configuration: ["application-id": .string("org.example.Podcasts")])
        let transfer = try await session.download(server.url("/episode.mp3"), options: ["destination": .string(work + "/episode.mp3")])
        appClient.close()

        try await finish(FerryTransfer(client: client, path: transfer.path))
        let args = try await app.firstCall(timeout: 20)
        XCTAssertEqual(args.first?.string, "ferry-events")
        XCTAssertEqual(args.dropFirst().first?.arrayElements?.map { $0.unwrapped }, [.string("org.example.Podcasts.background")])
        assertFile(work + "/episode.mp3", equals: body)

        // The app comes back and collects the event.
        let events = try await client.openSession("org.example.Podcasts.background").pendingEvents()
        XCTAssertEqual(events.map(\.kind), ["finished"])
        XCTAssertEqual(app.recorded.count, 1, "one wake-up for one batch")
    }

    func testNoWakeWhileAClientOfTheSessionIsConnected() async throws {
        let app = try await FakeApplication(address: bus.address, appID: "org.example.Reader")
        cleanups.append { app.connection.close() }
        serve("/book.epub", size: 64 * 1024)
        let session = try await client.openSession("org.example.Reader.background",
                                                   configuration: ["application-id": .string("org.example.Reader")])
        let t = try await session.download(server.url("/book.epub"), options: ["destination": .string(work + "/book.epub")])
        try await finish(t)
        try await signals.wait("the session's AllFinished") { s in
            s.contains { $0.member == "AllFinished" && $0.path == session.path }
        }
        // Anything ferryd sent the app before answering this call has arrived by now.
        _ = try await app.connection.call(destination: BusClient.busName, path: BusClient.managerPath,
                                          interface: BusClient.managerInterface, method: "ListSessions")
        XCTAssertEqual(app.recorded.count, 0, "the session's client is still on the bus: no wake-up")
    }
}
