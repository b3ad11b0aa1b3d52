import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// ferry get of many URLs: one batch, also on a bus with the default reply limit.
extension CLIScriptingTests {
    /// `ferry get` with many URLs is one batch: its transfers are queued together
    /// (pipelined), so the first to finish do not end the batch, and it ends in one
    /// AllFinished; `--wait` follows each from its creation to its end.
    func testGetOfManyURLsIsOneBatch() async throws {
        var bodies: [[UInt8]] = []
        let urls = (0..<40).map { i -> String in
            bodies.append(serve("/batch/\(i).bin", size: 3000, seed: UInt64(i + 10)))
            return server.url("/batch/\(i).bin")
        }
        let mark = signals.mark
        let r = try ferry(["get"] + urls + ["-d", work + "/batch", "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        try await signals.wait("the manager's AllFinished") { s in
            s.dropFirst(mark).contains { $0.member == "AllFinished" && $0.path == BusClient.managerPath }
        }
        let seen = Array(signals.all.dropFirst(mark))
        let added = seen.indices.filter { seen[$0].member == "InterfacesAdded" && seen[$0].args.first?.string?.contains("/transfer/") == true }
        XCTAssertEqual(added.count, 40)
        XCTAssertEqual(seen.filter { $0.member == "AllFinished" && $0.path == BusClient.managerPath }.count, 1, "one batch")
        // Piped, each transfer has its first line (queued, on stderr with the progress)
        // and its last (completed, with its file, on stdout).
        let lines = r.stdout.split(separator: "\n").map(String.init)
        let progress = r.stderr.split(separator: "\n").map(String.init)
        for i in 0..<40 {
            let path = work + "/batch/\(i).bin"
            XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: path)), Data(bodies[i]))
            guard let done = lines.first(where: { $0.hasSuffix(" completed \(path)") }),
                  let id = done.split(separator: " ").first else { return XCTFail("no completed line for \(path): \(r.stdout)") }
            XCTAssertTrue(progress.contains { $0.hasPrefix("\(id) queued ") }, "\(id)'s first line: \(r.stderr)")
        }
        XCTAssertFalse(lines.contains { $0.contains(" queued ") }, "no progress on stdout")
        // Each file took milliseconds: no progress line ("7 100% 2.9 KiB/2.9 KiB") for
        // any, only their state lines (the first a second after a transfer's data began).
        XCTAssertFalse(progress.contains { $0.split(separator: " ").dropFirst().first?.hasSuffix("%") == true },
                       "no progress lines for files that take less than a second: \(r.stderr)")
    }

    /// On a bus that keeps dbus-daemon's own limit of 128 calls awaiting replies per
    /// connection, `ferry get` of 300 URLs still gets every file (it pipelines its
    /// calls in a window below the limit).
    func testGetOfManyURLsWorksOnABusWithTheDefaultReplyLimit() async throws {
        let urls = (0..<300).map { i -> String in
            serve("/many/\(i).bin", size: 512, seed: UInt64(i + 1))
            return server.url("/many/\(i).bin")
        }
        let small = try PrivateBus(maxRepliesPerConnection: 128)
        defer { small.stop() }
        var env = environment()
        env["DBUS_SESSION_BUS_ADDRESS"] = small.address
        env["XDG_STATE_HOME"] = home + "/small-bus-state"
        let daemon = try Ferryd.launch(ferrydPath, arguments: ["--no-idle-exit"], environment: env)
        defer { daemon.terminate(); _ = daemon.waitForExit(timeout: 10) }
        let watcher = try BusClient(address: small.address)
        defer { watcher.close() }
        try await Ferryd.waitForName(daemon, on: watcher.bus)

        let dest = work + "/many"
        let r = try ferry(["get"] + urls + ["-d", dest, "--wait", "-q"], timeout: 120,
                          extraEnv: ["DBUS_SESSION_BUS_ADDRESS": small.address, "XDG_STATE_HOME": home + "/small-bus-state"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dest).filter { !$0.hasSuffix(".part") }.count, 300)
    }

    /// URLs among `get`'s options and after `--` all arrive, in the order given, and an
    /// option's value that is a URL stays that option's (the CLI hands runs of URLs to
    /// its argument parser joined, `PackedPositionals`, and splits them again).
    func testGetTakesURLsAmongItsOptionsInOrder() async throws {
        var bodies: [[UInt8]] = []
        let urls = (0..<8).map { i -> String in
            bodies.append(serve("/mixed/\(i).bin", size: 700, seed: UInt64(i + 50)))
            return server.url("/mixed/\(i).bin")
        }
        let dest = work + "/mixed"
        let described = server.url("/described.bin"), noted = server.url("/noted.bin")
        let r = try ferry(["get", urls[0], urls[1], "-d", dest, urls[2], urls[3], "--description", described, urls[4],
                           "-H", "X-Note: " + noted, urls[5], "--wait", "--", urls[6], urls[7]])
        XCTAssertEqual(r.status, 0, r.stderr)
        // Piped: each completed transfer's line, "ID completed PATH"; ids grow in the order made.
        var pathsByID: [UInt64: String] = [:]
        for line in r.stdout.split(separator: "\n") where line.contains(" completed ") {
            let parts = line.split(separator: " ", maxSplits: 2)
            if parts.count == 3, let id = UInt64(parts[0]) { pathsByID[id] = String(parts[2]) }
        }
        XCTAssertEqual(pathsByID.keys.sorted().map { pathsByID[$0]! }, (0..<8).map { dest + "/\($0).bin" }, r.stdout)
        for i in 0..<8 {
            XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: dest + "/\(i).bin")), Data(bodies[i]))
            let asked = server.requests(for: "/mixed/\(i).bin")
            XCTAssertEqual(asked.count, 1)
            XCTAssertEqual(asked.first?.headers.first { $0.name.lowercased() == "x-note" }?.value, noted)
        }
        // The options' values were not downloaded, and took effect.
        XCTAssertTrue(server.requests(for: "/described.bin").isEmpty)
        XCTAssertTrue(server.requests(for: "/noted.bin").isEmpty)
        for t in try await client.listTransfers() {
            let info = try await t.info()
            XCTAssertEqual(info.description, described, info.url)
        }
    }

    /// Short options in one cluster take the values after it in turn (`-di DIR FILE`):
    /// those stay theirs, and the URLs after them are downloaded too.
    func testGetTakesTheValuesOfAClusterOfShortOptionsAndTheURLsAfter() async throws {
        let bodies = (0..<3).map { serve("/cluster/\($0).bin", size: 500, seed: UInt64($0 + 70)) }
        let list = work + "/list.txt"
        try (server.url("/cluster/0.bin") + "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let dest = work + "/cluster"
        let r = try ferry(["get", "-di", dest, list, server.url("/cluster/1.bin"), server.url("/cluster/2.bin"), "--wait"])
        XCTAssertEqual(r.status, 0, r.stderr)
        for i in 0..<3 {
            XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: dest + "/\(i).bin")), Data(bodies[i]), "file \(i): \(r.stdout)")
        }
    }
}
