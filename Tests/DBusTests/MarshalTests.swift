@testable import DBus
import XCTest

/// Values through a message in memory: no bus needed.
final class MarshalTests: XCTestCase {
    private func message() throws -> BusMessage {
        try BusMessage.methodCall(destination: "org.ferry.Test", path: "/org/ferry/Test", interface: "org.ferry.Test.Sample1",
                                  member: "Call")
    }

    /// Appends `values`, checks the signature, reads them back.
    private func assertRoundTrip(_ values: [DBusValue], expect expected: [DBusValue]? = nil,
                                 file: StaticString = #filePath, line: UInt = #line) throws {
        let m = try message()
        try m.append(values)
        XCTAssertEqual(m.signature, values.map(\.signature).joined(), file: file, line: line)
        XCTAssertEqual(try m.arguments(), expected ?? values, file: file, line: line)
        // The two ways each direction goes agree: WireReader and libdbus's iterators
        // read the same values, and WireWriter lays out the bytes libdbus wrote.
        XCTAssertEqual(try m.argumentsFromBytes(), try m.argumentsFromIterators(), file: file, line: line)
        var writer = WireWriter(storing: true)
        try writer.append(values)
        let libdbusBody = try m.withMarshalledBytes { whole in
            let (start, length) = try WireReader.bodyRange(ofMessage: whole)
            return Array(whole[start..<(start + length)])
        }
        XCTAssertEqual(writer.bytes, libdbusBody, file: file, line: line)
        XCTAssertEqual(writer.count, libdbusBody.count, file: file, line: line)
        var measure = WireWriter(storing: false)
        try measure.append(values)
        XCTAssertEqual(measure.count, libdbusBody.count, file: file, line: line)
    }

    func testBasicTypes() throws {
        let values: [DBusValue] = [
            .byte(0), .byte(255),
            .boolean(true), .boolean(false),
            .int16(.min), .int16(.max), .uint16(0), .uint16(.max),
            .int32(.min), .int32(-1), .int32(.max), .uint32(.max),
            .int64(.min), .int64(.max), .uint64(0), .uint64(.max),
            .double(0), .double(-1.5), .double(.pi), .double(.infinity), .double(-.infinity), .double(.greatestFiniteMagnitude),
            .string(""), .string("plain"), .string("héllo ✓ 🚀 ünïcode"), .string(String(repeating: "x", count: 100_000)),
            .objectPath("/"), .objectPath("/org/ferry/Ferry1/transfers/42"), .objectPath("/_a/B9"),
            .signature(""), .signature("s"), .signature("a{oa{sa{sv}}}"), .signature("(ii)aa(sv)v"),
        ]
        try assertRoundTrip(values)
        XCTAssertEqual(values.map(\.signature).joined(), "yybbnnqqiiiuxxttddddddssssooogggg")
    }

    /// Other peers may send big-endian messages (libdbus passes them on as they came).
    func testBigEndianMessagesAreRead() throws {
        var bytes: [UInt8] = [UInt8(ascii: "B"), 1, 0, 1, 0, 0, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0]  // header, no fields
        bytes += [0, 0, 0, 2, UInt8(ascii: "h"), UInt8(ascii: "i"), 0, 0]                        // s "hi", padding
        bytes += [0, 0, 0, 7, 0, 0, 0, 0]                                                        // u 7, padding to 8
        bytes += [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]                                // x -2
        let values = try bytes.withUnsafeBytes { try WireReader.values(ofMessage: $0, signature: "sux") }
        XCTAssertEqual(values, [.string("hi"), .uint32(7), .int64(-2)])
        // Cut short, it throws instead of reading past the end.
        bytes[7] = 30
        XCTAssertThrowsError(try bytes.withUnsafeBytes { try WireReader.values(ofMessage: $0, signature: "sux") })
        bytes[7] = 24
        XCTAssertThrowsError(try bytes.withUnsafeBytes { try WireReader.values(ofMessage: $0, signature: "suxs") })
    }

    func testNaN() throws {
        let m = try message()
        try m.append(.double(.nan))
        XCTAssertEqual(try m.arguments().first?.double?.isNaN, true)
    }

