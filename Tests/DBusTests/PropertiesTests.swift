import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

/// org.freedesktop.DBus.Properties and PropertiesChanged.
final class PropertiesTests: BusTestCase {
    func testGetAndGetAll() async throws {
        try await startSample()
        let volume = try await getProperty("Volume")
        XCTAssertEqual(volume, .variant(.uint32(50)))
        let title = try await getProperty("Title")
        XCTAssertEqual(title, .variant(.string("first")))
        let secondTitle = try await getProperty("Title", path: Sample.secondPath)
        XCTAssertEqual(secondTitle, .variant(.string("second")))
        // A property of type v comes back as a variant holding a variant.
        let tag = try await getProperty("Tag")
        XCTAssertEqual(tag, .variant(.variant(.string("none"))))
        let all = try await callSample("GetAll", [.string(Sample.interfaceName)], interface: StandardNames.properties)
        XCTAssertEqual(all.first?.signature, "a{sv}")
        XCTAssertEqual(all.first?.vardict, ["Volume": .uint32(50), "Title": .string("first"), "Counter": .uint64(0),
                                            "Tag": .string("none")])
        // The standard interfaces have no properties.
        let none = try await callSample("GetAll", [.string(StandardNames.properties)], interface: StandardNames.properties)
        XCTAssertEqual(none, [.vardict([:])])
        await assertBusError(StandardErrors.unknownProperty) { try await self.getProperty("NoSuchProperty") }
        await assertBusError(StandardErrors.unknownInterface) { try await self.getProperty("Volume", interface: "org.ferry.Nope1") }
        await assertBusError(StandardErrors.unknownInterface) {
            try await self.callSample("GetAll", [.string("org.ferry.Nope1")], interface: StandardNames.properties)
        }
        await assertBusError(StandardErrors.invalidArgs) {
            try await self.callSample("Get", [.string(Sample.interfaceName)], interface: StandardNames.properties)
        }
        await assertBusError(StandardErrors.unknownMethod) {
            try await self.callSample("Frobnicate", interface: StandardNames.properties)
        }
    }

    func testSet() async throws {
        try await startSample()
        try await setProperty("Volume", .uint32(75))
        let volume = try await getProperty("Volume")
        XCTAssertEqual(volume, .variant(.uint32(75)))
        // The setter refuses with its own error, and the value stays.
        await assertBusError(Sample.outOfRange, message: "volume 101 is above 100") {
            try await self.setProperty("Volume", .uint32(101))
        }
        // Wrong type.
        await assertBusError(StandardErrors.invalidArgs) { try await self.setProperty("Volume", .string("loud")) }
        await assertBusError(StandardErrors.invalidArgs) { try await self.setProperty("Volume", .int32(10)) }
        // Read-only.
        await assertBusError(StandardErrors.propertyReadOnly) { try await self.setProperty("Title", .string("new")) }
        await assertBusError(StandardErrors.propertyReadOnly) { try await self.setProperty("Counter", .uint64(1)) }
        // Unknown.
        await assertBusError(StandardErrors.unknownProperty) { try await self.setProperty("Nope", .uint32(1)) }
        await assertBusError(StandardErrors.unknownInterface) {
            try await self.setProperty("Volume", .uint32(1), interface: "org.ferry.Nope1")
        }
        // Set's own arguments of the wrong type.
        await assertBusError(StandardErrors.invalidArgs) {
            try await self.callSample("Set", [.string(Sample.interfaceName), .string("Volume"), .uint32(3)],
                                      interface: StandardNames.properties)
        }
        let after = try await getProperty("Volume")
        XCTAssertEqual(after, .variant(.uint32(75)))
        let title = try await getProperty("Title")
        XCTAssertEqual(title, .variant(.string("first")))
    }

