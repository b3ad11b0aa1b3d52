@testable import DBus
import FerryTestSupport
import XCTest

/// The two short cuts a listing of 10,000 objects takes, checked against the plain way
/// on random objects: properties written from prepared entry heads give the bytes of
/// the values written one by one, and a `GetManagedObjects` reply read as a stream
/// gives what the tree of values holds.
final class ManagedObjectsWireTests: XCTestCase {
    private typealias Values = WireFormatTests
    private static let interfaceNames = ["org.ferry.Test.A", "org.ferry.Test.B", "org.freedesktop.DBus.Peer", "org.ferry.Test.Long\(String(repeating: "x", count: 60))"]
    private static let propertyNames = ["S", "Alpha", "BytesTransferred", "Z9", "WithAVeryLongNameIndeed"]

    /// An object with random interfaces and properties of random types; some slots
    /// empty, and some holding a value of another type than the spec says.
    private func randomObject(_ path: String, _ g: inout SeededRandom) -> ExportedObject {
        var specs: [InterfaceSpec] = []
        var initial: [String: [String: DBusValue]] = [:]
        for name in Self.interfaceNames.shuffled(using: &g).prefix(Int.random(in: 0...3, using: &g)) {
            var properties: [PropertySpec] = []
            var given: [String: DBusValue] = [:]
            for property in Self.propertyNames.shuffled(using: &g).prefix(Int.random(in: 0...5, using: &g)) {
                let type = Values.randomType(&g, depth: 1)
                properties.append(PropertySpec(property, type.signature))
                switch Int.random(in: 0..<10, using: &g) {
                case 0: break // never set
                case 1: given[property] = Values.randomValue(Values.randomType(&g, depth: 1), &g, depth: 1) // another type
                default: given[property] = Values.randomValue(type, &g, depth: 1)
                }
            }
            specs.append(InterfaceSpec(name: name, properties: properties))
            initial[name] = given
        }
        return ExportedObject(path: path, interfaces: specs, initialValues: initial)
    }

    func testPreparedEntriesWriteWhatTheValuesWrite() throws {
        let seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xffff_ffff
        var g = SeededRandom(state: seed)
        for round in 0..<300 {
            let object = randomObject("/org/ferry/Test/\(round)", &g)
            // A byte first, so the entries start at every offset a real reply can give them.
            var fast = WireWriter(storing: true)
            var plain = WireWriter(storing: true)
            let lead = DBusValue.byte(UInt8(round % 256))
            try fast.value(lead)
            try plain.value(lead)
            try fast.writeInterfacesAndProperties(from: object)
            try plain.value(object.interfacesAndProperties())
            XCTAssertEqual(fast.bytes, plain.bytes, "seed \(seed), round \(round)")
            if fast.bytes != plain.bytes { return }
        }
    }

    func testStreamedReplyHoldsWhatTheTreeHolds() throws {
        let seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xffff_ffff
        var g = SeededRandom(state: seed)
        let wanted = [Self.interfaceNames[1], Self.interfaceNames[3], "org.ferry.Test.Absent"]
        for round in 0..<100 {
            let objects = (0..<Int.random(in: 0...6, using: &g)).map { randomObject("/org/ferry/Test/\(round)/\($0)", &g) }
            let reply = try BusMessage.methodCall(destination: "org.ferry.Test", path: "/org/ferry/Test", interface: "org.ferry.Test.Sample1",
                                                  member: "Call")
            try reply.append([.dictionary(key: "o", value: "a{sa{sv}}", objects.map { .init(.objectPath($0.path), $0.interfacesAndProperties()) })])

            var paths: [String] = []
            var streamed: [String] = []
            try reply.forEachManagedProperty(interfaces: wanted, object: { paths.append($0) }, property: { interface, name, value in
                streamed.append("\(paths.last ?? "?") \(wanted[interface]) \(name) \(value)")
            })

            var expected: [String] = []
            for o in objects {
                for spec in o.interfaces where wanted.contains(spec.name) {
                    guard case .dictionary(_, _, let entries) = o.allProperties(spec) else { continue }
                    for e in entries {
                        guard case .variant(let v) = e.value else { continue }
                        expected.append("\(o.path) \(spec.name) \(e.key.string ?? "?") \(v)")
                    }
                }
            }
            XCTAssertEqual(paths, objects.map(\.path), "seed \(seed), round \(round)")
            XCTAssertEqual(streamed, expected, "seed \(seed), round \(round)")
            if streamed != expected { return }
        }
    }

    func testAReplyOfAnotherShapeIsRefused() throws {
        let reply = try BusMessage.methodCall(destination: "org.ferry.Test", path: "/org/ferry/Test", interface: "org.ferry.Test.Sample1",
                                              member: "Call")
        try reply.append([.dictionary(key: "o", value: "a{sv}", [])])
        XCTAssertThrowsError(try reply.forEachManagedProperty(interfaces: ["x.y"], object: { _ in }, property: { _, _, _ in })) {
            XCTAssertEqual(($0 as? BusError)?.name, StandardErrors.invalidArgs)
        }
    }
}

private extension WireWriter {
    /// `a{sa{sv}}` as GetManagedObjects writes it for one object.
    mutating func writeInterfacesAndProperties(from object: ExportedObject) throws {
        try object.writeInterfacesAndProperties(into: &self)
    }
}