    func testByteArrays() throws {
        try assertRoundTrip([.bytes([])])
        try assertRoundTrip([.bytes([0, 1, 127, 128, 255])])
        let big = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let m = try message()
        try m.append(.bytes(big), .string("after"))
        XCTAssertEqual(m.signature, "ays")
        let back = try m.arguments()
        XCTAssertEqual(back.count, 2)
        XCTAssertEqual(back[0].bytes?.count, 1 << 20)
        XCTAssertEqual(back[0].bytes, big)
        XCTAssertEqual(back[1], .string("after"))
        // `array(element: "y", …)` is accepted and comes back as `.bytes`.
        try assertRoundTrip([.array(element: "y", [.byte(1), .byte(2)]), .array(element: "y", [])],
                            expect: [.bytes([1, 2]), .bytes([])])
    }

    func testArrays() throws {
        try assertRoundTrip([
            .array(element: "s", []),
            .stringArray(["a", "", "c"]),
            .pathArray(["/a", "/b/c"]),
            .array(element: "i", (0..<1000).map { .int32($0) }),
            .array(element: "as", []),
            .array(element: "as", [.stringArray([]), .stringArray(["x"])]),
            .array(element: "ay", [.bytes([1]), .bytes([])]),
            .array(element: "v", [.variant(.int32(1)), .variant(.string("x")), .variant(.bytes([9]))]),
            .array(element: "d", [.double(1), .double(2.5)]),
            .array(element: "b", [.boolean(true), .boolean(false)]),
        ])
    }

    func testDictionaries() throws {
        let vardict = DBusValue.vardict([
            "int": .int32(7),
            "string": .string("s"),
            "nested": .vardict(["deeper": .vardict(["x": .uint64(1)])]),
            "variant": .variant(.variant(.boolean(true))),
            "list": .stringArray(["a", "b"]),
            "struct": .structure([.int32(1), .objectPath("/p")]),
            "bytes": .bytes([1, 2, 3]),
        ])
        XCTAssertEqual(vardict.signature, "a{sv}")
        let managed = DBusValue.dictionary(key: "o", value: "a{sa{sv}}", [
            .init(.objectPath("/org/ferry/Ferry1/transfers/1"), .dictionary(key: "s", value: "a{sv}", [
                .init(.string("org.ferry.Transfer1"), .vardict(["State": .string("queued"), "Size": .uint64(10)])),
                .init(.string("org.freedesktop.DBus.Properties"), .vardict([:])),
            ])),
            .init(.objectPath("/org/ferry/Ferry1/transfers/2"), .dictionary(key: "s", value: "a{sv}", [])),
        ])
        XCTAssertEqual(managed.signature, "a{oa{sa{sv}}}")
        try assertRoundTrip([
            vardict,
            .vardict([:]),
            .stringDict(["b": "2", "a": "1"]),
            managed,
            .dictionary(key: "u", value: "b", [.init(.uint32(1), .boolean(true)), .init(.uint32(2), .boolean(false))]),
            .dictionary(key: "o", value: "as", [.init(.objectPath("/x"), .stringArray(["y"]))]),
            .dictionary(key: "s", value: "(ii)", [.init(.string("p"), .structure([.int32(1), .int32(2)]))]),
        ])
        // Reading helpers.
        let m = try message()
        try m.append(vardict, .stringDict(["k": "v"]))
        let back = try m.arguments()
        XCTAssertEqual(back[0].vardict?["int"], .int32(7))
        XCTAssertEqual(back[0].vardict?["variant"], .boolean(true))
        XCTAssertEqual(back[0].vardict?["nested"]?.vardict?["deeper"]?.vardict?["x"], .uint64(1))
        XCTAssertEqual(back[1].stringDict, ["k": "v"])
    }

    func testStructsAndVariants() throws {
        let nested = DBusValue.structure([.int32(1), .structure([.string("in"), .structure([.boolean(true)])]), .bytes([7])])
        XCTAssertEqual(nested.signature, "(i(s(b))ay)")
        let structs = DBusValue.array(element: "(sy)", [.structure([.string("a"), .byte(1)]), .structure([.string("b"), .byte(2)])])
        try assertRoundTrip([
            .structure([.int32(1), .string("x")]),
            nested,
            structs,
            .array(element: "(sy)", []),
            .variant(.int32(5)),
            .variant(.variant(.string("deep"))),
            .variant(.variant(.variant(.vardict(["k": .variant(.uint16(3))])))),
            .variant(structs),
            .variant(.bytes([])),
            .structure([.variant(.structure([.double(1)])), .array(element: "a{sv}", [.vardict(["a": .int64(-1)])])]),
        ])
        XCTAssertEqual(structs.signature, "a(sy)")
    }