    /// A property of type `v` takes any value, which arrives wrapped in one more variant.
    func testSetVariantProperty() async throws {
        try await startSample()
        try await setProperty("Tag", .variant(.int32(7)))
        let tag = try await getProperty("Tag")
        XCTAssertEqual(tag, .variant(.variant(.int32(7))))
        try await setProperty("Tag", .variant(.vardict(["k": .string("v")])))
        let dict = try await getProperty("Tag")
        XCTAssertEqual(dict, .variant(.variant(.vardict(["k": .string("v")]))))
        await assertBusError(StandardErrors.invalidArgs) { try await self.setProperty("Tag", .int32(7)) }
    }

    func testPropertiesChanged() async throws {
        let sample = try await startSample()
        let changes = try await collect(MatchRule(path: Sample.objectPath, interface: StandardNames.properties,
                                                  member: "PropertiesChanged"))
        let object = sample.first!
        let server = self.server!

        // A change from the application.
        server.perform { object.setProperties(Sample.interfaceName, ["Volume": .uint32(42)]) }
        let first = try await changes.next(timeout: 5, "PropertiesChanged for Volume")
        XCTAssertEqual(first.signature, "sa{sv}as")
        XCTAssertEqual(try first.arguments(), [.string(Sample.interfaceName), .vardict(["Volume": .uint32(42)]), .stringArray([])])
        XCTAssertEqual(first.sender, server.uniqueName)

        // Unchanged, and not emitting: no signal. The next signal is the one for Title.
        server.perform {
            object.setProperties(Sample.interfaceName, ["Volume": .uint32(42)])
            object.setProperties(Sample.interfaceName, ["Counter": .uint64(9)])
            object.setProperties(Sample.interfaceName, ["Title": .string("renamed")])
        }
        let second = try await changes.next(timeout: 5, "PropertiesChanged for Title")
        XCTAssertEqual(try second.arguments()[1], .vardict(["Title": .string("renamed")]))
        // The silent property did change.
        let counter = try await getProperty("Counter")
        XCTAssertEqual(counter, .variant(.uint64(9)))

        // Several at once: one signal with every emitting property that changed.
        server.perform {
            object.setProperties(Sample.interfaceName, ["Volume": .uint32(1), "Title": .string("renamed"), "Counter": .uint64(10)])
            object.setProperties(Sample.interfaceName, ["Volume": .uint32(2), "Title": .string("again")])
        }
        let third = try await changes.next(timeout: 5, "PropertiesChanged for Volume=1")
        XCTAssertEqual(try third.arguments()[1], .vardict(["Volume": .uint32(1)]))
        let fourth = try await changes.next(timeout: 5, "PropertiesChanged for Volume=2 and Title")
        XCTAssertEqual(try fourth.arguments()[1], .vardict(["Volume": .uint32(2), "Title": .string("again")]))

        // A Set from a client announces the change too; a refused one does not.
        await assertBusError(Sample.outOfRange) { try await self.setProperty("Volume", .uint32(500)) }
        try await setProperty("Volume", .uint32(3))
        let fifth = try await changes.next(timeout: 5, "PropertiesChanged after Set")
        XCTAssertEqual(try fifth.arguments()[1], .vardict(["Volume": .uint32(3)]))
        // Setting the same value again announces nothing; the second object's change is not ours.
        try await setProperty("Volume", .uint32(3))
        try await setProperty("Volume", .uint32(4), path: Sample.secondPath)
        server.perform { object.setProperties(Sample.interfaceName, ["Title": .string("last")]) }
        let sixth = try await changes.next(timeout: 5, "PropertiesChanged for the last title")
        XCTAssertEqual(try sixth.arguments()[1], .vardict(["Title": .string("last")]))
        XCTAssertEqual(changes.queued.count, 0)
    }

