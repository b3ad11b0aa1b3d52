import DBus
import FerryBusClient
import FerryInterface
import FerryTestSupport
import Foundation
import XCTest
#if canImport(FoundationXML)
import FoundationXML
#endif

/// An interface as introspection XML describes it, for structural comparison.
struct InterfaceShape: Equatable, CustomStringConvertible {
    struct Arg: Equatable { var name: String; var type: String; var direction: String }
    struct Property: Equatable { var type: String; var access: String; var annotations: [String: String] }
    var methods: [String: [Arg]] = [:]
    var signals: [String: [Arg]] = [:]
    var properties: [String: Property] = [:]

    var description: String {
        var lines: [String] = []
        for (n, a) in methods.sorted(by: { $0.key < $1.key }) {
            lines.append("method \(n)(\(a.map { "\($0.direction) \($0.type) \($0.name)" }.joined(separator: ", ")))")
        }
        for (n, a) in signals.sorted(by: { $0.key < $1.key }) {
            lines.append("signal \(n)(\(a.map { "\($0.type) \($0.name)" }.joined(separator: ", ")))")
        }
        for (n, p) in properties.sorted(by: { $0.key < $1.key }) {
            lines.append("property \(n) \(p.type) \(p.access) \(p.annotations)")
        }
        return lines.joined(separator: "\n")
    }
}

/// Parses `<node>` introspection XML into interface name -> shape.
final class IntrospectionParser: NSObject, XMLParserDelegate {
    private(set) var interfaces: [String: InterfaceShape] = [:]
    private(set) var childNodes: [String] = []
    private var depth = 0
    private var interface: String?
    private var member: (kind: String, name: String)?
    private var property: String?

    static func parse(_ xml: String) throws -> IntrospectionParser {
        let p = IntrospectionParser()
        let parser = XMLParser(data: Data(xml.utf8))
        parser.delegate = p
        guard parser.parse() else {
            throw TimedOut(description: "introspection XML does not parse: \(parser.parserError.map { "\($0)" } ?? "?")\n\(xml)")
        }
        return p
    }

    func parser(_ parser: XMLParser, didStartElement element: String, namespaceURI: String?, qualifiedName: String?,
                attributes a: [String: String] = [:]) {
        depth += 1
        switch element {
        case "node" where depth == 2:
            if let n = a["name"] { childNodes.append(n) }
        case "interface":
            interface = a["name"]
            if let i = interface, interfaces[i] == nil { interfaces[i] = InterfaceShape() }
        case "method", "signal":
            guard let i = interface, let n = a["name"] else { return }
            member = (element, n)
            if element == "method" { interfaces[i]!.methods[n] = [] } else { interfaces[i]!.signals[n] = [] }
        case "arg":
            guard let i = interface, let m = member else { return }
            // Method args default to "in", signal args are always "out".
            let arg = InterfaceShape.Arg(name: a["name"] ?? "", type: a["type"] ?? "",
                                         direction: m.kind == "signal" ? "out" : (a["direction"] ?? "in"))
            if m.kind == "method" { interfaces[i]!.methods[m.name]!.append(arg) } else { interfaces[i]!.signals[m.name]!.append(arg) }
        case "property":
            guard let i = interface, let n = a["name"] else { return }
            property = n
            interfaces[i]!.properties[n] = .init(type: a["type"] ?? "", access: a["access"] ?? "", annotations: [:])
        case "annotation":
            if let i = interface, let p = property, let n = a["name"] {
                interfaces[i]!.properties[p]!.annotations[n] = a["value"] ?? ""
            }
        default:
            break
        }
    }

    func parser(_ parser: XMLParser, didEndElement element: String, namespaceURI: String?, qualifiedName: String?) {
        depth -= 1
        switch element {
        case "interface": interface = nil
        case "method", "signal": member = nil
        case "property": property = nil
        default: break
        }
    }
}

