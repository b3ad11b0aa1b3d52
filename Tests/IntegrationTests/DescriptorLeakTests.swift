import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// File descriptors a client sends are ferryd's to close: a hostile client sending
/// them in refused calls must not run ferryd out of descriptors.
final class DescriptorLeakTests: FerryTestCase {
    /// ferryd's open file descriptors (from /proc).
    func openDescriptors() -> Int {
        guard let pid = ferryd?.pid else { return -1 }
        return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []).count
    }

    /// Descriptors sent inside refused calls (in `v` and `a{sv}` arguments, property
    /// writes and wrong signatures) are all closed: ferryd's count stays where it was.
    func testDescriptorsInRefusedCallsAreClosed() async throws {
        XCTAssertTrue(client.bus.canPassUnixFDs)
        let s = try await session()
        serve("/fd.bin", size: 10)
        let t = try await s.download(server.url("/fd.bin"), options: ["start": .boolean(false), "destination": .string(work + "/fd.bin")])
        guard let devNull = Optional(open("/dev/null", O_RDONLY)), devNull >= 0 else { return XCTFail("cannot open /dev/null") }
        defer { close(devNull) }
        // Settle: the first calls open what ferryd keeps (sockets, the database…).
        _ = try await call(BusClient.managerPath, StandardNames.peer, "Ping")
        let before = openDescriptors()
        let fd = DBusValue.unixFD(devNull)
        let calls: [(String, String, String, [DBusValue])] = [
            (s.path, BusClient.sessionInterface, "Download", [.string(server.url("/fd.bin")), .vardict(["bogus": fd])]),
            (s.path, BusClient.sessionInterface, "Download", [.string(server.url("/fd.bin")), .vardict(["destination": fd])]),
            (s.path, BusClient.sessionInterface, "Download", [.string("ftp://x/"), .vardict(["headers": .vardict(["a": fd])])]),
            (BusClient.managerPath, BusClient.managerInterface, "OpenSession", [.string("com.example.Fd"), .vardict(["proxy": fd])]),
            (BusClient.managerPath, BusClient.managerInterface, "OpenSession", [.string("bad id"), .vardict(["x": .array(element: "h", [fd, fd])])]),
            (s.path, BusClient.sessionInterface, "ResumeDownload", [.bytes([1, 2, 3]), .vardict(["fd": fd])]),
            (s.path, BusClient.sessionInterface, "Upload", [.string(server.url("/up")), .string(work + "/none"), .vardict(["source": fd])]),
            (t.path, StandardNames.properties, "Set", [.string(BusClient.transferInterface), .string("Priority"), .variant(fd)]),
            (BusClient.managerPath, StandardNames.properties, "Set", [.string(BusClient.managerInterface), .string("Version"), .variant(fd)]),
            (t.path, BusClient.transferInterface, "SetUrl", [fd]),
        ]
        var refused = 0
        for round in 0..<60 {
            for (path, iface, method, args) in calls {
                do {
                    try await call(path, iface, method, args)
                    XCTFail("\(method)\(args) was accepted (round \(round))")
                } catch is BusError {
                    refused += 1
                }
            }
        }
        await assertDaemonAlive()
        let after = openDescriptors()
        print("fd leak check: \(refused) refused calls carrying descriptors; ferryd's open fds \(before) -> \(after)")
        XCTAssertEqual(refused, 60 * calls.count)
        XCTAssertLessThanOrEqual(after, before + 8, "ferryd kept the descriptors of refused calls (\(before) -> \(after))")
    }
}
