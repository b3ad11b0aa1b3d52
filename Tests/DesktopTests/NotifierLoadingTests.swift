import FerryCore
import FerryDesktop
import FerryTestSupport
import Foundation
import Logging
import XCTest

/// The notifier where libnotify cannot be loaded (a machine without it): posting
/// changes nothing for the caller, the reason is logged once, and leaving is immediate.
final class NotifierLoadingTests: XCTestCase {
    func testWithoutLibnotifyPostsAreDroppedAndTheReasonIsLoggedOnce() throws {
        let log = LogCapture()
        let notifier = DesktopNotifier(logger: log.logger, libraryName: "libnotify-absent.so.4")
        let n = DesktopNotification(batch: 1, summary: "Download complete", body: "a.bin", category: "transfer.complete",
                                    urgency: .normal, actions: [.init(key: "default", label: "Open")])
        // The first post starts the thread that tries to load it; until that has failed,
        // the notification counts as pending (ferryd does not exit for idleness meanwhile).
        // (That nothing is loaded before a post is checked on ferryd itself, in
        // NotificationTests.testLibnotifyIsLoadedByTheFirstNotificationNotAtStart.)
        notifier.post(n)
        let deadline = Date().addingTimeInterval(10)
        while notifier.hasPendingActions, Date() < deadline { usleep(1000) }
        XCTAssertFalse(notifier.hasPendingActions, "the failed load drops what was posted")
        for batch in 2...3 {
            var next = n
            next.batch = UInt64(batch)
            notifier.post(next)
            XCTAssertFalse(notifier.hasPendingActions, "dropped at once, once libnotify is known to be missing")
        }
        XCTAssertFalse(notifier.isLoaded)
        let warnings = log.messages.filter { $0.level >= .warning }.map(\.text)
        XCTAssertEqual(warnings.count, 1, "\(warnings)")
        XCTAssertTrue(warnings.first?.contains("libnotify-absent.so.4") == true, "\(warnings)")
        let start = Date()
        notifier.close(timeout: 10)
        XCTAssertLessThan(Date().timeIntervalSince(start), 1, "no GLib loop to wait for")
    }
}
