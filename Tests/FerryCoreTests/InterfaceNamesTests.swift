import FerryInterface
import XCTest
@testable import FerryCore

/// The bus API's names come from one declaration: the core's errors and the paths
/// the service exports read back through it.
final class InterfaceNamesTests: XCTestCase {
    func testEveryCoreErrorHasAContractName() {
        let errors: [CoreError] = [
            .invalidArgument(""), .invalidUrl(""), .unsupportedScheme(""), .invalidDestination(""), .fileNotFound(""),
            .invalidState(""), .invalidResumeData(""), .noSuchSession(""), .noSuchTransfer(""), .limitExceeded(""),
            .accessDenied(""), .network(""), .timeout(""), .http(status: 404, ""), .tls(""), .tooManyRedirects(""),
            .disk(""), .checksumMismatch(""), .cancelled(""), .invalidMetalink(""),
        ]
        XCTAssertEqual(Set(errors.map(\.errorName)), Set(FerryInterface.ErrorName.allCases), "one case per contract name")
        for e in errors {
            XCTAssertEqual(FerryInterface.ErrorName(fullName: e.name), e.errorName, e.name)
            XCTAssertTrue(e.name.hasPrefix("org.ferry.Ferry1.Error."), e.name)
        }
        XCTAssertNil(FerryInterface.ErrorName(fullName: "org.freedesktop.DBus.Error.Failed"))
    }

    func testPathsRoundTrip() {
        XCTAssertEqual(FerryInterface.transferPath(42), "/org/ferry/Ferry1/transfer/42")
        XCTAssertEqual(FerryInterface.id(inPath: FerryInterface.transferPath(42), kind: "transfer"), 42)
        XCTAssertEqual(FerryInterface.id(inPath: FerryInterface.sessionPath(7), kind: "session"), 7)
        XCTAssertNil(FerryInterface.id(inPath: "/org/ferry/Ferry1/transfer/4x", kind: "transfer"))
        XCTAssertNil(FerryInterface.id(inPath: FerryInterface.sessionPath(7), kind: "transfer"))
    }
}
