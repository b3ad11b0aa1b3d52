import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The batch notification, seen by a real notification server on the bus
/// (python-dbusmock's notification_daemon template).
final class NotificationTests: DesktopBusTestCase {
    func testOneNotificationSumsUpABatchAndTheNextReplacesIt() async throws {
        let notifications = try await startNotificationServer()
        try await startFerryd()
        serve("/a.iso", size: 300_000)
        serve("/b.iso", size: 200_000, seed: 2)
        let session = try await client.openSession("com.example.Desktop")

        try await batch(session, [server.url("/a.iso"), server.url("/b.iso"), server.url("/report.pdf")])
        var calls = try await notifyCalls(notifications, atLeast: 1)
        XCTAssertEqual(calls.count, 1, "one notification per batch")
        let first = try XCTUnwrap(calls.first)
        XCTAssertEqual(first.appName, "Ferry")
        XCTAssertEqual(first.replacesID, 0)
        XCTAssertEqual(first.summary, "2 downloaded, 1 failed")
        XCTAssertEqual(first.body, "report.pdf — 404 Not Found\n2 files (488.3 KiB) in ~/Dl")
        XCTAssertEqual(first.hints["desktop-entry"]?.string, "org.ferry.Ferry")
        XCTAssertEqual(first.hints["category"]?.string, "transfer.error")
        XCTAssertEqual(first.hints["urgency"]?.byte, 1)
        XCTAssertEqual(first.actionKeys, ["default", "show", "retry"])
        XCTAssertEqual(first.actions.first { $0.key == "show" }?.label, "Open Folder")
        XCTAssertEqual(first.actions.first { $0.key == "retry" }?.label, "Retry")

        // Another session: Session.ResumeAll in `batch` would retry the failed one too.
        let other = try await client.openSession("com.example.Desktop2")
        try await batch(other, [server.url("/a.iso")])
        calls = try await notifyCalls(notifications, atLeast: 2)
        XCTAssertEqual(calls.count, 2)
        let second = try XCTUnwrap(calls.last)
        XCTAssertEqual(second.replacesID, 1, "the second batch replaces the first notification (the mock's id 1)")
        XCTAssertEqual(second.summary, "Download complete")
        XCTAssertEqual(second.body, "a (1).iso (293.0 KiB) in ~/Dl")
        XCTAssertEqual(second.hints["category"]?.string, "transfer.complete")
        XCTAssertEqual(second.actionKeys, ["default", "show"])
        XCTAssertEqual(second.actions.first { $0.key == "show" }?.label, "Show File")
    }

    /// libnotify (and GLib, GIO, gdk-pixbuf with it) is loaded by the first notification,
    /// not at start: a ferryd that has ended no batch does not carry it.
    func testLibnotifyIsLoadedByTheFirstNotificationNotAtStart() async throws {
        let notifications = try await startNotificationServer()
        try await startFerryd()
        let pid = try XCTUnwrap(ferryd).pid
        serve("/first.bin", size: 10_000)
        let session = try await client.openSession("com.example.Lazy")
        _ = try await client.managedObjects()
        XCTAssertEqual(try mappedLibraries(pid, matching: ["libnotify", "libglib-2.0", "libgdk_pixbuf"]), [],
                       "nothing of libnotify before a notification")

        try await batch(session, [server.url("/first.bin")])
        let calls = try await notifyCalls(notifications, atLeast: 1)
        XCTAssertEqual(calls.map(\.summary), ["Download complete"])
        XCTAssertEqual(calls.first?.body, "first.bin (9.8 KiB) in ~/Dl")
        XCTAssertEqual(try mappedLibraries(pid, matching: ["libnotify", "libglib-2.0"]).sorted(),
                       ["libglib-2.0", "libnotify"], "loaded by the first notification")
    }

    /// Which of `names` appear among the files process `pid` has mapped.
    private func mappedLibraries(_ pid: Int32, matching names: [String]) throws -> [String] {
        let maps = try XCTUnwrap(ProcFile.contents("/proc/\(pid)/maps"))
        XCTAssertTrue(maps.contains("[stack]"), "the whole of /proc/\(pid)/maps was read")
        return names.filter { maps.contains("/\($0)") }
    }

    func testNotificationsEnabledFalseAndSessionNotifyFalseShowNothing() async throws {
        let notifications = try await startNotificationServer()
        try await startFerryd()
        serve("/quiet.bin", size: 10_000)
        serve("/loud.bin", size: 20_000)
        let loud = try await client.openSession("com.example.Loud")
        let quiet = try await client.openSession("com.example.Quiet", configuration: ["notify": .boolean(false)])

        try await client.setManagerProperty("NotificationsEnabled", .boolean(false))
        try await batch(loud, [server.url("/quiet.bin")])
        try await client.setManagerProperty("NotificationsEnabled", .boolean(true))
        try await batch(quiet, [server.url("/quiet.bin")])
        // The notifier shows in order: had either batch above posted, its Notify
        // would come before this one's.
        try await batch(loud, [server.url("/loud.bin")])

        let calls = try await notifyCalls(notifications, atLeast: 1)
        XCTAssertEqual(calls.map(\.summary), ["Download complete"])
        XCTAssertEqual(calls.first?.body, "loud.bin (19.5 KiB) in ~/Dl")
    }

