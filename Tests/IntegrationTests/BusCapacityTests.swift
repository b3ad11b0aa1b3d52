import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// ferryd never builds a reply or signal the bus cannot carry (the bus would drop its
/// connection), and losing the bus is a failure exit, never a silent 0.
final class BusCapacityTests: FerryTestCase {
    static let prefix = "org.ferry.Ferry1.Error."

    /// A reply too large for the bus is never sent: GetManagedObjects over the
    /// protocol's 64 MiB array limit answers LimitExceeded, the error is logged, and
    /// ferryd stays on the bus. (~1,000 transfers with URLs at their 64 KiB limit are
    /// enough: the limits make such a reply reachable.)
    func testReplyTooLargeForTheBusIsRefusedNotSent() async throws {
        let s = try await session("com.example.Huge", ["persistent": .boolean(false)])
        let base = server.url("/huge.bin") + "?"
        let pad = String(repeating: "u", count: 65_536 - base.utf8.count - 5)
        let description = String(repeating: "d", count: 4096)
        // 64 MiB of URLs alone: the reply's array is well over the limit.
        let count = 1_040
        for i in 0..<count {
            _ = try await call(s.path, BusClient.sessionInterface, "Download", [
                .string(base + pad + String(format: "%05d", i)),
                .vardict(["start": .boolean(false), "destination": .string(work + "/h\(i)"), "description": .string(description)]),
            ], timeout: 30)
        }
        let e = await assertBusError(Self.prefix + "LimitExceeded", "GetManagedObjects over 64 MiB") {
            try await self.call(BusClient.managerPath, StandardNames.objectManager, "GetManagedObjects", timeout: 60)
        }
        XCTAssertTrue(e?.message.contains("too large") ?? false, e?.message ?? "")
        await assertDaemonAlive()
        XCTAssertTrue(ferryd?.log.contains("GetManagedObjects") ?? false, "the refusal is logged")
        // The listing by columns too: its Url column alone is over the array limit.
        await assertBusError(Self.prefix + "LimitExceeded", "ListTransferProperties of Url over 64 MiB") {
            try await self.call(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties",
                                [.stringArray(["Url"])], timeout: 60)
        }
        XCTAssertTrue(ferryd?.log.contains("ListTransferProperties") ?? false, "the refusal is logged")
        let states = try await call(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties",
                                    [.stringArray(["State"])], timeout: 60)
        XCTAssertEqual(states.first?.arrayElements?.count, count, "a listing without the URLs fits")
        // Still serving: the same objects one by one.
        let listed = try await client.listTransfers()
        XCTAssertEqual(listed.count, count)
        let url = try await listed.last!.info().url
        XCTAssertEqual(url.utf8.count, 65_536)
        // And clients that read everything at once go object by object: `ferry ls`
        // still lists every transfer.
        let everything = try await client.managedObjects()
        XCTAssertEqual(everything.transfers.count, count)
        let listing = try await client.listing()
        XCTAssertEqual(listing.transfers, everything.transfers, "the listing by columns goes object by object too")
        XCTAssertEqual(everything.transfers.last?.url.utf8.count, 65_536)
        XCTAssertTrue(everything.sessions.contains { $0.identifier == "com.example.Huge" })
        let ls = try ferry(["ls", "--session", "com.example.Huge"], timeout: 120)
        XCTAssertEqual(ls.status, 0, ls.stderr)
        XCTAssertEqual(ls.stdout.split(separator: "\n").count, count + 1, "a header and every transfer")
    }

    /// When the bus goes away, ferryd does not exit as if all were well: it logs it
    /// and exits non-zero, so a service manager restarts it.
    func testLostBusIsAFailureExit() async throws {
        _ = try await session()
        bus.stop()
        guard let status = ferryd?.waitForExit(timeout: 10) else {
            return XCTFail("ferryd did not exit within 10 s of losing its bus")
        }
        XCTAssertNotEqual(status, 0, "a lost bus is not a clean exit")
        XCTAssertTrue(ferryd?.log.contains("lost the connection to the bus") ?? false, ferryd?.log ?? "")
    }
}
