import XCTest
@testable import FerryCore

/// A Last-Modified date within 60 s of the answer's Date is weak (RFC 9110 §8.8.2.2)
/// and checks no range.
final class WeakDateTests: XCTestCase {
    func testHTTPDatesParse() {
        XCTAssertEqual(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_777)
        XCTAssertEqual(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT"), 784_111_777)
        XCTAssertEqual(HTTPDate.parse("Sun Nov  6 08:49:37 1994"), 784_111_777)
        XCTAssertEqual(HTTPDate.parse("Thu, 01 Jan 1970 00:00:00 GMT"), 0)
        XCTAssertEqual(HTTPDate.parse("Tue, 29 Feb 2028 12:00:00 GMT"), 1_835_438_400)
        XCTAssertNil(HTTPDate.parse("yesterday"))
    }

    func testADateWithinAMinuteOfDateIsNoValidator() {
        let date = "Sat, 05 Dec 2026 09:00:00 GMT"
        XCTAssertNil(RangeValidator.usableLastModified(date, date: date))
        XCTAssertNil(RangeValidator.usableLastModified("Sat, 05 Dec 2026 08:59:01 GMT", date: date))
        XCTAssertNil(RangeValidator.usableLastModified("Sat, 05 Dec 2026 09:05:00 GMT", date: date), "after Date")
        XCTAssertEqual(RangeValidator.usableLastModified("Sat, 05 Dec 2026 08:59:00 GMT", date: date),
                       "Sat, 05 Dec 2026 08:59:00 GMT", "a minute before: strong")
        XCTAssertEqual(RangeValidator.usableLastModified(date, date: nil), date, "no Date: taken as it is")
        XCTAssertNil(RangeValidator.usableLastModified(nil, date: date))
    }
}
