import DBus
import FerryBusClient
import FerryInterface
import FerryTestSupport
import Foundation
import XCTest

/// `Session.DownloadGroup` and the `org.ferry.Ferry1.Group` objects (contract v1.2), on
/// the real ferryd, bus, HTTP server and store.
final class GroupTests: FerryTestCase {
    /// The group's `Finished` signals so far.
    private func finishedSignals(_ g: BusGroup) -> [RecordedSignal] {
        signals.signals(path: g.path, member: "Finished")
    }

    private func waitForFinished(_ g: BusGroup, timeout: TimeInterval = 30) async throws -> (UInt32, UInt32, UInt32) {
        try await signals.wait("Finished on \(g.path)", timeout: timeout) { s in
            s.contains { $0.path == g.path && $0.member == "Finished" }
        }
        let args = finishedSignals(g).first?.args ?? []
        return (args.first?.uint32 ?? 99, args.dropFirst().first?.uint32 ?? 99, args.dropFirst(2).first?.uint32 ?? 99)
    }

    private func waitForGroupState(_ g: BusGroup, _ state: String, timeout: TimeInterval = 10) async throws {
        if try await g.info().state == state { return }
        try await signals.wait("State \(state) on \(g.path)", timeout: timeout) { s in
            s.contains { $0.path == g.path && $0.member == "PropertiesChanged" && $0.changed["State"]?.string == state }
        }
    }

    /// 1,000 URLs in one call: one reply naming one group, whose transfers are the
    /// items in order, each pointing back at it; one `Finished` with (1000, 0, 0) once
    /// every file is in place.
    func testAThousandDownloadsInOneCall() async throws {
        let n = 1000
        var bodies: [[UInt8]] = []
        var items: [(url: String, options: [String: DBusValue])] = []
        for i in 0..<n {
            bodies.append(serve("/g/\(i).bin", size: 200 + i, seed: UInt64(i + 1)))
            items.append((server.url("/g/\(i).bin"), ["destination": .string(work + "/g\(i).bin")]))
        }
        let s = try await session("com.example.Batch")
        let g = try await s.downloadGroup(items, options: ["description": .string("a thousand")])
        XCTAssertTrue(g.path.hasPrefix(FerryInterface.groupPathPrefix), g.path)

        let counts = try await waitForFinished(g, timeout: 120)
        XCTAssertEqual(counts.0, UInt32(n)); XCTAssertEqual(counts.1, 0); XCTAssertEqual(counts.2, 0)
        let info = try await g.info()
        XCTAssertEqual(info.state, "completed")
        XCTAssertEqual(info.succeeded, UInt32(n))
        XCTAssertEqual(info.description, "a thousand")
        XCTAssertEqual(info.session, s.path)
        XCTAssertEqual(info.transfers.count, n)
        XCTAssertEqual(info.bytesTransferred, Int64(bodies.map(\.count).reduce(0, +)))
        let first = try await client.transfer(id: BusClient.transferID(info.transfers[0])).info()
        XCTAssertEqual(first.url, server.url("/g/0.bin"), "the transfers come in the items' order")
        XCTAssertEqual(first.group, g.path)
        for i in [0, 499, n - 1] { assertFile(work + "/g\(i).bin", equals: bodies[i]) }
        XCTAssertEqual((0..<n).filter { !exists(work + "/g\($0).bin") }, [])
        _ = try await client.listSessions() // a round trip: every signal ferryd sent has arrived
        XCTAssertEqual(finishedSignals(g).count, 1, "Finished comes once")
        let single = try await s.download(server.url("/g/0.bin"), options: ["destination": .string(work + "/single.bin")])
        let singleGroup = try await single.info().group
        XCTAssertEqual(singleGroup, "/", "a transfer made by Download is in no group")
    }

