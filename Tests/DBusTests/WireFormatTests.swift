@testable import DBus
import FerryTestSupport
import XCTest

/// WireWriter and WireReader against libdbus on random values: for each, the bytes
/// WireWriter lays out are the body libdbus writes, and WireReader reads back what
/// libdbus's iterators read (and what went in).
final class WireFormatTests: XCTestCase {
    indirect enum RandomType {
        case basic(Character), bytes, variant
        case array(RandomType), dictionary(Character, RandomType), structure([RandomType])

        var signature: String {
            switch self {
            case .basic(let c): return String(c)
            case .bytes: return "ay"
            case .variant: return "v"
            case .array(let e): return "a" + e.signature
            case .dictionary(let k, let v): return "a{" + String(k) + v.signature + "}"
            case .structure(let fields): return "(" + fields.map(\.signature).joined() + ")"
            }
        }
    }

    static let basics: [Character] = ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g"]

    static func randomType(_ g: inout SeededRandom, depth: Int) -> RandomType {
        let pick = depth >= 3 ? Int.random(in: 0..<4, using: &g) : Int.random(in: 0..<8, using: &g)
        switch pick {
        case 0, 1: return .basic(Self.basics.randomElement(using: &g)!)
        case 2: return .bytes
        case 3: return .variant
        case 4:
            // An array of bytes is `ay`, read back as `.bytes`: made with `.bytes` only.
            var e = randomType(&g, depth: depth + 1)
            if case .basic("y") = e { e = .basic("s") }
            return .array(e)
        case 5: return .dictionary(Self.basics.randomElement(using: &g)!, randomType(&g, depth: depth + 1))
        default: return .structure((0..<Int.random(in: 1...3, using: &g)).map { _ in randomType(&g, depth: depth + 1) })
        }
    }

    static func randomValue(_ t: RandomType, _ g: inout SeededRandom, depth: Int) -> DBusValue {
        switch t {
        case .basic(let c): return randomBasic(c, &g)
        case .bytes: return .bytes((0..<Int.random(in: 0...9, using: &g)).map { _ in UInt8.random(in: 0...255, using: &g) })
        case .variant:
            let inner = randomType(&g, depth: depth + 1)
            return .variant(randomValue(inner, &g, depth: depth + 1))
        case .array(let e):
            return .array(element: e.signature, (0..<Int.random(in: 0...3, using: &g)).map { _ in randomValue(e, &g, depth: depth + 1) })
        case .dictionary(let k, let v):
            let entries = (0..<Int.random(in: 0...3, using: &g)).map { _ in
                DBusValue.DictEntry(randomBasic(k, &g), randomValue(v, &g, depth: depth + 1))
            }
            return .dictionary(key: String(k), value: v.signature, entries)
        case .structure(let fields):
            return .structure(fields.map { randomValue($0, &g, depth: depth + 1) })
        }
    }

    static func randomBasic(_ c: Character, _ g: inout SeededRandom) -> DBusValue {
        switch c {
        case "y": return .byte(.random(in: 0...255, using: &g))
        case "b": return .boolean(.random(using: &g))
        case "n": return .int16(.random(in: .min ... .max, using: &g))
        case "q": return .uint16(.random(in: .min ... .max, using: &g))
        case "i": return .int32(.random(in: .min ... .max, using: &g))
        case "u": return .uint32(.random(in: .min ... .max, using: &g))
        case "x": return .int64(.random(in: .min ... .max, using: &g))
        case "t": return .uint64(.random(in: .min ... .max, using: &g))
        case "d": return .double(Double(Int64.random(in: .min ... .max, using: &g)) / 7)
        case "s": return .string(["", "a", "héllo", "✓ done", "🚀", "x/y z", String(repeating: "w", count: 40)].randomElement(using: &g)!)
        case "o": return .objectPath(["/", "/org/ferry/Ferry1/transfer/7", "/a_b/C9"].randomElement(using: &g)!)
        default: return .signature(["", "s", "a{sv}", "(iay)v"].randomElement(using: &g)!)
        }
    }

    func testRandomValuesMatchLibdbus() throws {
        let seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xffff_ffff
        print("WireFormatTests seed: \(seed)")
        var g = SeededRandom(state: seed)
        for round in 0..<400 {
            let values = (0..<Int.random(in: 1...3, using: &g)).map { _ in Self.randomValue(Self.randomType(&g, depth: 0), &g, depth: 0) }
            let what = "seed \(seed), round \(round): \(values.map(\.signature))"
            let m = try BusMessage.methodCall(destination: "org.ferry.Test", path: "/org/ferry/Test", interface: "org.ferry.Test.Sample1",
                                              member: "Call")
            try m.append(values)
            var writer = WireWriter(storing: true)
            try writer.append(values)
            let libdbusBody = try m.withMarshalledBytes { whole in
                let (start, length) = try WireReader.bodyRange(ofMessage: whole)
                return Array(whole[start..<(start + length)])
            }
            XCTAssertEqual(writer.bytes, libdbusBody, what)
            XCTAssertEqual(try m.argumentsFromBytes(), values, what)
            XCTAssertEqual(try m.argumentsFromIterators(), values, what)
            if writer.bytes != libdbusBody { return }
        }
    }
}
