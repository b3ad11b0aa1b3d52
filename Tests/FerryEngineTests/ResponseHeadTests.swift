import XCTest
@testable import FerryEngine

/// Header lines as servers write them: any case, spaces or tabs around the value.
final class ResponseHeadTests: XCTestCase {
    func testNamesAnyCaseAndValuesWithoutSurroundingWhitespace() throws {
        var head = try XCTUnwrap(ResponseHead.statusLine("HTTP/1.1 206 \tPartial Content \t"))
        XCTAssertEqual(head.status, 206)
        XCTAssertEqual(head.reason, "Partial Content")
        head.add("ETag:\t \"abc def\"\t ")
        head.add("LAST-MODIFIED: Wed, 21 Oct 2026 07:28:00 GMT")
        head.add("content-length:    1234  ")
        head.add("Content-Disposition :attachment; filename=\"a b.iso\"")
        head.add("Location:")
        XCTAssertEqual(head.etag, "\"abc def\"", "inner spaces stay")
        XCTAssertEqual(head.lastModified, "Wed, 21 Oct 2026 07:28:00 GMT")
        XCTAssertEqual(head.contentLength, 1234)
        XCTAssertEqual(head.contentDisposition, "attachment; filename=\"a b.iso\"")
        XCTAssertEqual(head.location, "")
    }

    func testAcceptRangesIsAListOfUnits() {
        var head = ResponseHead()
        head.add("Accept-Ranges: none")
        XCTAssertFalse(head.acceptsByteRanges)
        head.add("Accept-Ranges: pages ,\tBytes ")
        XCTAssertTrue(head.acceptsByteRanges)
    }

    func testOnlySpacesAndTabsAreOptionalWhitespace() {
        XCTAssertEqual(ResponseHead.trimmingOWS(" \t x y \t "[...]), "x y")
        XCTAssertEqual(ResponseHead.trimmingOWS(" \t "[...]), "")
        XCTAssertEqual(ResponseHead.trimmingOWS("\u{00A0}é\u{00A0}"[...]), "\u{00A0}é\u{00A0}", "not HTTP whitespace")
        let line = "Name: value"
        let cut = line[line.index(line.startIndex, offsetBy: 5)...]
        XCTAssertEqual(ResponseHead.trimmingOWS(cut), "value", "indices of a substring of a longer string")
    }
}
