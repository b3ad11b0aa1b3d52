import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The running batch as one job in the desktop shell: a python-dbusmock stand-in for
/// Plasma's `org.kde.JobViewServer` records what ferryd tells it.
final class JobViewTests: DesktopBusTestCase {
    static let viewPath = "/JobViewServer/JobView_1"

    /// The job view server, and its one view object (the path `requestView` hands out).
    private func startJobViewServer() async throws -> (server: MockService, view: MockService) {
        let name = "org.kde.JobViewServer"
        let server = try await MockService.start([name, "/JobViewServer", name], name: name, path: "/JobViewServer",
                                                 environment: environment(), bus: client.bus)
        mocks.append(server)
        extraLogs.append { server.process.log }
        try await server.mock("AddMethod", [.string(name), .string("requestView"), .string("ssi"), .string("o"),
                                            .string("ret = dbus.ObjectPath('\(Self.viewPath)')")])
        let methods: [(String, String, String)] = [
            ("terminate", "s", ""), ("setSuspended", "b", ""), ("setTotalAmount", "ts", ""),
            ("setProcessedAmount", "ts", ""), ("setPercent", "u", ""), ("setSpeed", "t", ""),
            ("setInfoMessage", "s", ""), ("setDescriptionField", "uss", "b"), ("clearDescriptionField", "u", ""),
            ("setDestUrl", "v", ""),
        ]
        let spec: [DBusValue] = methods.map { m in
            .structure([.string(m.0), .string(m.1), .string(m.2), .string(m.2 == "b" ? "ret = True" : "")])
        }
        try await server.mock("AddObject", [.string(Self.viewPath), .string("org.kde.JobViewV2"), .vardict([:]),
                                            .array(element: "(ssss)", spec)])
        return (server, server.object(at: Self.viewPath))
    }

    /// (amount, unit) of each call of `method`, oldest first.
    private func amounts(_ view: MockService, _ method: String, unit: String) async throws -> [UInt64] {
        try await view.calls(method).filter { $0.count == 2 && $0[1].string == unit }.compactMap { $0[0].uint64 }
    }

    func testABatchIsOneJobWithItsBytesAndFilesUpdatedAtMostTwiceASecond() async throws {
        let (jobs, view) = try await startJobViewServer()
        try await startFerryd()
        let size = 1 << 20
        for i in 1...3 { serve("/part\(i).bin", size: size, seed: UInt64(i)) }
        // Slow enough for the job to be seen moving: 3 MiB at 1 MiB/s.
        try await client.setManagerProperty("SpeedLimit", .uint64(1 << 20))
        let session = try await client.openSession("com.example.Shell")

        let started = Date()
        try await batch(session, (1...3).map { server.url("/part\($0).bin") })
        let seconds = Date().timeIntervalSince(started)
        let ended = await eventually(10) { ((try? await view.calls("terminate")) ?? []).count == 1 }
        XCTAssertTrue(ended, "the job ends with the batch")

        let requests = try await jobs.calls("requestView")
        XCTAssertEqual(requests.count, 1, "one job for the batch")
        XCTAssertEqual(requests.first?.compactMap(\.string), ["Ferry", "org.ferry.Ferry"])
        XCTAssertEqual(requests.first?.last?.int32, 1, "Killable: the shell shows Cancel")

        let total = UInt64(3 * size)
        let processed = try await amounts(view, "setProcessedAmount", unit: "bytes")
        let totals = try await amounts(view, "setTotalAmount", unit: "bytes")
        let files = try await amounts(view, "setTotalAmount", unit: "files")
        let filesDone = try await amounts(view, "setProcessedAmount", unit: "files")
        let percents = try await view.calls("setPercent").compactMap { $0.first?.uint32 }
        let terminations = try await view.calls("terminate")
        XCTAssertEqual(totals.last, total)
        XCTAssertEqual(processed.last, total, "the job ends at every byte")
        XCTAssertEqual(processed, processed.sorted(), "bytes only grow")
        XCTAssertTrue(processed.contains { $0 > 0 && $0 < total }, "the job moved while the batch ran: \(processed)")
        XCTAssertEqual(files.last, 3)
        XCTAssertEqual(filesDone.last, 3)
        XCTAssertEqual(percents.last, 100)
        // At most one update per 500 ms while it ran, plus the first and the last.
        let most = Int((seconds / 0.5).rounded(.up)) + 2
        XCTAssertLessThanOrEqual(processed.count, most, "\(processed.count) updates in \(seconds) s")
        XCTAssertEqual(terminations.first?.first?.string, "", "no failure to report")
    }

    func testCancelInTheShellCancelsTheBatch() async throws {
        let (_, view) = try await startJobViewServer()
        try await startFerryd()
        serve("/slow1.bin", size: 4 << 20)
        serve("/slow2.bin", size: 4 << 20, seed: 2)
        try await client.setManagerProperty("SpeedLimit", .uint64(256 << 10))
        let session = try await client.openSession("com.example.ShellCancel")
        let a = try await session.download(server.url("/slow1.bin"))
        let b = try await session.download(server.url("/slow2.bin"))
        let shown = await eventually(15) {
            ((try? await self.amounts(view, "setProcessedAmount", unit: "bytes")) ?? []).contains { $0 > 0 }
        }
        XCTAssertTrue(shown, "the job shows the batch moving")

        try await view.emit("org.kde.JobViewV2", "cancelRequested", signature: "", [])
        for t in [a, b] {
            let cancelled = await eventually(10) { (try? await t.info().state) == "cancelled" }
            XCTAssertTrue(cancelled, "\(t.path) is cancelled")
        }
        let ended = await eventually(10) { ((try? await view.calls("terminate")) ?? []).count == 1 }
        XCTAssertTrue(ended, "the job ends with the cancelled batch")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? []
        XCTAssertEqual(left.filter { $0.hasSuffix(".part") }, [], "nothing of the cancelled downloads is left")
    }

    func testWithoutAJobViewServerTheBatchGoesOnAsBefore() async throws {
        try await startFerryd()
        serve("/plain.bin", size: 100_000)
        let session = try await client.openSession("com.example.NoShell")
        let transfers = try await batch(session, [server.url("/plain.bin")])
        let info = try await transfers[0].info()
        XCTAssertEqual(info.state, "completed")
        let log = try XCTUnwrap(ferryd).log
        let said = log.split(separator: "\n").filter { $0.contains("job view") }
        XCTAssertEqual(said.filter { !$0.contains(" debug ") }, [], "the missing job view is no news but for debugging")
    }
}