    /// A bad item refuses the whole call with the error Download would give, naming its
    /// index, and creates nothing: no transfer, no group, no file.
    func testABadItemRefusesTheWholeCall() async throws {
        serve("/ok.bin", size: 10)
        let s = try await session("com.example.Refused")
        func items(bad k: Int, _ bad: (url: String, options: [String: DBusValue])) -> [(url: String, options: [String: DBusValue])] {
            (0..<20).map { $0 == k ? bad : (server.url("/ok.bin"), ["destination": .string(work + "/ok\($0).bin")]) }
        }
        for (k, bad, error) in [(17, ("ftp://example.com/x", [String: DBusValue]()), "UnsupportedScheme"),
                                (0, (server.url("/ok.bin"), ["priority": .string("high")]), "InvalidArgument"),
                                (19, (server.url("/ok.bin"), ["destination": .string("relative/path")]), "InvalidDestination")] {
            do {
                _ = try await s.downloadGroup(items(bad: k, bad))
                XCTFail("a group with a bad item \(k) was accepted")
            } catch let e as BusError {
                XCTAssertEqual(e.name, "org.ferry.Ferry1.Error." + error)
                XCTAssertTrue(e.message.hasPrefix("item \(k): "), e.message)
            }
        }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "an empty group") { try await s.downloadGroup([]) }
        await assertBusError("org.ferry.Ferry1.Error.InvalidArgument", "an unknown group option") {
            try await s.downloadGroup(items(bad: -1, ("", [:])), options: ["colour": .string("red")])
        }
        let transfers = try await client.listTransfers()
        XCTAssertEqual(transfers, [], "nothing was created")
        let objects = try await call(BusClient.managerPath, StandardNames.objectManager, "GetManagedObjects")
        var paths: [String] = []
        if case .dictionary(_, _, let entries)? = objects.first { paths = entries.compactMap(\.key.string) }
        XCTAssertEqual(paths.filter { $0.hasPrefix(FerryInterface.groupPathPrefix) }, [], "no group object")
        XCTAssertEqual(partFiles(in: work), [])
        // Nothing of the refused calls lingers to be made with the next download.
        let good = try await s.download(server.url("/ok.bin"), options: ["destination": .string(work + "/good.bin"), "start": .boolean(false)])
        let after = try await client.listTransfers()
        XCTAssertEqual(after.map(\.path), [good.path])
        await assertDaemonAlive()
    }

    /// all-or-nothing: one member's 404 cancels the others (a stalled one's partial file
    /// goes) and deletes the files of those that completed; the group ends failed.
    func testAllOrNothingFailsAsOne() async throws {
        let s = try await session("com.example.AllOrNothing")
        serve("/a/ok1.bin", size: 1000, seed: 1)
        serve("/a/ok2.bin", size: 1000, seed: 2)
        serve("/a/stalled.bin", size: stalledSize, seed: 3)
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: "/a/stalled.bin")
        // ok1 and ok2 run and complete first; the 404 starts only once they have.
        let g = try await s.downloadGroup([
            (server.url("/a/ok1.bin"), ["destination": .string(work + "/ok1.bin")]),
            (server.url("/a/ok2.bin"), ["destination": .string(work + "/ok2.bin")]),
            (server.url("/a/stalled.bin"), ["destination": .string(work + "/stalled.bin")]),
            (server.url("/a/missing.bin"), ["destination": .string(work + "/missing.bin"), "start": .boolean(false)]),
        ], options: ["all-or-nothing": .boolean(true)])
        let members = try await g.info().transfers.map { client.transfer(id: BusClient.transferID($0)) }
        try await signals.completed(members[0].path)
        try await signals.completed(members[1].path)
        XCTAssertTrue(exists(work + "/ok1.bin") && exists(work + "/ok2.bin"))
        try await waitForFileSize(work + "/stalled.bin.part", atLeast: stalledCut)
        try await members[3].resume()

        let counts = try await waitForFinished(g)
        XCTAssertEqual(counts.1, 1, "the 404")
        XCTAssertEqual(counts.2, 1, "the stalled one, cancelled")
        let info = try await g.info()
        XCTAssertEqual(info.state, "failed")
        let stalledState = try await members[2].info().state
        XCTAssertEqual(stalledState, "cancelled")
        XCTAssertFalse(exists(work + "/ok1.bin"), "a completed member's file goes")
        XCTAssertFalse(exists(work + "/ok2.bin"))
        XCTAssertFalse(exists(work + "/stalled.bin.part"))
        XCTAssertEqual(partFiles(in: work), [])
    }

    /// A group survives kill -9: the same object with its description and members, the
    /// members pointing at it; resumed after the restart it finishes as one.
    func testAGroupSurvivesKillMinus9() async throws {
        let bodies = (0..<3).map { serve("/k/\($0).bin", size: 5000, seed: UInt64($0 + 7)) }
        let s = try await session("com.example.Lasting")
        let g = try await s.downloadGroup((0..<3).map { (server.url("/k/\($0).bin"), ["destination": .string(work + "/k\($0).bin")]) },
                                          options: ["description": .string("kept"), "start": .boolean(false)])
        let before = try await g.info()
        XCTAssertEqual(before.state, "paused", "start false: every member is made paused")

        try await killAndRestart()
        let after = try await g.info()
        XCTAssertEqual(after, before)
        guard after.transfers.count == 3 else { return XCTFail("the group lost its members: \(after.transfers)") }
        let member = try await client.transfer(id: BusClient.transferID(after.transfers[1])).info()
        XCTAssertEqual(member.group, g.path)

        try await g.resume()
        let counts = try await waitForFinished(g)
        XCTAssertEqual(counts.0, 3); XCTAssertEqual(counts.1, 0); XCTAssertEqual(counts.2, 0)
        for i in 0..<3 { assertFile(work + "/k\(i).bin", equals: bodies[i]) }

        // A new group after another kill -9 never takes the old one's number.
        try await killAndRestart()
        let next = try await s.downloadGroup([(server.url("/k/0.bin"), ["destination": .string(work + "/again.bin")])])
        XCTAssertGreaterThan(next.id, g.id)
    }

    /// Pause, Resume and Cancel act on every member; Cancel ends the group cancelled, with
    /// one Finished; Remove then forgets it with its transfers.
    func testPauseResumeCancelAndRemove() async throws {
        let s = try await session("com.example.Steered")
        var items: [(url: String, options: [String: DBusValue])] = []
        for i in 0..<2 {
            serve("/p/\(i).bin", size: stalledSize, seed: UInt64(i + 20))
            server.set(.stallAfter(bytes: stalledCut, times: 9), on: "/p/\(i).bin")
            items.append((server.url("/p/\(i).bin"), ["destination": .string(work + "/p\(i).bin")]))
        }
        let g = try await s.downloadGroup(items)
        for i in 0..<2 { try await waitForFileSize(work + "/p\(i).bin.part", atLeast: stalledCut) }
        try await waitForGroupState(g, "running")
        await assertBusError("org.ferry.Ferry1.Error.InvalidState", "Remove while transfers run") { try await g.remove() }

        try await g.pause()
        try await waitForGroupState(g, "paused")
        for path in try await g.info().transfers {
            let state = try await client.transfer(id: BusClient.transferID(path)).info().state
            XCTAssertEqual(state, "paused")
        }
        try await g.resume()
        try await waitForGroupState(g, "running")

        try await g.cancel()
        let counts = try await waitForFinished(g)
        XCTAssertEqual(counts.0, 0); XCTAssertEqual(counts.1, 0); XCTAssertEqual(counts.2, 2)
        let state = try await g.info().state
        XCTAssertEqual(state, "cancelled")
        XCTAssertEqual(partFiles(in: work), [])

        try await g.remove()
        await assertBusError(StandardErrors.unknownObject, "the removed group") { try await g.info() }
        let left = try await client.listTransfers()
        XCTAssertEqual(left, [], "its transfers went with it")
    }

    /// `ferry get URL URL…` makes its downloads in one DownloadGroup call: one group holds
    /// the transfers it printed; one bad URL among them falls back to a Download each, so
    /// the good ones are still queued and the bad one is named.
    func testFerryGetWithSeveralURLsMakesOneGroup() async throws {
        let bodies = (0..<3).map { serve("/cli/\($0).bin", size: 3000 + $0, seed: UInt64($0 + 40)) }
        let r = try ferry(["get", "-d", work + "/cli", "--wait"] + (0..<3).map { server.url("/cli/\($0).bin") })
        XCTAssertEqual(r.status, 0, r.stderr)
        let ids = r.stdout.split(separator: "\n").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        guard ids.count == 3 else { return XCTFail("three ids: \(r.stdout)") }
        let member = try await client.transfer(id: ids[0]).info()
        XCTAssertTrue(member.group.hasPrefix(FerryInterface.groupPathPrefix), member.group)
        let info = try await BusGroup(client: client, path: member.group).info()
        XCTAssertEqual(info.transfers.map(BusClient.transferID), ids)
        XCTAssertEqual(info.state, "completed")
        for i in 0..<3 { assertFile(work + "/cli/\(i).bin", equals: bodies[i]) }

        let mixed = try ferry(["get", "-d", work + "/mixed", server.url("/cli/0.bin"), "ftp://example.com/nope"])
        XCTAssertEqual(mixed.status, 2, mixed.stderr)
        XCTAssertTrue(mixed.stderr.contains("ftp://example.com/nope"), mixed.stderr)
        let queued = mixed.stdout.split(separator: "\n").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        XCTAssertEqual(queued.count, 1, "the good URL is still queued")
        let alone = try await client.transfer(id: queued[0]).info()
        XCTAssertEqual(alone.group, "/", "made by Download, after the group was refused")
    }

    /// A private session's group (`private-signals`): its signals go to its own client,
    /// never broadcast; the harness's connection (a broadcast listener) hears none.
    func testAPrivateSessionsGroupSignalsArePrivate() async throws {
        serve("/q/0.bin", size: 1000)
        let owner = try BusClient(address: bus.address)
        defer { owner.close() }
        let heard = try await SignalRecorder.start(owner.bus)
        defer { heard.stop() }
        let s = try await owner.openSession("com.example.QuietGroup", configuration: ["private-signals": .boolean(true)])
        let g = try await s.downloadGroup([(server.url("/q/0.bin"), ["destination": .string(work + "/q0.bin")])])
        try await heard.wait("the group's Finished at its own client") { s in
            s.contains { $0.path == g.path && $0.member == "Finished" }
        }
        _ = try await client.listSessions() // a round trip: ferryd's earlier signals have arrived
        XCTAssertEqual(signals.signals(path: g.path).map(\.description), [], "a broadcast listener heard a private group")
        let announced = signals.signals(path: BusClient.managerPath, member: "InterfacesAdded").filter { $0.args.first?.string == g.path }
        XCTAssertEqual(announced.count, 0, "the group's InterfacesAdded went to the bus")
        let heardAdded = heard.signals(path: BusClient.managerPath, member: "InterfacesAdded").filter { $0.args.first?.string == g.path }
        XCTAssertEqual(heardAdded.count, 1, "its own client hears of it")
    }

    /// A group counts against the session's transfer limit: one that would pass it is
    /// refused with LimitExceeded, naming the first item past it, and makes nothing;
    /// more than 100,000 items are refused before any is looked at.
    func testAGroupStaysWithinTheSessionsTransferLimit() async throws {
        try await stopFerryd()
        try await startFerryd(["--max-transfers-per-session", "5"])
        serve("/l.bin", size: 10)
        let s = try await session("com.example.Limited")
        _ = try await s.download(server.url("/l.bin"), options: ["start": .boolean(false), "destination": .string(work + "/l.bin")])
        let items = (0..<5).map { (url: server.url("/l.bin"), options: ["start": DBusValue.boolean(false), "destination": .string(work + "/l\($0).bin")]) }
        do {
            _ = try await s.downloadGroup(items)
            XCTFail("a group past the session's limit was accepted")
        } catch let e as BusError {
            XCTAssertEqual(e.name, "org.ferry.Ferry1.Error.LimitExceeded")
            XCTAssertTrue(e.message.hasPrefix("item 4: "), e.message)
        }
        let count = try await s.listTransfers().count
        XCTAssertEqual(count, 1, "nothing of the refused group was made")
        let fits = try await s.downloadGroup(Array(items.prefix(4)))
        let members = try await fits.info().transfers.count
        XCTAssertEqual(members, 4)

        let tooMany = Array(repeating: (url: "http://127.0.0.1/x", options: [String: DBusValue]()), count: 100_001)
        await assertBusError("org.ferry.Ferry1.Error.LimitExceeded", "100,001 items") { try await s.downloadGroup(tooMany) }
    }
}