    func testEmptyBodyAndEveryTypeAtOnce() throws {
        XCTAssertEqual(try message().arguments(), [])
        XCTAssertEqual(try message().signature, "")
        // Appending twice keeps the order.
        let m = try message()
        try m.append(.string("one"))
        try m.append([.uint32(2), .variant(.objectPath("/three"))])
        XCTAssertEqual(m.signature, "suv")
        XCTAssertEqual(try m.arguments(), [.string("one"), .uint32(2), .variant(.objectPath("/three"))])
    }

    /// Each of these would trip an assertion or a check in libdbus (which aborts
    /// the process) if it got that far; `append` must throw instead, and leave
    /// the message as it was.
    func testInvalidValuesThrow() throws {
        let deepStruct = (0..<40).reduce(DBusValue.int32(0)) { inner, _ in .structure([inner]) }
        let deepArrayType = String(repeating: "a", count: 40) + "i"
        let bad: [(String, DBusValue)] = [
            ("relative path", .objectPath("org/ferry")),
            ("empty path", .objectPath("")),
            ("double slash", .objectPath("/a//b")),
            ("trailing slash", .objectPath("/a/")),
            ("dash in path", .objectPath("/a-b")),
            ("NUL in string", .string("a\u{0}b")),
            ("NUL in nested string", .vardict(["k": .string("\u{0}")])),
            ("wrong item type", .array(element: "s", [.int32(1)])),
            ("mixed items", .array(element: "i", [.int32(1), .uint32(2)])),
            ("bytes in array of i", .array(element: "i", [.bytes([1])])),
            ("bad element type", .array(element: "{sv}", [])),
            ("two types as element", .array(element: "ss", [])),
            ("empty element type", .array(element: "", [])),
            ("empty struct", .structure([])),
            ("empty struct in variant", .variant(.structure([]))),
            ("empty struct in array", .array(element: "(i)", [.structure([])])),
            ("invalid signature", .signature("a{vs}")),
            ("unbalanced signature", .signature("(")),
            ("unknown type code", .signature("z")),
            ("NUL in signature", .signature("s\u{0}")),
            ("too long signature", .signature(String(repeating: "i", count: 256))),
            ("variant key", .dictionary(key: "v", value: "s", [])),
            ("container key", .dictionary(key: "(i)", value: "s", [])),
            ("wrong key type", .dictionary(key: "s", value: "s", [.init(.int32(1), .string("x"))])),
            ("wrong value type", .dictionary(key: "s", value: "v", [.init(.string("k"), .string("not a variant"))])),
            ("bad path as value", .vardict(["p": .objectPath("nope")])),
            ("bad path in struct", .structure([.int32(1), .objectPath("//")])),
            ("array nested too deep", .array(element: deepArrayType, [])),
            ("struct nested too deep", deepStruct),
            ("struct nested too deep in a variant", .variant(deepStruct)),
            ("variant signature too long", .variant(.structure(Array(repeating: .int32(0), count: 300)))),
            ("variants nested too deep", nestedVariants(65)),
            ("dictionaries nested too deep", (0..<33).reduce(DBusValue.int32(0)) { inner, _ in .vardict(["k": inner]) }),
        ]
        for (what, value) in bad {
            let m = try message()
            try m.append(.string("kept"))
            XCTAssertThrowsError(try m.append(.int32(1), value), what) { error in
                XCTAssertEqual((error as? BusError)?.name, StandardErrors.invalidArgs, "\(what): \(error)")
            }
            XCTAssertEqual(m.signature, "s", what)
            XCTAssertEqual(try m.arguments(), [.string("kept")], what)
        }
    }

    /// `n` variants around an int32.
    private func nestedVariants(_ n: Int) -> DBusValue {
        (0..<n).reduce(DBusValue.int32(1)) { inner, _ in .variant(inner) }
    }