    func testRetryActionRetriesTheFailedTransfers() async throws {
        let notifications = try await startNotificationServer()
        try await startFerryd()
        let session = try await client.openSession("com.example.Retry")
        let transfers = try await batch(session, [server.url("/later.bin")])
        let failed = try XCTUnwrap(transfers.first)
        let failedState = try await failed.info().state
        XCTAssertEqual(failedState, "failed")
        let shown = try await notifyCalls(notifications, atLeast: 1)
        let first = try XCTUnwrap(shown.first)
        XCTAssertEqual(first.summary, "Download failed")
        XCTAssertEqual(first.body, "later.bin — 404 Not Found")
        XCTAssertEqual(first.actionKeys, ["retry"])

        // The file is there now; the user clicks Retry.
        serve("/later.bin", size: 50_000)
        try await notifications.emit("org.freedesktop.Notifications", "ActionInvoked", signature: "us", [.uint32(1), .string("retry")])
        let done = try await eventually(15) { try await failed.info().state == "completed" }
        XCTAssertTrue(done, "the failed transfer was retried and completed")
        let calls = try await notifyCalls(notifications, atLeast: 2)
        XCTAssertEqual(calls.count, 2)
        XCTAssertEqual(calls.last?.summary, "Download complete")
        XCTAssertEqual(calls.last?.replacesID, 1)
    }

    func testShowActionAsksTheFileManager() async throws {
        let notifications = try await startNotificationServer()
        let fileManager = try await MockService.fileManager(environment: environment(), bus: client.bus)
        mocks.append(fileManager)
        try await startFerryd()
        serve("/photo.jpg", size: 4_000)
        let session = try await client.openSession("com.example.Show")
        let transfers = try await batch(session, [server.url("/photo.jpg")])
        let t = try XCTUnwrap(transfers.first)
        let destination = try await t.info().destination
        _ = try await notifyCalls(notifications, atLeast: 1)

        try await notifications.emit("org.freedesktop.Notifications", "ActionInvoked", signature: "us", [.uint32(1), .string("show")])
        var calls: [[DBusValue]] = []
        _ = try await eventually(10) {
            calls = try await fileManager.calls("ShowItems")
            return !calls.isEmpty
        }
        XCTAssertEqual(calls.count, 1)
        let uris = calls.first?.first?.arrayElements?.compactMap(\.string)
        XCTAssertEqual(uris, [URL(fileURLWithPath: destination).absoluteString])
    }

    func testMissingNotificationServerDelaysNothingAndIsLoggedOnce() async throws {
        try await startFerryd()
        serve("/x.bin", size: 10_000)
        let session = try await client.openSession("com.example.NoServer")
        for _ in 0..<3 {
            let start = Date()
            try await batch(session, [server.url("/x.bin")])
            XCTAssertLessThan(Date().timeIntervalSince(start), 5)
        }
        // Each batch tried to notify; only the first failure was logged as a warning.
        let log = try XCTUnwrap(ferryd).stderr
        XCTAssertEqual(log.components(separatedBy: "warning ferry.notify").count - 1, 1, log)
    }

    func testHungNotificationServerDelaysNothing() async throws {
        let notifications = try await startNotificationServer()
        // The server takes 20 s to answer Notify (its main loop is blocked meanwhile).
        try await notifications.mock("AddMethod", [.string("org.freedesktop.Notifications"), .string("Notify"),
                                                   .string("susssasa{sv}i"), .string("u"), .string("time.sleep(20)\nret = 1")])
        try await startFerryd()
        serve("/y.bin", size: 10_000)
        let session = try await client.openSession("com.example.Hung")
        try await batch(session, [server.url("/y.bin")])
        // ferryd is now stuck in Notify on its GLib thread; transfers go on regardless.
        let start = Date()
        let transfers = try await batch(session, [server.url("/y.bin")])
        let t = try XCTUnwrap(transfers.first)
        let state = try await t.info().state
        XCTAssertEqual(state, "completed")
        XCTAssertLessThan(Date().timeIntervalSince(start), 5, "a hung notification server must not delay a batch")
        let log = try XCTUnwrap(ferryd).stderr
        XCTAssertFalse(log.contains("notification shown"), "the server was meant to be hung\n\(log)")
    }
}

/// A group of 1,000 downloads (`Session.DownloadGroup`, v1.2) is one batch: one
/// notification sums it up.
final class GroupNotificationTests: DesktopBusTestCase {
    func testAThousandDownloadsInOneGroupMakeOneNotification() async throws {
        let notifications = try await startNotificationServer()
        try await startFerryd()
        let n = 1000
        var items: [(url: String, options: [String: DBusValue])] = []
        for i in 0..<n {
            serve("/many/\(i).bin", size: 100 + i, seed: UInt64(i + 1))
            items.append((server.url("/many/\(i).bin"), [:]))
        }
        let session = try await client.openSession("com.example.Group")
        let before = signals.count("AllFinished", path: BusClient.managerPath)
        let group = try await session.downloadGroup(items)
        let ended = await eventually(120) { self.signals.count("AllFinished", path: BusClient.managerPath) > before }
        XCTAssertTrue(ended, "no AllFinished within 120 s")
        let info = try await group.info()
        XCTAssertEqual(info.succeeded, UInt32(n))
        let calls = try await notifyCalls(notifications, atLeast: 1)
        XCTAssertEqual(calls.count, 1, "one notification for the group's batch")
        XCTAssertTrue(calls.first?.summary.contains("\(n)") ?? false, calls.first?.summary ?? "none")
    }
}