final class IntrospectionTests: FerryTestCase {
    static var contractXMLPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("dbus/org.ferry.Ferry1.xml").path
    }

    /// The interfaces of the contract XML (dbus/), by name.
    static func contractInterfaces() throws -> [String: InterfaceShape] {
        try IntrospectionParser.parse(try String(contentsOfFile: contractXMLPath, encoding: .utf8)).interfaces
    }

    /// A session, a paused download in it and a group (of one paused download): one
    /// object of each kind ferryd exports besides the manager.
    func oneOfEachObject() async throws -> (session: BusSession, transfer: FerryTransfer, group: String) {
        serve("/a.bin", size: 10)
        let s = try await session()
        let t = try await s.download(server.url("/a.bin"), options: ["start": .boolean(false), "destination": .string(work + "/a.bin")])
        let group = try await s.downloadGroup([(server.url("/a.bin"), ["start": .boolean(false), "destination": .string(work + "/g.bin")])],
                                              options: ["description": .string("one")])
        return (s, t, group.path)
    }

    func introspect(_ path: String) async throws -> IntrospectionParser {
        let r = try await call(path, StandardNames.introspectable, "Introspect")
        return try IntrospectionParser.parse(r.first?.string ?? "")
    }

    /// The running daemon describes each of its three interfaces exactly as the
    /// contract XML does, on the objects that carry them, with the standard ones.
    func testIntrospectionMatchesContractXML() async throws {
        let contract = try Self.contractInterfaces()
        XCTAssertEqual(Set(contract.keys), [BusClient.managerInterface, BusClient.sessionInterface, BusClient.transferInterface,
                                            FerryInterface.groupInterface])

        let (s, t, group) = try await oneOfEachObject()

        let std = [StandardNames.introspectable, StandardNames.properties, StandardNames.peer]
        for (path, iface, extra) in [(BusClient.managerPath, BusClient.managerInterface, [StandardNames.objectManager]),
                                     (s.path, BusClient.sessionInterface, []),
                                     (t.path, BusClient.transferInterface, []),
                                     (group, FerryInterface.groupInterface, [])] {
            let live = try await introspect(path).interfaces
            XCTAssertEqual(Set(live.keys), Set(std + extra + [iface]), "interfaces of \(path)")
            guard let got = live[iface], let want = contract[iface] else {
                XCTFail("\(path) lacks \(iface)")
                continue
            }
            XCTAssertEqual(got.methods.keys.sorted(), want.methods.keys.sorted(), "\(iface) methods")
            XCTAssertEqual(got.signals.keys.sorted(), want.signals.keys.sorted(), "\(iface) signals")
            XCTAssertEqual(got.properties.keys.sorted(), want.properties.keys.sorted(), "\(iface) properties")
            for (name, args) in want.methods { XCTAssertEqual(got.methods[name], args, "\(iface).\(name) args") }
            for (name, args) in want.signals { XCTAssertEqual(got.signals[name], args, "\(iface).\(name) args") }
            for (name, p) in want.properties { XCTAssertEqual(got.properties[name], p, "\(iface).\(name)") }
            XCTAssertEqual(got, want, "\(iface) as served:\n\(got)\n--- in the contract XML:\n\(want)")
        }

        // The manager's node leads to its children, so `busctl tree` and d-feet can walk it.
        let root = try await introspect(BusClient.managerPath)
        XCTAssertTrue(root.childNodes.contains("session") && root.childNodes.contains("transfer"), "child nodes: \(root.childNodes)")
        // Peer works on every object.
        for path in [BusClient.managerPath, s.path, t.path] {
            try await call(path, StandardNames.peer, "Ping")
        }
    }

    /// The properties declared once in `FerryInterface` (the service builds its
    /// interfaces from them, the clients read by them) are the contract XML's: names,
    /// types, access, change signals.
    func testDeclaredPropertiesAreTheContractsProperties() throws {
        let contract = try Self.contractInterfaces()
        for (iface, declared) in [(BusClient.managerInterface, FerryInterface.ManagerProperty.all),
                                  (BusClient.sessionInterface, FerryInterface.SessionProperty.all),
                                  (BusClient.transferInterface, FerryInterface.TransferProperty.all),
                                  (FerryInterface.groupInterface, FerryInterface.GroupProperty.all)] {
            let want = contract[iface]?.properties ?? [:]
            XCTAssertEqual(Set(declared.map(\.name)), Set(want.keys), "\(iface): declared vs contract")
            XCTAssertEqual(declared.count, want.count, "\(iface): each declared once")
            for p in declared {
                guard let c = want[p.name] else { continue }
                XCTAssertEqual(p.signature, c.type, "\(iface).\(p.name) type")
                XCTAssertEqual(p.writable ? "readwrite" : "read", c.access, "\(iface).\(p.name) access")
                XCTAssertEqual(p.constant ? "const" : p.emitsChange ? nil : "false",
                               c.annotations["org.freedesktop.DBus.Property.EmitsChangedSignal"],
                               "\(iface).\(p.name) change signal")
            }
        }
    }

    /// The methods and signals declared once in `FerryInterface` (the service exports and
    /// dispatches its methods from them, the clients call and match by them) are the
    /// contract XML's: names, argument names, types and directions, in order.
    func testDeclaredMethodsAndSignalsAreTheContracts() throws {
        let contract = try Self.contractInterfaces()
        XCTAssertEqual(Set(FerryInterface.methods.keys), Set(contract.keys))
        XCTAssertEqual(Set(FerryInterface.signals.keys), Set(contract.keys))
        func shape(_ arguments: [BusArgument], _ direction: String) -> [InterfaceShape.Arg] {
            arguments.map { .init(name: $0.name, type: $0.signature, direction: direction) }
        }
        for (iface, want) in contract {
            let methods = FerryInterface.methods[iface] ?? [], signals = FerryInterface.signals[iface] ?? []
            XCTAssertEqual(Set(methods.map(\.interface) + signals.map(\.interface)), [iface], "\(iface): its own members")
            XCTAssertEqual(Set(methods.map(\.name)).count, methods.count, "\(iface): each method declared once")
            XCTAssertEqual(Set(signals.map(\.name)).count, signals.count, "\(iface): each signal declared once")
            let declared = Dictionary(methods.map { ($0.name, shape($0.inputs, "in") + shape($0.outputs, "out")) }) { a, _ in a }
            XCTAssertEqual(declared, want.methods, "\(iface) methods: declared vs contract")
            let declaredSignals = Dictionary(signals.map { ($0.name, shape($0.arguments, "out")) }) { a, _ in a }
            XCTAssertEqual(declaredSignals, want.signals, "\(iface) signals: declared vs contract")
        }
    }

    /// What the daemon serves: `GetAll` of the manager, a session and a transfer holds
    /// each declared property, with its declared type, and nothing else.
    func testServedPropertiesAreTheDeclaredOnes() async throws {
        let (s, t, group) = try await oneOfEachObject()
        for (path, iface, declared) in [(BusClient.managerPath, BusClient.managerInterface, FerryInterface.ManagerProperty.all),
                                        (s.path, BusClient.sessionInterface, FerryInterface.SessionProperty.all),
                                        (t.path, BusClient.transferInterface, FerryInterface.TransferProperty.all),
                                        (group, FerryInterface.groupInterface, FerryInterface.GroupProperty.all)] {
            let served = try await call(path, StandardNames.properties, "GetAll", [.string(iface)]).first?.vardict ?? [:]
            XCTAssertEqual(Set(served.keys), Set(declared.map(\.name)), iface)
            for p in declared {
                XCTAssertEqual(served[p.name]?.signature, p.signature, "\(iface).\(p.name)")
            }
        }
    }

    /// Every declared transfer property lands in its own field of `TransferInfo`, from
    /// `GetAll` entries, from a dictionary and from a `PropertiesChanged`.
    func testTransferInfoReadsEveryDeclaredProperty() {
        typealias T = FerryInterface.TransferProperty
        let values: [String: DBusValue] = [
            T.kind.name: .string("upload"), T.url.name: .string("http://h/u"), T.session.name: .objectPath("/s/1"),
            T.description.name: .string("d"), T.destination.name: .string("/f"), T.state.name: .string("running"),
            T.waitingReason.name: .string("retry"), T.bytesTransferred.name: .int64(11), T.bytesExpected.name: .int64(12),
            T.rate.name: .uint64(13), T.expectedEnd.name: .uint64(14), T.error.name: .structure([.string("E"), .string("m")]),
            T.httpStatus.name: .uint32(206), T.attempts.name: .uint32(3), T.resumable.name: .boolean(true),
            T.sha256.name: .string("ab"), T.response.name: .bytes([1]), T.created.name: .uint64(15), T.started.name: .uint64(16),
            T.completed.name: .uint64(17), T.priority.name: .int32(-1), T.speedLimit.name: .uint64(18),
            T.nextAttempt.name: .uint64(19), T.singleConnectionReason.name: .string("no ranges"),
            T.group.name: .objectPath("/g/1"), T.connectionLimitReason.name: .string("6 of 8"),
            T.mirrors.name: .stringArray(["http://m/1", "http://m/2"]),
            T.pieces.name: .structure([.uint64(65536), .uint32(7)]),
        ]
        XCTAssertEqual(Set(values.keys), Set(T.all.map(\.name)), "the sample covers every declared property")
        var expected = TransferInfo(id: 1, path: "/t/1")
        expected.kind = "upload"; expected.url = "http://h/u"; expected.session = "/s/1"; expected.description = "d"
        expected.destination = "/f"; expected.state = "running"; expected.waitingReason = "retry"
        expected.bytesTransferred = 11; expected.bytesExpected = 12; expected.rate = 13; expected.expectedEnd = 14
        expected.errorName = "E"; expected.errorMessage = "m"; expected.httpStatus = 206; expected.attempts = 3
        expected.resumable = true; expected.sha256 = "ab"; expected.created = 15; expected.started = 16
        expected.completed = 17; expected.priority = -1; expected.speedLimit = 18; expected.response = [1]
        expected.nextAttempt = 19; expected.singleConnectionReason = "no ranges"; expected.group = "/g/1"
        expected.connectionLimitReason = "6 of 8"
        expected.mirrors = ["http://m/1", "http://m/2"]; expected.pieceLength = 65536; expected.pieceCount = 7
        XCTAssertEqual(TransferInfo(id: 1, path: "/t/1", properties: values), expected)
        XCTAssertEqual(TransferInfo(id: 1, path: "/t/1", entries: values.map { .init(.string($0.key), $0.value) }), expected)
        var changed = TransferInfo(id: 1, path: "/t/1")
        changed.apply(values)
        XCTAssertEqual(changed, expected)
        // A value of another type gives the field's default, as a missing one does.
        var wrong = expected
        wrong.apply([T.bytesExpected.name: .string("x"), T.state.name: .uint32(1)])
        XCTAssertEqual(wrong.bytesExpected, -1)
        XCTAssertEqual(wrong.state, "")
        // Missing values keep their defaults; unknown names are ignored.
        let bare = TransferInfo(id: 1, path: "/t/1", properties: ["Nonsense": .string("x")])
        XCTAssertEqual(bare.bytesExpected, -1)
        XCTAssertEqual(bare.state, "")
    }

    /// ObjectManager.GetManagedObjects lists every session and transfer with their properties.
    func testObjectManagerListsSessionsAndTransfers() async throws {
        serve("/a.bin", size: 10)
        let s1 = try await session("com.example.One")
        let s2 = try await session("com.example.Two")
        let t = try await s2.download(server.url("/a.bin"), options: ["start": .boolean(false), "destination": .string(work + "/a.bin")])

        let r = try await call(BusClient.managerPath, StandardNames.objectManager, "GetManagedObjects")
        XCTAssertEqual(r.first?.signature, "a{oa{sa{sv}}}")
        var objects: [String: [String: [String: DBusValue]]] = [:]
        for (path, ifaces) in r.first?.dictionaryEntries ?? [] {
            var m: [String: [String: DBusValue]] = [:]
            for (name, props) in ifaces.dictionaryEntries ?? [] { m[name] = props.vardict ?? [:] }
            objects[path] = m
        }
        XCTAssertEqual(Set(objects.keys), [s1.path, s2.path, t.path])
        XCTAssertEqual(objects[s1.path]?[BusClient.sessionInterface]?["Identifier"]?.string, "com.example.One")
        XCTAssertEqual(objects[s2.path]?[BusClient.sessionInterface]?["Identifier"]?.string, "com.example.Two")
        XCTAssertEqual(objects[t.path]?[BusClient.transferInterface]?["State"]?.string, "paused")
        XCTAssertEqual(objects[t.path]?[BusClient.transferInterface]?["Session"]?.string, s2.path)
        XCTAssertEqual(objects[t.path]?[BusClient.transferInterface]?["Url"]?.string, server.url("/a.bin"))
        XCTAssertEqual(objects[t.path]?[BusClient.transferInterface]?["Kind"]?.string, "download")

        // The manager's own properties, with their documented defaults.
        let m = try await client.managerProperties()
        XCTAssertEqual(m["Version"]?.string?.isEmpty, false)
        XCTAssertEqual(m["MaxConcurrentTransfers"]?.uint32, 6)
        XCTAssertEqual(m["SpeedLimit"]?.uint64, 0)
        XCTAssertEqual(m["NotificationsEnabled"]?.bool, true)
        XCTAssertEqual(m["ActiveTransfers"]?.uint32, 0)

        // InterfacesAdded / InterfacesRemoved follow objects coming and going.
        try await t.cancel()
        try await signals.completed(t.path)
        try await t.remove()
        try await signals.wait("InterfacesRemoved for \(t.path)") { s in
            s.contains { $0.member == "InterfacesRemoved" && $0.args.first?.string == t.path }
        }
        XCTAssertTrue(signals.all.contains { $0.member == "InterfacesAdded" && $0.args.first?.string == t.path })
    }
}