    /// A coalescing object: a burst of changes made while the connection is busy gives
    /// one signal with the latest values, and `Get` sees each value at once.
    func testCoalescingObjectSignalsABurstOnce() async throws {
        let interface = "org.ferry.Test.Counts1"
        let spec = InterfaceSpec(name: interface, properties: [PropertySpec("Active", "u"), PropertySpec("Queued", "u")])
        let object = ExportedObject(path: "/counts", interfaces: [spec],
                                    initialValues: [interface: ["Active": .uint32(0), "Queued": .uint32(0)]],
                                    coalesceChanges: true)
        server.export(object)
        let changes = try await collect(MatchRule(path: "/counts", interface: StandardNames.properties, member: "PropertiesChanged"))
        let server = self.server!
        let seenInBurst = Mailbox<DBusValue?>()
        server.perform {
            for n in 1...50 { object.setProperties(interface, ["Active": .uint32(UInt32(n % 7)), "Queued": .uint32(UInt32(100 - n))]) }
            seenInBurst.put(object.property(interface, "Queued"))
        }
        let seen = try await seenInBurst.next(timeout: 5, "the value read in the burst")
        XCTAssertEqual(seen, .uint32(50))
        let burst = try await changes.next(timeout: 5, "PropertiesChanged after the burst")
        XCTAssertEqual(try burst.arguments()[1], .vardict(["Active": .uint32(1), "Queued": .uint32(50)]))

        // The next change is signalled by itself, with only what changed.
        server.perform { object.setProperties(interface, ["Queued": .uint32(49)]) }
        let next = try await changes.next(timeout: 5, "PropertiesChanged for Queued=49")
        XCTAssertEqual(try next.arguments()[1], .vardict(["Queued": .uint32(49)]))
        XCTAssertEqual(changes.queued.count, 0, "one signal per burst")
    }

    /// Changes made in separate turns of the connection's queue, close together, still
    /// make one signal (it waits `changeSignalDelay`); a signal the object itself emits
    /// goes after them; a writable property's change goes at once.
    func testHeldBackChangesGoTogetherAndBeforeTheObjectsOwnSignal() async throws {
        let interface = "org.ferry.Test.Counts2"
        let spec = InterfaceSpec(name: interface, properties: [PropertySpec("Active", "u"),
                                                               PropertySpec("Limit", "u", access: .readwrite)])
        let object = ExportedObject(path: "/held", interfaces: [spec],
                                    initialValues: [interface: ["Active": .uint32(0), "Limit": .uint32(0)]],
                                    coalesceChanges: true)
        server.export(object)
        let messages = try await collect(MatchRule(path: "/held"))
        let server = self.server!
        for n in 1...3 { server.perform { object.setProperties(interface, ["Active": .uint32(UInt32(n))]) } }
        try server.emitSignal(path: "/held", interface: interface, name: "Done")
        let first = try await messages.next(timeout: 5, "the held-back change")
        XCTAssertEqual(first.member, "PropertiesChanged")
        XCTAssertEqual(try first.arguments().dropFirst().first, .vardict(["Active": .uint32(3)]), "one signal with the latest value")
        let second = try await messages.next(timeout: 5, "Done")
        XCTAssertEqual(second.member, "Done", "the object's own signal comes after the values it follows")

        server.perform { object.setProperties(interface, ["Active": .uint32(4), "Limit": .uint32(5)]) }
        let limit = try await messages.next(timeout: 5, "the writable property's change")
        XCTAssertEqual(try limit.arguments().dropFirst().first, .vardict(["Limit": .uint32(5)]), "sent at once, before the held-back one")
        let active = try await messages.next(timeout: 5, "the held-back change")
        XCTAssertEqual(try active.arguments().dropFirst().first, .vardict(["Active": .uint32(4)]))
        XCTAssertEqual(messages.queued.count, 0)
    }

