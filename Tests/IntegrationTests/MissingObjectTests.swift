import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The contract's error names where a generic one would do: calls on sessions and
/// transfers that do not exist, and a state store that cannot be written.
final class MissingObjectTests: FerryTestCase {
    static let prefix = "org.ferry.Ferry1.Error."

    /// Calls on session and transfer paths that never existed or are gone answer the
    /// contract's NoSuchSession / NoSuchTransfer, whatever the interface.
    func testMissingSessionsAndTransfersAnswerTheirNames() async throws {
        let s = try await session()
        serve("/gone.bin", size: 10)
        let t = try await s.download(server.url("/gone.bin"), options: ["start": .boolean(false), "destination": .string(work + "/gone.bin")])
        try await t.cancel()
        try await t.remove()
        let closed = try await session("com.example.Closed")
        try await closed.close(cancelTransfers: true)
        try await signals.wait("the closed session's object goes", timeout: 10) { sig in
            sig.contains { $0.member == "InterfacesRemoved" && $0.args.first?.string == closed.path }
        }
        let noSuchTransfer = Self.prefix + "NoSuchTransfer"
        let noSuchSession = Self.prefix + "NoSuchSession"
        for path in [BusClient.transferPathPrefix + "9999", t.path] {
            await assertBusError(noSuchTransfer, "Pause on \(path)") { try await self.call(path, BusClient.transferInterface, "Pause") }
            await assertBusError(noSuchTransfer, "Get on \(path)") {
                try await self.call(path, StandardNames.properties, "Get", [.string(BusClient.transferInterface), .string("State")])
            }
            await assertBusError(noSuchTransfer, "GetAll on \(path)") {
                try await self.call(path, StandardNames.properties, "GetAll", [.string(BusClient.transferInterface)])
            }
        }
        let neverSession = BusClient.managerPath + "/session/424242"
        for path in [neverSession, closed.path] {
            await assertBusError(noSuchSession, "Download on \(path)") {
                try await self.call(path, BusClient.sessionInterface, "Download", [.string(self.server.url("/gone.bin")), .vardict([:])])
            }
            await assertBusError(noSuchSession, "PendingEvents on \(path)") { try await self.call(path, BusClient.sessionInterface, "PendingEvents") }
        }
        // Elsewhere the standard error stays.
        await assertBusError(StandardErrors.unknownObject, "a path outside Ferry's objects") {
            try await self.call("/org/ferry/Elsewhere", BusClient.transferInterface, "Pause")
        }
    }

    /// A state store that cannot be written (here: a file size limit, as a full disk
    /// would do) refuses new transfers with the contract's Disk error.
    func testFullStateStoreAnswersDisk() async throws {
        try await stopFerryd()
        // The shell ignores SIGXFSZ (inherited by ferryd), so writes past the limit
        // fail with EFBIG instead of killing the process.
        let limitKiB = 768
        let script = "trap '' XFSZ; ulimit -f \(limitKiB * 2); exec \"$0\" --verbose --no-idle-exit"
        let (path, env) = (ferrydPath!, environment())
        let p = try withUnblockedSignals {
            try ChildProcess(executable: "/bin/sh", arguments: ["-c", script, path], environment: env)
        }
        ferryd = p
        try await Ferryd.waitForName(p, on: client.bus, timeout: 15)
        let s = try await session()
        let description = String(repeating: "d", count: 4096)
        var diskError: BusError?
        var accepted = 0
        for i in 0..<2_000 {
            do {
                _ = try await s.download(server.url("/full-\(i).bin"), options: [
                    "start": .boolean(false), "destination": .string(work + "/full-\(i).bin"), "description": .string(description),
                ])
                accepted += 1
            } catch let e as BusError {
                diskError = e
                break
            }
        }
        guard let e = diskError else { return XCTFail("the state store never filled up") }
        XCTAssertGreaterThan(accepted, 10, "transfers were stored until the store was full")
        XCTAssertEqual(e.name, Self.prefix + "Disk", e.message)
        print("full store: \(accepted) transfers stored, then \(e.name): \(e.message)")
        await assertDaemonAlive()
    }
}
