import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Sandboxed callers, as Flatpak makes them: the client talks to ferryd through a real
/// `xdg-dbus-proxy --filter --talk=org.ferry.Ferry1`, and the proxy runs in a
/// bubblewrap mount namespace whose root holds a `.flatpak-info` naming the app — so
/// ferryd finds the app id exactly where it finds a real Flatpak's, in
/// `/proc/PID/root/.flatpak-info` of the connection's process. Nothing in ferryd is
/// switched for the test.
final class SandboxedCallerTests: FerryTestCase {
    let appID = "com.example.Evil"
    let ok = "org.ferry.Ferry1.Error."

    /// A FerryClient connected through a proxy that runs as the Flatpak app `appID`.
    /// The harness's `signals` hears its sessions' (private) signals from then on.
    func sandboxedClient(_ appID: String) async throws -> BusClient {
        try await watchPrivateSignals()
        return try await proxiedClient(appID)
    }

    /// `sandboxedClient` without the harness watching.
    func proxiedClient(_ appID: String) async throws -> BusClient {
        guard let bwrap = findExecutable("bwrap"), let proxy = findExecutable("xdg-dbus-proxy") else {
            throw XCTSkip("bwrap and xdg-dbus-proxy are needed (Debian packages bubblewrap, xdg-dbus-proxy)")
        }
        let dir = home + "/sandbox-\(appID)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let info = dir + "/flatpak-info"
        try "[Application]\nname=\(appID)\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\ninstance-id=1\n"
            .write(toFile: info, atomically: false, encoding: .utf8)
        let socket = dir + "/bus"
        // A fresh root (tmpfs) with the system read-only, /tmp (the buses' sockets) and
        // the fake .flatpak-info at its top, as Flatpak's own proxy sandbox has.
        var arguments = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", "--bind", "/tmp", "/tmp",
                         "--proc", "/proc", "--dev", "/dev", "--ro-bind", info, "/.flatpak-info"]
        for link in ["bin", "sbin", "lib", "lib64"] {
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/" + link) {
                arguments += ["--symlink", target, "/" + link]
            }
        }
        arguments += ["--", proxy, bus.address, socket, "--filter", "--talk=\(BusClient.busName)"]
        let p = try ChildProcess(executable: bwrap, arguments: arguments)
        cleanups.append {
            // The proxy first (bwrap does not pass SIGTERM on), then bwrap. Not
            // --die-with-parent: that follows the spawning thread, which is gone at once.
            for child in childProcesses(of: p.pid).reversed() { _ = Glibc.kill(child, SIGTERM) }
            p.kill(SIGTERM)
            if p.waitForExit(timeout: 5) == nil { p.kill(SIGKILL); _ = p.waitForExit(timeout: 5) }
        }
        extraLogs.append { "----- xdg-dbus-proxy for \(appID) -----\n\(p.log)" }
        try await waitUntilAsync("the proxy's socket at \(socket)") { FileManager.default.fileExists(atPath: socket) || !p.isRunning }
        guard p.isRunning else { throw XCTSkip("bwrap/xdg-dbus-proxy could not start here: \(p.log)") }
        // The socket's name exists from bind(2); connections are refused until the
        // proxy's listen(2) a moment later (on a loaded machine, long enough to hit).
        let deadline = Date().addingTimeInterval(10)
        while true {
            do {
                let client = try BusClient(address: "unix:path=\(socket)")
                cleanups.append { client.close() }
                return client
            } catch let error as BusError where error.name == "org.freedesktop.DBus.Error.NoServer" && p.isRunning && Date() < deadline {
                try await Task.sleep(nanoseconds: 10_000_000)
            }
        }
    }

    /// The app's own directory, `~/.var/app/APPID`.
    func appDirectory(_ appID: String) throws -> String {
        let dir = home + "/.var/app/\(appID)"
        try FileManager.default.createDirectory(atPath: dir + "/data", withIntermediateDirectories: true)
        return dir
    }

    func call(_ client: BusClient, _ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.bus.call(destination: BusClient.busName, path: path, interface: interface, method: method, arguments: args, timeout: 10)
    }

    func managedPaths(_ client: BusClient) async throws -> Set<String> {
        let reply = try await call(client, BusClient.managerPath, StandardNames.objectManager, "GetManagedObjects")
        guard case .dictionary(_, _, let entries)? = reply.first else { return [] }
        return Set(entries.compactMap { entry -> String? in
            if case .objectPath(let p) = entry.key { return p }
            return nil
        })
    }

    /// Another application's sessions and transfers do not exist for a sandboxed
    /// caller: every method, property and listing answers as for a missing object,
    /// manager-wide actions touch only its own, its identifier cannot be taken over,
    /// and the settings of ferryd are not its to change. Nothing of the victim changes.
    func testSandboxedAppCannotSeeOrTouchAnotherAppsWork() async throws {
        serve("/victim.bin", size: 100_000)
        let victim = try await session("com.example.Victim", ["headers": .dictionary(key: "s", value: "s", [.init(.string("Authorization"), .string("Bearer victim-token"))])])
        let vt = try await victim.download(server.url("/victim.bin"), options: ["destination": .string(work + "/victim.bin"), "start": .boolean(false)])
        try await waitForState(vt, "paused")

        let evil = try await sandboxedClient(appID)
        let transferIface = BusClient.transferInterface, sessionIface = BusClient.sessionInterface
        let noTransfer = ok + "NoSuchTransfer", noSession = ok + "NoSuchSession"

        // Listing: nothing of the victim.
        let sessions = try await evil.listSessions()
        XCTAssertEqual(sessions.map(\.path), [])
        let transfers = try await evil.listTransfers()
        XCTAssertEqual(transfers.map(\.path), [])
        let managed = try await managedPaths(evil)
        XCTAssertEqual(managed, [])
        let columns = try await call(evil, BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties", [.stringArray(["Url"])])
        XCTAssertEqual(columns.first?.arrayElements?.count, 0, "ListTransferProperties lists none of the victim's transfers")
        XCTAssertEqual(columns.dropFirst().first?.dictionaryEntries?.first?.1.arrayElements?.count, 0, "nor their URLs")
        let everything = try await evil.listing()
        XCTAssertEqual(everything.transfers.map(\.path), [])

        // Every way into the victim's transfer, and a transfer that never existed, answer alike.
        for path in [vt.path, BusClient.managerPath + "/transfer/999"] {
            await assertBusError(noTransfer, "SetUrl on \(path)") { try await self.call(evil, path, transferIface, "SetUrl", [.string("http://127.0.0.1:9/evil")]) }
            for method in ["Resume", "Pause", "Cancel", "Remove"] {
                await assertBusError(noTransfer, "\(method) on \(path)") { try await self.call(evil, path, transferIface, method) }
            }
            await assertBusError(noTransfer, "Get on \(path)") { try await self.call(evil, path, StandardNames.properties, "Get", [.string(transferIface), .string("Url")]) }
            await assertBusError(noTransfer, "GetAll on \(path)") { try await self.call(evil, path, StandardNames.properties, "GetAll", [.string(transferIface)]) }
            await assertBusError(noTransfer, "Set on \(path)") { try await self.call(evil, path, StandardNames.properties, "Set", [.string(transferIface), .string("Priority"), .variant(.int32(1))]) }
            await assertBusError(noTransfer, "Introspect on \(path)") { try await self.call(evil, path, StandardNames.introspectable, "Introspect") }
        }
        // And into the victim's session.
        for (method, args) in [("Download", [DBusValue.string(server.url("/victim.bin")), .vardict([:])]), ("PendingEvents", []),
                               ("AcknowledgeEvents", [.uint64(UInt64.max)]), ("Close", [.boolean(true)]), ("CancelAll", []), ("ListTransfers", [])] {
            await assertBusError(noSession, "\(method) on the victim's session") { try await self.call(evil, victim.path, sessionIface, method, args) }
        }
        await assertBusError(noSession, "Get Configuration") { try await self.call(evil, victim.path, StandardNames.properties, "Get", [.string(sessionIface), .string("Configuration")]) }

        // Its identifier is taken: a clear refusal, and the victim's proxy stays as it was.
        await assertBusError(ok + "AccessDenied", "re-open the victim's session") {
            try await evil.openSession("com.example.Victim", configuration: ["proxy": .string("http://127.0.0.1:9")])
        }
        let config = try await victim.properties()["Configuration"]?.vardict
        XCTAssertEqual(config?["proxy"]?.string, "", "the victim's session keeps its proxy")

        // Manager-wide actions act on its own (none), and ferryd's settings are not its to change.
        try await evil.resumeAll()
        try await evil.cancelAll()
        try await evil.pauseAll()
        await assertBusError(ok + "AccessDenied", "set MaxConcurrentTransfers") { try await evil.setManagerProperty("MaxConcurrentTransfers", .uint32(0)) }
        // The schedule may be read, not set.
        await assertBusError(ok + "AccessDenied", "set Schedule") {
            try await evil.setManagerProperty("Schedule", .array(element: "(sssta{sv})", [
                .structure([.string("*"), .string("00:00"), .string("24:00"), .uint64(1), .vardict([:])])]))
        }
        let readSchedule = try await evil.managerProperties()["Schedule"]?.arrayElements
        XCTAssertEqual(readSchedule?.count, 0, "a sandboxed caller reads the schedule")

        let after = try await vt.info()
        XCTAssertEqual(after.state, "paused", "the victim's transfer was not resumed or cancelled")
        XCTAssertEqual(after.url, server.url("/victim.bin"))
        XCTAssertEqual(server.requests(for: "/victim.bin").count, 0, "nothing was fetched for the victim")
        let victimSessions = try await client.listSessions()
        XCTAssertEqual(victimSessions.map(\.path), [victim.path], "the victim's session is still open")
        let value1 = try await managerProperty("MaxConcurrentTransfers")?.uint32
        XCTAssertEqual(value1, 6)
        await assertDaemonAlive()
    }

    /// Dedupe (v1.2) merges one caller's downloads only: the unconfined user's two
    /// sessions (cookies off, so no jar sets them apart) share one GET, while a
    /// sandboxed app asking for the same URL meanwhile gets a GET of its own.
    func testDedupeNeverMergesAnotherCallersDownload() async throws {
        let appDir = try appDirectory(appID)
        let body = serve("/shared.bin", size: 64 * 1024, seed: 11)
        server.set(.holdAnswers, on: "/shared.bin")
        let noCookies: [String: DBusValue] = ["cookies": .boolean(false)]
        let mine = try await session("com.example.Mine", noCookies)
        let first = try await mine.download(server.url("/shared.bin"), options: ["destination": .string(downloads + "/mine.bin")])
        try await waitUntilAsync("the first GET, its answer held") { server.isHoldingAnswer(for: "/shared.bin") }
        let again = try await session("com.example.Again", noCookies)
        let second = try await again.download(server.url("/shared.bin"), options: ["destination": .string(downloads + "/again.bin")])
        let evil = try await sandboxedClient(appID)
        let theirs = try await evil.openSession("\(appID).Dedupe", configuration: noCookies)
        let third = try await theirs.download(server.url("/shared.bin"), options: ["destination": .string(appDir + "/data/theirs.bin")])
        try await waitUntilAsync("the app's own GET") { server.requests(for: "/shared.bin").count >= 2 }
        server.release("/shared.bin")
        for t in [first, second, third] {
            let info = try await finish(t, timeout: 30)
            XCTAssertEqual(info.state, "completed", info.errorMessage)
        }
        XCTAssertEqual(server.requests(for: "/shared.bin").count, 2, "one GET for the user's two downloads, one for the app's")
        assertFile(downloads + "/mine.bin", equals: body)
        assertFile(downloads + "/again.bin", equals: body)
        assertFile(appDir + "/data/theirs.bin", equals: body)
    }

    /// A sandboxed app names files only inside `~/.var/app/APPID/`: $HOME, autostart,
    /// `..` and symlink escapes are refused before anything is written, and Upload
    /// answers alike for files that exist and files that do not.
    func testSandboxedAppWritesOnlyInsideItsOwnDirectory() async throws {
        let body = serve("/payload.bin", size: 20_000)
        let appDir = try appDirectory(appID)
        let bashrc = home + "/.bashrc"
        try "# mine\n".write(toFile: bashrc, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: appDir + "/home-link", withDestinationPath: home)

        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Downloads")
        let url = server.url("/payload.bin")
        let invalid = ok + "InvalidDestination"
        for (what, destination) in [("$HOME/.bashrc", bashrc),
                                    ("autostart", home + "/.config/autostart/x.desktop"),
                                    ("authorized_keys", home + "/.ssh/authorized_keys"),
                                    ("a .. escape", appDir + "/data/../../../../.bashrc"),
                                    ("a symlink escape", appDir + "/home-link/.bashrc"),
                                    ("the user's downloads", downloads!)] {
            await assertBusError(invalid, what) {
                try await s.download(url, options: ["destination": .string(destination), "overwrite": .boolean(true)])
            }
        }
        await assertBusError(invalid, "no destination: the user's download folder") { try await s.download(url) }
        await assertBusError(invalid, "a session directory outside") {
            try await evil.openSession("\(self.appID).Other", configuration: ["directory": .string(self.home)])
        }
        await assertBusError(ok + "AccessDenied", "waking another application") {
            try await evil.openSession("\(self.appID).Wake", configuration: ["application-id": .string("org.gnome.Nautilus")])
        }
        // Upload: the same answer whether the file exists or not.
        let existing = await assertBusError(ok + "AccessDenied", "Upload of an existing file") {
            try await self.call(evil, s.path, BusClient.sessionInterface, "Upload", [.string(url), .string(bashrc), .vardict([:])])
        }
        let missing = await assertBusError(ok + "AccessDenied", "Upload of a missing file") {
            try await self.call(evil, s.path, BusClient.sessionInterface, "Upload", [.string(url), .string(self.home + "/no-such-file"), .vardict([:])])
        }
        XCTAssertEqual(existing?.message, missing?.message, "the answer says nothing about which file exists")
        // Resume data in Ferry 0.1's readable format can be written by anyone, naming any
        // file: a sandboxed app may only pass the sealed data Pause hands out.
        let readable = Array("FRD1".utf8) + Array("{\"destination\":\"\(appDir)/data/x.bin\"}".utf8) + [UInt8](repeating: 0, count: 32)
        let refusal = await assertBusError(ok + "InvalidResumeData", "readable resume data from a sandboxed app") {
            try await self.call(evil, s.path, BusClient.sessionInterface, "ResumeDownload", [.bytes(readable), .vardict([:])])
        }
        XCTAssertTrue(refusal?.message.contains("sandboxed") ?? false, refusal?.message ?? "")

        XCTAssertEqual(try String(contentsOfFile: bashrc, encoding: .utf8), "# mine\n")
        XCTAssertFalse(exists(home + "/.config/autostart/x.desktop"))
        XCTAssertFalse(exists(home + "/.ssh/authorized_keys"))
        let value2 = try await client.listTransfers().count
        XCTAssertEqual(value2, 0, "no transfer was made")

        // Inside its own directory it works as ever.
        let t = try await s.download(url, options: ["destination": .string(appDir + "/data/payload.bin")])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(appDir + "/data/payload.bin", equals: body)
        XCTAssertEqual(try originURL(of: appDir + "/data/payload.bin"), url, "its origin, as any other download's")
        // Again: a unique name beside it; with overwrite, in its place.
        let second = try await finish(try await s.download(url, options: ["destination": .string(appDir + "/data/payload.bin")]))
        XCTAssertEqual(second.destination, appDir + "/data/payload (1).bin", second.errorMessage)
        assertFile(appDir + "/data/payload (1).bin", equals: body)
        try "old\n".write(toFile: appDir + "/data/payload.bin", atomically: false, encoding: .utf8)
        let third = try await finish(try await s.download(url, options: ["destination": .string(appDir + "/data/payload.bin"),
                                                                        "overwrite": .boolean(true)]))
        XCTAssertEqual(third.destination, appDir + "/data/payload.bin", third.errorMessage)
        assertFile(appDir + "/data/payload.bin", equals: body)
        XCTAssertEqual(partFiles(in: appDir + "/data"), [])
    }

    /// Ownership is stored with the session: after a restart the app still has its
    /// session and transfers, another app still sees none of them, and an unconfined
    /// client sees everything.
    func testOwnershipSurvivesARestart() async throws {
        serve("/own.bin", size: 10_000)
        let appDir = try appDirectory(appID)
        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Keep", configuration: ["directory": .string(appDir + "/data")])
        let t = try await s.download(server.url("/own.bin"), options: ["start": .boolean(false)])
        let value3 = try await evil.listTransfers().map(\.path)
        XCTAssertEqual(value3, [t.path])

        try await stopFerryd()
        try await startFerryd()

        let again = try await sandboxedClient(appID)
        let value4 = try await again.listSessions().map(\.path)
        XCTAssertEqual(value4, [s.path])
        let value5 = try await again.listTransfers().map(\.path)
        XCTAssertEqual(value5, [t.path])
        let managed = try await managedPaths(again)
        XCTAssertEqual(managed, [s.path, t.path], "GetManagedObjects lists exactly its own objects")
        let listed = try await again.listing()
        XCTAssertEqual(listed.transfers.map(\.path), [t.path], "ListTransferProperties lists exactly its own transfers")
        XCTAssertEqual(listed.sessions.map(\.path), [s.path])
        let reopened = try await again.openSession("\(appID).Keep")
        XCTAssertEqual(reopened.path, s.path, "the app re-opens its own session")

        let other = try await sandboxedClient("org.example.Other")
        let value6 = try await other.listTransfers().map(\.path)
        XCTAssertEqual(value6, [])
        await assertBusError(ok + "AccessDenied", "another app re-opening it") { try await other.openSession("\(self.appID).Keep") }
        // Only names of its own: a name the CLI (or any unconfined client) opens later
        // would join the app's session (black-box hunt g, finding 4).
        await assertBusError(ok + "AccessDenied", "the CLI's session name") { try await other.openSession("org.ferry.cli") }
        await assertBusError(ok + "AccessDenied", "a name that only starts like the app id") {
            try await again.openSession("\(self.appID)Evil.Session")
        }
        // Not even by an app whose id is the CLI's name.
        let namesake = try await sandboxedClient("org.ferry.cli")
        await assertBusError(ok + "AccessDenied", "the CLI's session name, by an app of that id") {
            try await namesake.openSession("org.ferry.cli")
        }
        let cliSessions = try await client.listSessions()
        XCTAssertEqual(cliSessions.count, 1, "no session was made by the refused calls")
        await assertBusError(ok + "NoSuchTransfer", "another app resuming it") {
            try await self.call(other, t.path, BusClient.transferInterface, "Resume")
        }

        let value7 = try await client.listTransfers().map(\.path)
        XCTAssertEqual(value7, [t.path], "an unconfined client sees everything")
        try await client.transfer(id: UInt64(t.path.split(separator: "/").last!)!).resume()
        let info = try await finish(client.transfer(id: UInt64(t.path.split(separator: "/").last!)!))
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertTrue(exists(appDir + "/data/own.bin"))
    }

    /// An upload queued before a restart of ferryd reopens its source by path: with the
    /// source's folder swapped for a link meanwhile, the file it now leads to (the
    /// user's, of the same name) is not sent, and the upload fails with `Disk`.
    func testAnUploadReopenedAfterARestartSendsNothingFromOutside() async throws {
        server.set(.acceptUploads(), on: "/up")
        let (folder, victim) = try folders("outbox", victim: "Pictures")
        try Data(repeating: 1, count: 1000).write(to: URL(fileURLWithPath: folder + "/photo.jpg"))
        try Data(repeating: 2, count: 1000).write(to: URL(fileURLWithPath: victim + "/photo.jpg"))

        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Outbox")
        let queued = try await s.upload(server.url("/up"), file: folder + "/photo.jpg", options: ["start": .boolean(false)])
        try await killAndRestart()
        try swapForALink(folder, to: victim)

        let again = try await sandboxedClient(appID)
        let up = FerryTransfer(client: again, path: queued.path)
        let mark = signals.all.count
        try await up.resume()
        try await waitForState(up, ["failed", "completed"], since: mark, timeout: 20)
        let info = try await up.info()
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, ok + "Disk", info.errorMessage)
        XCTAssertEqual(server.uploads(for: "/up").count, 0, "nothing was sent")
    }

    /// Each waiting upload holds its file open, within a budget (here 64: the open-file
    /// limit, 320, less 256). One application may hold a quarter of it: past that its
    /// `Upload` is refused with `LimitExceeded`, and the user's uploads still go.
    func testOneApplicationCannotTakeEveryUploadsRoom() async throws {
        try await startWithABudgetOf64()
        server.set(.acceptUploads(), on: "/many")
        let photo = try appDirectory(appID) + "/data/photo.jpg"
        try Data(repeating: 1, count: 100).write(to: URL(fileURLWithPath: photo))
        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Many")
        let (queued, refusal) = try await queueUploads(s, of: photo, upTo: 70) // more than the whole budget
        XCTAssertEqual(queued.count, 64 / 4, "a quarter of the budget")
        XCTAssertEqual(refusal?.name, ok + "LimitExceeded", refusal?.message ?? "no refusal")

        let mine = work + "/mine.jpg"
        try Data(repeating: 2, count: 100).write(to: URL(fileURLWithPath: mine))
        let user = try await client.openSession("com.example.User")
        let up = try await user.upload(server.url("/many"), file: mine)
        let info = try await finish(up)
        XCTAssertEqual(info.state, "completed", info.errorMessage)

        // A restart closes the queued uploads' files, to be opened again when they
        // start: those count too, so the app gains no room by restarts.
        ferryd?.kill(SIGKILL)
        _ = ferryd?.waitForExit(timeout: 10)
        try await startWithABudgetOf64()
        let (more, _) = try await queueUploads(s, of: photo, upTo: 64 / 4)
        XCTAssertEqual(more.count, 64 / 4, "a restart's queued uploads hold no file until they start")
        let mark = signals.all.count
        try await queued[0].resume()
        try await waitForState(queued[0], ["failed", "completed"], since: mark, timeout: 20)
        let reopened = try await queued[0].info()
        XCTAssertEqual(reopened.state, "failed", "its file is not opened beyond the app's share")
        XCTAssertEqual(reopened.errorName, ok + "Disk", reopened.errorMessage)
    }

    /// ferryd with an open-file limit of 320: 64 for uploads' files.
    func startWithABudgetOf64() async throws {
        try await stopFerryd()
        try await startFerryd(wrapper: ["/usr/bin/prlimit", "--nofile=100:320", "--"])
    }

    /// Queues paused uploads of `file` until `count` or a refusal.
    func queueUploads(_ s: BusSession, of file: String, upTo count: Int) async throws -> ([FerryTransfer], BusError?) {
        var queued: [FerryTransfer] = []
        for _ in 0..<count {
            do {
                queued.append(try await s.upload(server.url("/many"), file: file, options: ["start": .boolean(false)]))
            } catch let e as BusError {
                return (queued, e)
            }
        }
        return (queued, nil)
    }

    /// Each application's sessions count against its own cap: one app holding the most
    /// it may locks neither another app nor the user's own clients out (black-box hunt
    /// g, finding 5).
    func testEachApplicationHasItsOwnSessionCap() async throws {
        try await stopFerryd()
        try await startFerryd(["--max-sessions-per-client", "2"])
        let greedy = try await sandboxedClient(appID)
        _ = try await greedy.openSession("\(appID).A")
        _ = try await greedy.openSession("\(appID).B")
        await assertBusError(ok + "LimitExceeded", "the app's third session") { try await greedy.openSession("\(self.appID).C") }
        let other = try await sandboxedClient("org.example.Other")
        _ = try await other.openSession("org.example.Other.A")
        _ = try await client.openSession("com.example.User.A")
        _ = try await client.openSession("com.example.User.B")
        await assertBusError(ok + "LimitExceeded", "the user's third session") { try await self.client.openSession("com.example.User.C") }
        let appsSession = try await client.openSession("\(appID).A")
        XCTAssertFalse(appsSession.path.isEmpty, "re-opening an existing session is never refused, an app's included")
    }
}
