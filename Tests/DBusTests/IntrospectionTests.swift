import DBus
import Dispatch
import FerryTestSupport
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import XCTest

/// Introspectable and ObjectManager.
final class IntrospectionTests: BusTestCase {
    private func introspect(_ path: String) async throws -> String {
        let r = try await callSample("Introspect", path: path, interface: StandardNames.introspectable)
        let xml = try XCTUnwrap(r.first?.string)
        XCTAssertTrue(XMLParser(data: Data(xml.utf8)).parse(), "not well-formed:\n\(xml)")
        return xml
    }

    /// The `name` attributes of `<element>`s in `xml`, in order.
    private func names(of element: String, in xml: String) -> [String] {
        final class Collector: NSObject, XMLParserDelegate {
            let element: String
            var depth = 0
            var found: [String] = []
            init(_ element: String) { self.element = element }
            func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                        attributes: [String: String] = [:]) {
                depth += 1
                // Child nodes are at depth 2 (inside the root <node>).
                if name == element, element != "node" || depth == 2, let n = attributes["name"] { found.append(n) }
            }
            func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
                depth -= 1
            }
        }
        let collector = Collector(element)
        let parser = XMLParser(data: Data(xml.utf8))
        parser.delegate = collector
        XCTAssertTrue(parser.parse())
        return collector.found
    }

    func testIntrospectObject() async throws {
        try await startSample()
        let xml = try await introspect(Sample.objectPath)
        XCTAssertTrue(xml.hasPrefix("<!DOCTYPE node PUBLIC"), xml)
        XCTAssertEqual(names(of: "interface", in: xml), [StandardNames.introspectable, StandardNames.peer, StandardNames.properties,
                                                         Sample.interfaceName])
        XCTAssertEqual(names(of: "method", in: xml), ["Introspect", "Ping", "GetMachineId", "Get", "GetAll", "Set",
                                                      "Add", "Echo", "Concat", "Describe", "Fail", "Later", "Never", "Nothing"])
        XCTAssertEqual(names(of: "property", in: xml), ["Volume", "Title", "Counter", "Tag"])
        XCTAssertEqual(names(of: "signal", in: xml), ["PropertiesChanged", "Pinged"])
        XCTAssertEqual(names(of: "node", in: xml), [])
        XCTAssertTrue(xml.contains("""
                <method name="Add">
                  <arg name="a" type="i" direction="in"/>
                  <arg name="b" type="i" direction="in"/>
                  <arg name="sum" type="i" direction="out"/>
                </method>
            """), xml)
        XCTAssertTrue(xml.contains(#"<property name="Volume" type="u" access="readwrite"/>"#), xml)
        XCTAssertTrue(xml.contains(#"<property name="Title" type="s" access="read"/>"#), xml)
        XCTAssertTrue(xml.contains("""
                <property name="Counter" type="t" access="read">
                  <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
                </property>
            """), xml)
        XCTAssertTrue(xml.contains("""
                <signal name="Pinged">
                  <arg name="text" type="s"/>
                </signal>
            """), xml)
    }

    func testIntrospectTreeAndManager() async throws {
        try await startSample()
        let root = try await introspect("/")
        XCTAssertEqual(names(of: "node", in: root), ["org"])
        XCTAssertEqual(names(of: "interface", in: root), [StandardNames.introspectable, StandardNames.peer])
        let org = try await introspect("/org")
        XCTAssertEqual(names(of: "node", in: org), ["ferry"])
        let ferry = try await introspect("/org/ferry")
        XCTAssertEqual(names(of: "node", in: ferry), ["Test"])
        let manager = try await introspect(Sample.rootPath)
        XCTAssertEqual(names(of: "node", in: manager), ["objects"])
        XCTAssertEqual(names(of: "interface", in: manager), [StandardNames.introspectable, StandardNames.peer, StandardNames.properties,
                                                             StandardNames.objectManager, Sample.managerInterface])
        let objects = try await introspect("/org/ferry/Test/objects")
        XCTAssertEqual(names(of: "node", in: objects), ["1", "2"])
        // Numeric children sort as numbers.
        for n in [10, 3] {
            server.export(Sample.makeObject(path: "/org/ferry/Test/objects/\(n)", title: "\(n)", neverAnswered: Mailbox()))
        }
        let more = try await introspect("/org/ferry/Test/objects")
        XCTAssertEqual(names(of: "node", in: more), ["1", "2", "3", "10"])
        // Nothing there.
        await assertBusError(StandardErrors.unknownObject) { _ = try await self.introspect("/org/ferry/Nothing") }
        await assertBusError(StandardErrors.unknownObject) { _ = try await self.introspect("/org/ferry/Test/objects/1/x") }
    }

    func testGetManagedObjects() async throws {
        try await startSample()
        let r = try await callSample("GetManagedObjects", path: Sample.rootPath, interface: StandardNames.objectManager)
        XCTAssertEqual(r.first?.signature, "a{oa{sa{sv}}}")
        let entries = try XCTUnwrap(r.first?.dictionaryEntries)
        XCTAssertEqual(entries.map(\.0), [Sample.objectPath, Sample.secondPath])
        let interfaces = try XCTUnwrap(entries.first?.1.dictionaryEntries)
        XCTAssertEqual(interfaces.map(\.0), [Sample.interfaceName])
        XCTAssertEqual(interfaces.first?.1.vardict, ["Volume": .uint32(50), "Title": .string("first"), "Counter": .uint64(0),
                                                     "Tag": .string("none")])
        // Only at the manager's path.
        await assertBusError(StandardErrors.unknownInterface) {
            try await self.callSample("GetManagedObjects", path: Sample.objectPath, interface: StandardNames.objectManager)
        }
        await assertBusError(StandardErrors.unknownMethod) {
            try await self.callSample("GetUnmanagedObjects", path: Sample.rootPath, interface: StandardNames.objectManager)
        }
    }

    func testInterfacesAddedAndRemoved() async throws {
        try await startSample()
        let added = try await collect(MatchRule(path: Sample.rootPath, interface: StandardNames.objectManager,
                                                member: "InterfacesAdded"))
        let removed = try await collect(MatchRule(path: Sample.rootPath, interface: StandardNames.objectManager,
                                                  member: "InterfacesRemoved"))
        let path = "/org/ferry/Test/objects/3"
        server.export(Sample.makeObject(path: path, title: "third", neverAnswered: Mailbox()))
        let a = try await added.next(timeout: 5, "InterfacesAdded")
        XCTAssertEqual(a.signature, "oa{sa{sv}}")
        let args = try a.arguments()
        XCTAssertEqual(args.first, .objectPath(path))
        XCTAssertEqual(args[1].dictionaryEntries?.map(\.0), [Sample.interfaceName])
        XCTAssertEqual(args[1].dictionaryEntries?.first?.1.vardict?["Title"], .string("third"))
        let managed = try await callSample("GetManagedObjects", path: Sample.rootPath, interface: StandardNames.objectManager)
        XCTAssertEqual(managed.first?.dictionaryEntries?.map(\.0), [Sample.objectPath, Sample.secondPath, path])

        server.unexport(path)
        let r = try await removed.next(timeout: 5, "InterfacesRemoved")
        XCTAssertEqual(try r.arguments(), [.objectPath(path), .stringArray([Sample.interfaceName])])
        await assertBusError(StandardErrors.unknownObject) { try await self.callSample("Add", [.int32(1), .int32(1)], path: path) }
        // Outside the manager's tree: no signals. The next ones are for the object below it.
        server.export(ExportedObject(path: "/elsewhere/x", interfaces: [Sample.managerSpec]))
        server.unexport("/elsewhere/x")
        server.unexport("/org/ferry/Test/objects/404")
        server.unexport(Sample.secondPath)
        let r2 = try await removed.next(timeout: 5, "InterfacesRemoved for the second object")
        XCTAssertEqual(try r2.arguments().first, .objectPath(Sample.secondPath))
        XCTAssertEqual(added.queued.count, 0)
        XCTAssertEqual(removed.queued.count, 0)
    }
}
