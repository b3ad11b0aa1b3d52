@testable import DBus
import XCTest

/// `ListTransferProperties`' columns: each property's values in the objects' order,
/// whatever order an object's interface declares its properties in.
final class PropertyColumnsTests: XCTestCase {
    let spec = InterfaceSpec(name: "org.ferry.Test.Item", properties: [PropertySpec("Name", "s"), PropertySpec("Size", "t"), PropertySpec("Pair", "(ss)")])

    func testColumnsFollowTheObjectsWhateverTheirLayout() throws {
        let a = ExportedObject(path: "/t/1", interfaces: [spec], initialValues: [spec.name: [
            "Name": .string("a"), "Size": .uint64(1), "Pair": .structure([.string("x"), .string("y")])]])
        // The same interface declared in another order, with one more property and
        // another interface before it.
        let other = InterfaceSpec(name: spec.name, properties: [PropertySpec("Extra", "b"), PropertySpec("Pair", "(ss)"),
                                                                PropertySpec("Size", "t"), PropertySpec("Name", "s")])
        let b = ExportedObject(path: "/t/2", interfaces: [InterfaceSpec(name: "org.ferry.Test.Other", properties: [PropertySpec("Name", "u")]), other],
                               initialValues: ["org.ferry.Test.Other": ["Name": .uint32(7)],
                                               spec.name: ["Extra": .boolean(true), "Pair": .structure([.string("p"), .string("q")]),
                                                           "Size": .uint64(2), "Name": .string("b")]])
        let c = ExportedObject(path: "/t/3", interfaces: [spec], initialValues: [spec.name: [
            "Name": .string("c"), "Size": .uint64(3), "Pair": .structure([.string("m"), .string("n")])]])

        let all = try MethodInvocation.columns(of: [c, a, b], interface: spec, properties: spec.properties)
        XCTAssertEqual(all[0], [.string("c"), .string("a"), .string("b")])
        XCTAssertEqual(all[1], [.uint64(3), .uint64(1), .uint64(2)])
        XCTAssertEqual(all[2].map { $0.structFields?.first?.string }, ["m", "x", "p"])

        let some = try MethodInvocation.columns(of: [b, a], interface: spec, properties: [spec.properties[1]])
        XCTAssertEqual(some, [[.uint64(2), .uint64(1)]])
    }

    /// The arrays must line up: an object without a value of the declared type fails
    /// the listing rather than shift every later value.
    func testAMissingOrMistypedValueFailsTheListing() {
        let missing = ExportedObject(path: "/t/4", interfaces: [spec], initialValues: [spec.name: ["Name": .string("d"), "Size": .uint64(4)]])
        XCTAssertThrowsError(try MethodInvocation.columns(of: [missing], interface: spec, properties: spec.properties)) { error in
            XCTAssertTrue("\(error)".contains("/t/4"), "\(error)")
        }
        let mistyped = ExportedObject(path: "/t/5", interfaces: [spec], initialValues: [spec.name: [
            "Name": .uint32(5), "Size": .uint64(5), "Pair": .structure([.string("a"), .string("b")])]])
        XCTAssertThrowsError(try MethodInvocation.columns(of: [mistyped], interface: spec, properties: [spec.properties[0]]))
        XCTAssertEqual(try MethodInvocation.columns(of: [mistyped], interface: spec, properties: [spec.properties[1]]), [[.uint64(5)]])
    }
}