    /// Values may nest 64 containers deep, variants included.
    func testDeepestAllowedNesting() throws {
        try assertRoundTrip([nestedVariants(64)])
        let deepArrays = (0..<32).reduce(DBusValue.int32(1)) { inner, _ in .array(element: inner.signature, [inner]) }
        XCTAssertEqual(deepArrays.signature, String(repeating: "a", count: 32) + "i")
        try assertRoundTrip([deepArrays])
        let deepStructs = (0..<32).reduce(DBusValue.int32(1)) { inner, _ in .structure([inner]) }
        try assertRoundTrip([deepStructs, .variant(deepStructs)])
        XCTAssertThrowsError(try message().append(.array(element: deepArrays.signature, [deepArrays])))
        XCTAssertThrowsError(try message().append(.structure([deepStructs])))
    }

    /// The body's signature is limited to 255 characters.
    func testTooManyArgumentsThrow() throws {
        let m = try message()
        XCTAssertThrowsError(try m.append(Array(repeating: DBusValue.int32(1), count: 256)))
        XCTAssertEqual(m.signature, "")
        try m.append(Array(repeating: DBusValue.int32(1), count: 255))
        XCTAssertEqual(m.signature.count, 255)
        XCTAssertThrowsError(try m.append(.byte(1)))
        XCTAssertThrowsError(try message().append(.structure(Array(repeating: .int32(0), count: 254))))
    }

    func testInvalidHeaderFieldsThrow() {
        XCTAssertThrowsError(try BusMessage.methodCall(destination: "no-dots", path: "/a", interface: nil, member: "M"))
        XCTAssertThrowsError(try BusMessage.methodCall(destination: nil, path: "a", interface: nil, member: "M"))
        XCTAssertThrowsError(try BusMessage.methodCall(destination: nil, path: "/a", interface: "nodots", member: "M"))
        XCTAssertThrowsError(try BusMessage.methodCall(destination: nil, path: "/a", interface: nil, member: "Has.Dot"))
        XCTAssertThrowsError(try BusMessage.methodCall(destination: nil, path: "/a", interface: nil, member: ""))
        XCTAssertThrowsError(try BusMessage.signal(path: "/a/", interface: "a.b", member: "S"))
        XCTAssertThrowsError(try BusMessage.signal(path: "/a", interface: "a..b", member: "S"))
        XCTAssertThrowsError(try BusMessage.signal(path: "/a", interface: "a.b", member: "1S"))
        XCTAssertNoThrow(try BusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "M"))
        XCTAssertNoThrow(try BusMessage.methodCall(destination: ":1.42", path: "/", interface: "a.b", member: "M"))
    }

    func testMessageHeader() throws {
        let m = try message()
        XCTAssertEqual(m.type, .methodCall)
        XCTAssertEqual(m.path, "/org/ferry/Test")
        XCTAssertEqual(m.interface, "org.ferry.Test.Sample1")
        XCTAssertEqual(m.member, "Call")
        XCTAssertEqual(m.destination, "org.ferry.Test")
        XCTAssertTrue(m.autoStart)
        m.autoStart = false
        XCTAssertFalse(m.autoStart)
        let s = try BusMessage.signal(path: "/a", interface: "a.b", member: "S")
        XCTAssertEqual(s.type, .signal)
        XCTAssertNil(s.destination)
    }

    /// Replies need the call's serial, which a message built here does not have
    /// yet; libdbus would abort.
    func testReplyingToAnUnsentMessageThrows() throws {
        let call = try message()
        XCTAssertEqual(call.serial, 0)
        XCTAssertThrowsError(try call.makeReturn())
        XCTAssertThrowsError(try call.makeError(name: "org.ferry.Test.Error.Custom", message: "it broke"))
    }

    func testValueAccessors() {
        XCTAssertEqual(DBusValue.variant(.variant(.int32(3))).int32, 3)
        XCTAssertEqual(DBusValue.objectPath("/p").string, "/p")
        XCTAssertNil(DBusValue.int32(1).string)
        XCTAssertEqual(DBusValue.array(element: "y", [.byte(1)]).bytes, [1])
        XCTAssertEqual(DBusValue.bytes([1, 2]).arrayElements, [.byte(1), .byte(2)])
        XCTAssertEqual(DBusValue.structure([.int32(1)]).structFields, [.int32(1)])
        XCTAssertNil(DBusValue.stringDict(["a": "b"]).vardict)
        XCTAssertEqual(DBusValue.vardict(["b": .int32(1), "a": .int32(2)]),
                       .dictionary(key: "s", value: "v", [.init(.string("a"), .variant(.int32(2))), .init(.string("b"), .variant(.int32(1)))]))
    }
}
