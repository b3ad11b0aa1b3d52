import DBus
import FerryBusClient
import FerryInterface
import FerryTestSupport
import Foundation
import XCTest

/// `Manager.ListTransferProperties` (an addition): every transfer with the properties
/// asked for, one array per property. What a client reads from it must be what
/// `GetManagedObjects` says of the same transfers.
final class TransferListingTests: FerryTestCase {
    static let prefix = "org.ferry.Ferry1.Error."

    func listing(_ names: [String]) async throws -> (paths: [String], columns: [(String, DBusValue)]) {
        let r = try await call(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties", [.stringArray(names)])
        XCTAssertEqual(r.map(\.signature), ["ao", "a{sv}"])
        let paths = r.first?.arrayElements?.compactMap(\.string) ?? []
        return (paths, r.dropFirst().first?.dictionaryEntries ?? [])
    }

    /// Each transfer's properties as `GetManagedObjects` gives them, by path.
    func managedTransferProperties() async throws -> [String: [String: DBusValue]] {
        let r = try await call(BusClient.managerPath, StandardNames.objectManager, "GetManagedObjects")
        var out: [String: [String: DBusValue]] = [:]
        for (path, interfaces) in r.first?.dictionaryEntries ?? [] {
            for (name, properties) in interfaces.dictionaryEntries ?? [] where name == BusClient.transferInterface {
                out[path] = properties.vardict ?? [:]
            }
        }
        return out
    }

    /// Twelve transfers in two sessions (ids past 9, so the order is by number, not
    /// text), one completed, one failed, the rest paused: every column holds, at each
    /// index, the property `GetManagedObjects` gives for the transfer at that index, and
    /// the client library reads the same transfers from either.
    func testEveryColumnHoldsWhatGetManagedObjectsSays() async throws {
        serve("/a.bin", size: 5_000)
        let one = try await session("com.example.One")
        let two = try await session("com.example.Two")
        let done = try await one.download(server.url("/a.bin"), options: ["destination": .string(work + "/a.bin"), "description": .string("first")])
        let doneInfo = try await finish(done)
        XCTAssertEqual(doneInfo.state, "completed")
        let failed = try await one.download(server.url("/missing.bin"), options: ["destination": .string(work + "/m.bin")])
        let failedInfo = try await finish(failed)
        XCTAssertEqual(failedInfo.state, "failed")
        var paused: [String] = []
        for i in 0..<10 {
            let t = try await two.download(server.url("/a.bin"), options: [
                "destination": .string(work + "/p\(i).bin"), "start": .boolean(false), "priority": .int32(Int32(i % 3) - 1),
            ])
            paused.append(t.path)
        }

        let (paths, columns) = try await listing([])
        let listed = try await client.listTransfers().map(\.path)
        XCTAssertEqual(paths, listed, "the transfers ListTransfers gives, in its order")
        XCTAssertEqual(paths, [done.path, failed.path] + paused)
        XCTAssertEqual(paths.map(BusClient.transferID), Array(1...12), "oldest first, by number")

        let managed = try await managedTransferProperties()
        let names = Set(managed[done.path]?.keys.map { $0 } ?? [])
        XCTAssertEqual(columns.map(\.0), names.sorted(), "every property, in name order")
        for (name, column) in columns {
            guard case .variant(let values) = column, let items = values.arrayElements else {
                XCTFail("\(name) is not a variant holding an array: \(column)")
                continue
            }
            XCTAssertEqual(values.signature, "a" + (managed[done.path]?[name]?.signature ?? "?"), name)
            XCTAssertEqual(items.count, paths.count, name)
            for (k, path) in paths.enumerated() where k < items.count {
                XCTAssertEqual(items[k], managed[path]?[name], "\(name) of \(path)")
            }
        }
        // The columns carry what a listing shows.
        let error = columns.first { $0.0 == "Error" }?.1.arrayElements?[1].structFields?.first?.string
        XCTAssertEqual(error, "org.ferry.Ferry1.Error.Http")
        let states = columns.first { $0.0 == "State" }?.1.arrayElements?.compactMap(\.string)
        XCTAssertEqual(states, ["completed", "failed"] + Array(repeating: "paused", count: 10))

        // The client library reads the same transfers as from GetManagedObjects.
        let objects = try await client.listing()
        let fromManaged = paths.map { TransferInfo(id: BusClient.transferID($0), path: $0, properties: managed[$0] ?? [:]) }
        XCTAssertEqual(objects.transfers, fromManaged)
        let snapshot = try await client.managedObjects()
        XCTAssertEqual(snapshot.transfers, fromManaged)
        XCTAssertEqual(snapshot.sessions, objects.sessions)
        XCTAssertEqual(objects.sessions.map(\.identifier), ["com.example.One", "com.example.Two"])
        XCTAssertEqual(objects.transfers.first?.description, "first")
        XCTAssertEqual(objects.transfers.last?.priority, -1, "the last paused one was made with priority -1")
    }

    /// Named properties come in the order named, each once; names that are not
    /// properties, too many names and a wrong signature are refused by name, and the
    /// listing after them is unchanged.
    func testNamedPropertiesAndRefusals() async throws {
        serve("/b.bin", size: 10)
        let s = try await session()
        let t = try await s.download(server.url("/b.bin"), options: ["destination": .string(work + "/b.bin"), "start": .boolean(false)])

        let (paths, columns) = try await listing(["Url", "State", "Url"])
        XCTAssertEqual(paths, [t.path])
        XCTAssertEqual(columns.map(\.0), ["Url", "State"], "in the order named, each once")
        XCTAssertEqual(columns.first?.1.arrayElements?.compactMap(\.string), [server.url("/b.bin")])
        XCTAssertEqual(columns.last?.1.arrayElements?.compactMap(\.string), ["paused"])

        let e = await assertBusError(Self.prefix + "InvalidArgument", "a name that is not a property") {
            try await self.listing(["State", "Password"])
        }
        XCTAssertTrue(e?.message.contains("'Password'") ?? false, e?.message ?? "")
        await assertBusError(Self.prefix + "InvalidArgument", "a lower-case name") { try await self.listing(["state"]) }
        let long = await assertBusError(Self.prefix + "InvalidArgument", "a name of 70,000 bytes") {
            try await self.listing([String(repeating: "x", count: 70_000)])
        }
        XCTAssertLessThan(long?.message.utf8.count ?? 0, 200, "the name is not echoed")
        await assertBusError(Self.prefix + "LimitExceeded", "65 names") {
            try await self.listing(Array(repeating: "State", count: 65))
        }
        await assertBusError(StandardErrors.invalidArgs, "a string, not an array") {
            try await self.call(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties", [.string("State")])
        }
        await assertDaemonAlive()
        let after = try await listing(["State"])
        XCTAssertEqual(after.paths, [t.path])
        XCTAssertEqual(after.columns.first?.1.arrayElements?.compactMap(\.string), ["paused"])
    }

    /// A service without the addition (a ferryd from before it) is read through
    /// `GetManagedObjects`: `ferry ls` and the library list its transfers all the same.
    func testAServiceWithoutTheListingIsReadThroughGetManagedObjects() async throws {
        try await stopFerryd()
        let older = try BusConnection(address: bus.address, queue: DispatchQueue(label: "test.older-service"))
        let sessionPath = BusClient.managerPath + "/session/1", transferPath = BusClient.managerPath + "/transfer/7"
        let manager = InterfaceSpec(name: BusClient.managerInterface, methods: [
            MethodSpec("ListSessions", out: [ArgSpec("sessions", "ao")]) { $0.reply([.pathArray([sessionPath])]) },
            MethodSpec("ListTransfers", out: [ArgSpec("transfers", "ao")]) { $0.reply([.pathArray([transferPath])]) },
        ])
        func spec(_ name: String, _ properties: [BusProperty]) -> InterfaceSpec {
            InterfaceSpec(name: name, properties: properties.map { PropertySpec($0.name, $0.signature) })
        }
        let url = server.url("/older.bin")
        older.export(ExportedObject(path: BusClient.managerPath, interfaces: [manager]))
        older.addObjectManager(at: BusClient.managerPath)
        older.export(ExportedObject(path: sessionPath, interfaces: [spec(BusClient.sessionInterface, FerryInterface.SessionProperty.all)],
                                    initialValues: [BusClient.sessionInterface: [
                                        "Identifier": .string("com.example.Older"), "Configuration": .vardict([:]), "ActiveTransfers": .uint32(0)]]))
        older.export(ExportedObject(path: transferPath, interfaces: [spec(BusClient.transferInterface, FerryInterface.TransferProperty.all)],
                                    initialValues: [BusClient.transferInterface: [
                                        "Kind": .string("download"), "Url": .string(url), "Session": .objectPath(sessionPath),
                                        "Destination": .string(work + "/older.bin"), "State": .string("paused"),
                                        "BytesTransferred": .int64(1234), "BytesExpected": .int64(5000)]]))
        let owner = try await older.requestName(BusClient.busName)
        XCTAssertEqual(owner, .primaryOwner)

        let listing = try await client.listing()
        XCTAssertEqual(listing.transfers.map(\.path), [transferPath])
        XCTAssertEqual(listing.transfers.first?.url, url)
        XCTAssertEqual(listing.transfers.first?.bytesTransferred, 1234)
        XCTAssertEqual(listing.sessions.map(\.identifier), ["com.example.Older"])

        let ls = try ferry(["ls", "--json"])
        XCTAssertEqual(ls.status, 0, ls.stderr)
        let rows = try JSONSerialization.jsonObject(with: Data(ls.stdout.utf8)) as? [[String: Any]]
        XCTAssertEqual(rows?.count, 1, ls.stdout)
        XCTAssertEqual(rows?.first?["url"] as? String, url)
        XCTAssertEqual(rows?.first?["state"] as? String, "paused")
        XCTAssertEqual(rows?.first?["session"] as? String, "com.example.Older")
        XCTAssertEqual(rows?.first?["id"] as? Int, 7)
    }

    /// With no transfers: no paths, and every property as an empty array of its type.
    func testNoTransfersListsEmptyColumns() async throws {
        let (paths, columns) = try await listing([])
        XCTAssertEqual(paths, [])
        XCTAssertEqual(columns.count, FerryInterface.TransferProperty.all.count)
        let types = Dictionary(uniqueKeysWithValues: columns.map { ($0.0, $0.1.unwrapped.signature) })
        XCTAssertEqual(types["Url"], "as")
        XCTAssertEqual(types["BytesTransferred"], "ax")
        XCTAssertEqual(types["Error"], "a(ss)")
        XCTAssertEqual(types["Response"], "aay")
        XCTAssertTrue(columns.allSatisfy { $0.1.arrayElements?.isEmpty == true })
    }
}
