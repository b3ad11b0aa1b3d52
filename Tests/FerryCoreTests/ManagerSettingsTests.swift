import XCTest
@testable import FerryCore

/// The manager's settings alone: MaxConcurrentTransfers stays within its limits, set
/// or restored.
final class ManagerSettingsTests: XCTestCase {
    func testAValueOutOfRangeIsRefusedAndChangesNothing() throws {
        var settings = ManagerSettings()
        try settings.setMaxConcurrentTransfers(3)
        XCTAssertThrowsError(try settings.setMaxConcurrentTransfers(0))
        XCTAssertThrowsError(try settings.setMaxConcurrentTransfers(Limits.concurrentTransfers.upperBound + 1))
        XCTAssertEqual(settings.maxConcurrentTransfers, 3)
    }

    func testRestoredSettingsComeBackAndAStoredValueOutOfRangeGivesTheDefault() {
        var settings = ManagerSettings()
        settings.restore(StoredSettings(maxConcurrentTransfers: 9, speedLimit: 500, notificationsEnabled: false))
        XCTAssertEqual(settings.stored(schedule: []),
                       StoredSettings(maxConcurrentTransfers: 9, speedLimit: 500, notificationsEnabled: false))
        settings.restore(StoredSettings(maxConcurrentTransfers: 0))
        XCTAssertEqual(settings.maxConcurrentTransfers, ManagerSettings.defaultMaxConcurrentTransfers)
    }
}
