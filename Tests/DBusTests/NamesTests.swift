import DBus
import XCTest

final class NamesTests: XCTestCase {
    private func check(_ validator: (String) -> Bool, valid: [String], invalid: [String],
                       file: StaticString = #filePath, line: UInt = #line) {
        for s in valid { XCTAssertTrue(validator(s), "should be valid: '\(s)'", file: file, line: line) }
        for s in invalid { XCTAssertFalse(validator(s), "should be invalid: '\(s)'", file: file, line: line) }
    }

    func testObjectPaths() {
        check(BusNames.isValidObjectPath,
              valid: ["/", "/a", "/org/ferry/Ferry1", "/a/b_c/D9", "/_", "/0/1/2", "/" + String(repeating: "x", count: 1000)],
              invalid: ["", "a", "a/b", "//", "/a/", "/a//b", "/a-b", "/a.b", "/ä", "/a b", "/a\u{0}"])
    }

    func testInterfaceAndErrorNames() {
        let valid = ["a.b", "org.ferry.Ferry1", "_a._b", "A9.b_c.D", "org.freedesktop.DBus.Error.Failed",
                     String(repeating: "a", count: 127) + "." + String(repeating: "b", count: 127)]
        let invalid = ["", "a", "a.", ".a", "a..b", "a.1b", "1a.b", "a.b-c", "a.b.", "a/b.c", "a.b c",
                       String(repeating: "a", count: 128) + "." + String(repeating: "b", count: 127), "a.ä"]
        check(BusNames.isValidInterfaceName, valid: valid, invalid: invalid)
        check(BusNames.isValidErrorName, valid: valid, invalid: invalid)
    }

    func testMemberNames() {
        check(BusNames.isValidMemberName,
              valid: ["A", "Get", "get_all", "_x", "Add2", String(repeating: "m", count: 255)],
              invalid: ["", "2Add", "a.b", "a-b", "a b", "ä", String(repeating: "m", count: 256)])
    }

    func testBusNames() {
        check(BusNames.isValidBusName,
              valid: ["org.ferry.Ferry1", "a.b", "a-b.c-d", "_a.b", ":1.42", ":1.0", ":a.b", ":1-2.3",
                      "org.freedesktop.DBus"],
              invalid: ["", "a", ":", ":1", "a.", ".a", "a..b", "1a.b", "a.1b", "a.b c", "a/b.c", "a.ä",
                        String(repeating: "a", count: 200) + "." + String(repeating: "b", count: 60)])
    }

    func testSignatures() {
        check(BusNames.isValidSignature,
              valid: ["", "s", "ii", "a{sv}", "a{oa{sa{sv}}}", "(i(s(b)))", "aay", "v", "h", "sa{sv}as",
                      String(repeating: "a", count: 32) + "i", String(repeating: "i", count: 255)],
              invalid: ["a", "(", ")", "()", "{sv}", "a{vs}", "a{(i)s}", "a{sss}", "a{s}", "z", "(i", "ai)",
                        String(repeating: "a", count: 33) + "i", String(repeating: "i", count: 256), "s\u{0}"])
        check(BusNames.isValidSingleType,
              valid: ["s", "a{sv}", "(ii)", "v", "aay"],
              invalid: ["", "ss", "a", "{sv}", "(i)s", "()"])
    }

    func testCompleteTypes() {
        let cases: [(String, [String]?)] = [
            ("", []),
            ("s", ["s"]),
            ("sa{sv}i", ["s", "a{sv}", "i"]),
            ("(ii)aa(sv)v", ["(ii)", "aa(sv)", "v"]),
            ("a{oa{sa{sv}}}as", ["a{oa{sa{sv}}}", "as"]),
            ("a(s(ii))(a{sv}ay)", ["a(s(ii))", "(a{sv}ay)"]),
            ("ybnqiuxtdsogh", ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h"]),
            ("a", nil),
            ("(", nil),
            ("a{vs}", nil),
            ("{sv}", nil),
        ]
        for (signature, expected) in cases {
            XCTAssertEqual(BusNames.completeTypes(of: signature), expected, signature)
        }
    }

    func testMatchRuleText() {
        XCTAssertEqual(MatchRule().text, "type='signal'")
        XCTAssertEqual(MatchRule(sender: "org.ferry.Ferry1", path: "/a", interface: "a.b", member: "M").text,
                       "type='signal',sender='org.ferry.Ferry1',path='/a',interface='a.b',member='M'")
        XCTAssertEqual(MatchRule(pathNamespace: "/org/ferry").text, "type='signal',path_namespace='/org/ferry'")
    }

    func testMatchRuleLocalMatching() throws {
        let s = try BusMessage.signal(path: "/org/ferry/a", interface: "org.ferry.X", member: "Changed")
        XCTAssertTrue(MatchRule().matches(s))
        XCTAssertTrue(MatchRule(path: "/org/ferry/a").matches(s))
        XCTAssertFalse(MatchRule(path: "/org/ferry").matches(s))
        XCTAssertTrue(MatchRule(pathNamespace: "/org/ferry").matches(s))
        XCTAssertTrue(MatchRule(pathNamespace: "/org/ferry/a").matches(s))
        XCTAssertTrue(MatchRule(pathNamespace: "/").matches(s))
        XCTAssertFalse(MatchRule(pathNamespace: "/org/fer").matches(s))
        XCTAssertTrue(MatchRule(interface: "org.ferry.X", member: "Changed").matches(s))
        XCTAssertFalse(MatchRule(interface: "org.ferry.Y").matches(s))
        XCTAssertFalse(MatchRule(member: "Other").matches(s))
        let call = try BusMessage.methodCall(destination: nil, path: "/org/ferry/a", interface: "org.ferry.X", member: "Changed")
        XCTAssertFalse(MatchRule().matches(call), "a rule only matches signals")
    }
}
