import DBus
import FerryCore
import FerryService
import FerryTestSupport
import Foundation
import FerryCoreTestSupport
import XCTest

/// The service's side of the notification, in process, with a fake notifier and an
/// engine that answers at once: what is posted, and what its actions do.
final class BatchNotificationsTests: XCTestCase {
    var bus: PrivateBus!
    var connection: BusConnection!
    var directory: String!

    override func setUp() async throws {
        try await super.setUp()
        bus = try withUnblockedSignals { try PrivateBus() }
        connection = try BusConnection(address: bus.address)
        directory = try makeShortTemporaryDirectory(prefix: "ferry-batch")
    }

    override func tearDown() async throws {
        connection?.close()
        bus?.stop()
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
        try await super.tearDown()
    }

    func testOnePostPerBatchAndRetryResumesTheFailedOnes() async throws {
        let engine = FakeEngine(.instant)
        let core = TransferCoordinator(engine: engine, environment: CoreEnvironment(defaultDownloadDirectory: { [directory] in directory! }))
        let notifier = FakeNotifier()
        let service = FerryBusService(bus: connection, core: core, version: "test", defaultDirectory: directory, notifier: notifier)
        core.queue.sync { core.start() }
        try await service.start()

        engine.failing = ["https://example.org/b.bin"]
        try core.queue.sync {
            let s = try core.openSession(identifier: "com.example.Fake", configuration: .init()).id
            var paused = DownloadOptions()
            paused.start = false
            for u in ["https://example.org/a.bin", "https://example.org/b.bin"] { _ = try core.download(session: s, url: u, options: paused) }
            try core.resumeAll(session: s)
        }
        XCTAssertTrue(waitUntil { notifier.posted.count == 1 })
        let first = try XCTUnwrap(notifier.posted.first)
        XCTAssertEqual(first.summary, "1 downloaded, 1 failed")
        XCTAssertEqual(first.body.split(separator: "\n").first, "b.bin — 404 Not Found")
        XCTAssertEqual(first.actions.map(\.key), ["default", "show", "retry"])

        // Retry from a stale notification does nothing; from the shown one it resumes.
        engine.failing = []
        notifier.click(batch: first.batch + 1, "retry")
        notifier.click(batch: first.batch, "retry")
        XCTAssertTrue(waitUntil { notifier.posted.count == 2 })
        XCTAssertEqual(notifier.posted.last?.summary, "Download complete")
        XCTAssertEqual(notifier.posted.last?.body, "b.bin (1000 bytes) in \(directory!)")
        XCTAssertEqual(engine.requests.filter { $0.hasSuffix("b.bin") }.count, 2, "b.bin was tried again once")
        core.queue.sync { core.shutdown() }
    }
}

/// Records posts; `click` plays the user picking an action.
final class FakeNotifier: Notifier, @unchecked Sendable {
    // Everything under `lock`.
    private let lock = NSLock()
    private var _posted: [DesktopNotification] = []
    private var handler: (@Sendable (UInt64, String, String) -> Void)?

    func post(_ notification: DesktopNotification) { lock.withLock { _posted.append(notification) } }
    func setActionHandler(_ handler: @escaping @Sendable (UInt64, String, String) -> Void) { lock.withLock { self.handler = handler } }
    var hasPendingActions: Bool { false }
    func close(timeout: Double) {}

    var posted: [DesktopNotification] { lock.withLock { _posted } }
    func click(batch: UInt64, _ key: String) { lock.withLock { handler }?(batch, key, "") }
}