    /// An object whose values come from the application's own snapshot: `Get` and
    /// `GetAll` read it, a new snapshot signals only the emitting values that changed,
    /// and a value set in between (a silent counter) shows until the next snapshot.
    func testSourcedObjectSignalsWhatTheNewSnapshotChanged() async throws {
        struct Reading: PropertySource {
            var name: String, level: UInt32, count: UInt64
            /// Whether `changedProperties` names candidates (false: the object compares all).
            var namesChanges = true
            func value(ofProperty index: Int) -> DBusValue? {
                [.string(name), .uint32(level), .uint64(count)][index]
            }
            func changedProperties(since old: any PropertySource) -> [Int]? {
                guard namesChanges, let old = old as? Reading else { return nil }
                return [old.name != name, old.level != level, old.count != count].enumerated().filter(\.element).map(\.offset)
            }
        }
        let interface = "org.ferry.Test.Sourced1"
        let spec = InterfaceSpec(name: interface, properties: [PropertySpec("Name", "s"), PropertySpec("Level", "u"),
                                                               PropertySpec("Count", "t", emitsChange: false)])
        let object = ExportedObject(path: "/sourced", interfaces: [spec],
                                    source: Reading(name: "a", level: 1, count: 0), of: interface)
        server.export(object)
        let messages = try await collect(MatchRule(path: "/sourced", interface: StandardNames.properties, member: "PropertiesChanged"))
        let server = self.server!
        func getAll() async throws -> [String: DBusValue]? {
            try await client.call(destination: server.uniqueName, path: "/sourced", interface: StandardNames.properties,
                                  method: "GetAll", arguments: [.string(interface)], timeout: 10).first?.vardict
        }
        let first = try await getAll()
        XCTAssertEqual(first, ["Name": .string("a"), "Level": .uint32(1), "Count": .uint64(0)])

        server.perform { object.setSource(Reading(name: "a", level: 2, count: 5)) }
        let level = try await messages.next(timeout: 5, "PropertiesChanged for Level")
        XCTAssertEqual(try level.arguments()[1], .vardict(["Level": .uint32(2)]), "the silent Count is not signalled")
        let second = try await getAll()
        XCTAssertEqual(second, ["Name": .string("a"), "Level": .uint32(2), "Count": .uint64(5)])

        // Set between snapshots: Get sees it; the next snapshot replaces it.
        server.perform { object.setProperties(interface, ["Count": .uint64(9), "Name": .string("b")]) }
        let name = try await messages.next(timeout: 5, "PropertiesChanged for Name=b")
        XCTAssertEqual(try name.arguments()[1], .vardict(["Name": .string("b")]))
        let third = try await getAll()
        XCTAssertEqual(third, ["Name": .string("b"), "Level": .uint32(2), "Count": .uint64(9)])
        // The snapshot agrees on Name (no signal for it) and has its own Count; then one
        // that names no candidates changes Name back: every value is compared.
        server.perform {
            object.setSource(Reading(name: "b", level: 2, count: 10))
            object.setSource(Reading(name: "c", level: 2, count: 10, namesChanges: false))
        }
        let back = try await messages.next(timeout: 5, "PropertiesChanged for Name=c")
        XCTAssertEqual(try back.arguments()[1], .vardict(["Name": .string("c")]))
        let fourth = try await getAll()
        XCTAssertEqual(fourth, ["Name": .string("c"), "Level": .uint32(2), "Count": .uint64(10)])
        XCTAssertEqual(messages.queued.count, 0)
    }

    /// Before export, values can be set freely and nothing is sent.
    func testSetPropertiesBeforeExport() async throws {
        let spec = InterfaceSpec(name: "org.ferry.Test.Late1", properties: [PropertySpec("State", "s")])
        let object = ExportedObject(path: "/late", interfaces: [spec])
        object.setProperties("org.ferry.Test.Late1", ["State": .string("ready")])
        XCTAssertEqual(object.property("org.ferry.Test.Late1", "State"), .string("ready"))
        server.export(object)
        let state = try await client.call(destination: server.uniqueName, path: "/late", interface: StandardNames.properties,
                                          method: "Get", arguments: [.string("org.ferry.Test.Late1"), .string("State")], timeout: 10)
        XCTAssertEqual(state, [.variant(.string("ready"))])
    }
}
