import FerryCore
@testable import FerryService
import XCTest

final class BatchSummaryTests: XCTestCase {
    func testPlaceholder() {}
}
