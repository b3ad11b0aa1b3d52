import DBus
import XCTest

/// Bodies the bus could not carry (an array over 64 MiB, a message over 128 MiB) are
/// refused when appended, with LimitsExceeded, instead of being sent: the bus would
/// disconnect the sender. Nothing is marshalled: the size is worked out first.
final class WireLimitsTests: XCTestCase {
    private func message() throws -> BusMessage {
        try BusMessage.methodCall(destination: "org.ferry.Test", path: "/org/ferry/Test", interface: "org.ferry.Test.Sample1",
                                  member: "Call")
    }

    private func assertTooLarge(_ values: [DBusValue], _ what: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let m = try message()
        XCTAssertThrowsError(try m.append(values), what, file: file, line: line) { error in
            XCTAssertEqual((error as? BusError)?.name, StandardErrors.limitsExceeded, "\(what): \(error)", file: file, line: line)
        }
        XCTAssertEqual(m.signature, "", "\(what): nothing was appended", file: file, line: line)
    }

    func testArraysOverSixtyFourMebibytesAreRefused() throws {
        let limit = WireLimits.maximumArrayBytes
        try assertTooLarge([.bytes([UInt8](repeating: 1, count: limit + 1))], "ay of 64 MiB + 1")
        // 1,100 strings of 64 KiB: the shape of a GetManagedObjects with long URLs.
        let long = String(repeating: "u", count: 65_536)
        try assertTooLarge([.stringArray(Array(repeating: long, count: 1_100))], "as of ~68 MiB")
        let entries = (0..<1_100).map { DBusValue.DictEntry(.objectPath("/t/\($0)"), .vardict(["Url": .string(long)])) }
        try assertTooLarge([.dictionary(key: "o", value: "a{sv}", entries)], "a{oa{sv}} of ~68 MiB")
        // Nested inside a variant and a struct, too.
        try assertTooLarge([.variant(.structure([.string("x"), .stringArray(Array(repeating: long, count: 1_100))]))], "nested")
    }

    func testMessagesOverOneHundredTwentyEightMebibytesAreRefused() throws {
        let chunk = [UInt8](repeating: 2, count: 60 * 1024 * 1024)
        // Each array is within its limit; together they are not.
        try assertTooLarge([.bytes(chunk), .bytes(chunk), .bytes(chunk)], "three arrays of 60 MiB")
    }

    func testTheLimitsThemselvesAreFine() throws {
        let m = try message()
        let exactly = [UInt8](repeating: 3, count: WireLimits.maximumArrayBytes)
        XCTAssertNoThrow(try m.append([.bytes(exactly)]))
        XCTAssertEqual(m.signature, "ay")
        let small = try message()
        XCTAssertNoThrow(try small.append([.stringArray(Array(repeating: String(repeating: "u", count: 65_536), count: 900))]))
    }
}
