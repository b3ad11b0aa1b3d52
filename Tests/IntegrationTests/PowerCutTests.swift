import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Power cuts (issue 42, point 6): ferryd's state folder and download folder on
/// `PowerCutMount`, a LazyFS-style FUSE layer that loses every byte not yet synced.
/// A mixed batch is cut at a seeded random moment (ferryd SIGKILLed, then the layer
/// rolled back to what was synced), the machine comes back (remount, restart), and
/// what ferryd promised must hold: every acknowledged transfer is known, every
/// announced completion survives byte-exact and is not announced again, no final name
/// holds a partial or wrong file, no `name (1)` copy nor orphan `.part` is left, no id
/// or serial is reused.
///
/// `FERRY_POWERCUT_CUTS` (default 4) sets how many cuts, `FERRY_POWERCUT_SEED` repeats
/// a run, `FERRY_POWERCUT_TORN=1` makes every cut torn (`PowerCutMount.cut(tornSeed:)`:
/// a random half of the unsynced blocks stay; `=0` none, unset every other cut),
/// `FERRY_POWERCUT_STRICT=1` undoes names whose folder was not synced;
/// `FERRY_POWERCUT_SAME_BOOT=1` is the negative control of the torn cuts: ferryd is not
/// told that the machine restarted (`FERRY_BOOT_ID` stays), so it trusts its part files'
/// lengths, holes and all. `scripts/power-cut.sh` runs many.
final class PowerCutTests: FerryTestCase {
    /// A fresh power-cut layer below the test's HOME, taken away when the test ends.
    func makeMount(strictNames: Bool = false) throws -> PowerCutMount {
        do {
            let m = try PowerCutMount(in: URL(fileURLWithPath: home).appendingPathComponent("powercut"), strictNames: strictNames)
            cleanups.append { m.unmount() }
            extraLogs.append { "===== power-cut layer log =====\n" + m.log }
            return m
        } catch let e as PowerCutMount.Unavailable {
            throw XCTSkip(e.reason)
        }
    }

    /// Writes `bytes` to `path` (created or truncated), synced or not.
    func write(_ bytes: [UInt8], to path: String, sync: Bool) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TestProcessError("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard n == bytes.count else { throw TestProcessError("write \(path): \(n)") }
        if sync { guard fsync(fd) == 0 else { throw TestProcessError("fsync \(path): \(String(cString: strerror(errno)))") } }
    }

    func syncFolder(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0, "open \(path)")
        XCTAssertEqual(fsync(fd), 0, "fsync \(path)")
        close(fd)
    }

    /// Waits (10 s at most) until the killed ferryd's bus name is gone.
    func waitForKilledNameToGo() async throws {
        let deadline = Date().addingTimeInterval(10)
        while try await client.bus.nameHasOwner(BusClient.busName) {
            if Date() > deadline { throw TimedOut(description: "the killed ferryd's bus name stayed") }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    func contents(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) }
    }

    /// An upload's `response-destination` on a file system that cannot make a file without
    /// a name (this FUSE layer has no `O_TMPFILE`): the answer goes to a hidden file that
    /// takes the destination's name once whole and synced, and survives a power cut right
    /// after the upload completed; a refused upload leaves the last receipt as it was, and
    /// no hidden file stays either way.
    func testAnUploadsAnswerOnAFileSystemWithoutUnnamedFiles() async throws {
        let m = try makeMount()
        let receipt = m.mountPoint + "/receipt.txt"
        try write(Array("the last receipt\n".utf8), to: receipt, sync: true)
        syncFolder(m.mountPoint)
        let file = work + "/doc.bin"
        FileManager.default.createFile(atPath: file, contents: Data(repeating: 5, count: 10_000))
        server.set(.acceptUploads(status: 403, body: Array("forbidden".utf8)), on: "/refuse")
        server.set(.acceptUploads(status: 201, body: Array("stored as 42\n".utf8)), on: "/take")
        let s = try await session("com.example.AnswerOnFuse")

        let refused = try await s.upload(server.url("/refuse"), file: file, options: ["response-destination": .string(receipt)])
        let failed = try await finish(refused)
        XCTAssertEqual(failed.state, "failed")
        XCTAssertEqual(contents(receipt), Array("the last receipt\n".utf8))

        let taken = try await s.upload(server.url("/take"), file: file, options: ["response-destination": .string(receipt)])
        let done = try await finish(taken)
        XCTAssertEqual(done.state, "completed", done.errorMessage)
        XCTAssertEqual(contents(receipt), Array("stored as 42\n".utf8))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: m.mountPoint).sorted(), ["receipt.txt"],
                       "no hidden answer file left")
        try await stopFerryd()
        try m.cut()
        try m.remount()
        XCTAssertEqual(contents(receipt), Array("stored as 42\n".utf8), "the answer survives a power cut:\n\(m.log)")
    }

    /// ferryd killed while an answer is being written to its hidden file (on this layer,
    /// without `O_TMPFILE`): the restarted ferryd removes the hidden file, and the
    /// receipt keeps what it held. (The server answers 201 and stalls, with the answer's
    /// first bytes on disk; the POST, with no retries, then fails and is not sent again.)
    func testAnAnswerCutByAKillLeavesNoHiddenFile() async throws {
        let m = try makeMount()
        let receipt = m.mountPoint + "/receipt.txt"
        try write(Array("the last receipt\n".utf8), to: receipt, sync: true)
        let file = work + "/doc.bin"
        FileManager.default.createFile(atPath: file, contents: Data(repeating: 5, count: 10_000))
        server.set(.acceptUploads(status: 201, body: TestData.bytes(count: 200_000, seed: 3)), on: "/slow-answer")
        server.set(.stallAfter(bytes: 50_000), on: "/slow-answer")
        let s = try await session("com.example.AnswerCut", ["retries": .uint32(0)])
        let t = try await s.upload(server.url("/slow-answer"), file: file,
                                   options: ["method": .string("POST"), "response-destination": .string(receipt)])
        func hidden() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: m.mountPoint)) ?? []).filter { $0.hasPrefix(".ferry-answer-") }
        }
        try await waitUntilAsync("the answer's hidden file") { !hidden().isEmpty }
        try await killAndRestart()
        XCTAssertEqual(hidden(), [], "the restarted ferryd removed the cut answer")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(contents(receipt), Array("the last receipt\n".utf8))
        XCTAssertEqual(hidden(), [])
        XCTAssertEqual(server.uploads(for: "/slow-answer").count, 1)
    }

    /// The negative control: the layer really drops what was not synced, and keeps
    /// what was (fsync and fdatasync alike), across a rename too.
    func testCutDropsWhatWasNotSynced() throws {
        let m = try makeMount()
        let root = m.mountPoint
        let a = TestData.bytes(count: 10_000, seed: 1)
        let b = TestData.bytes(count: 10_000, seed: 2)
        let c = TestData.bytes(count: 70_000, seed: 3)
        try write(a, to: root + "/synced", sync: true)
        try write(b, to: root + "/unsynced", sync: false)
        // Synced, then partly overwritten, grown and renamed without a sync.
        try write(c, to: root + "/grown.part", sync: true)
        let fd = open(root + "/grown.part", O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let junk = [UInt8](repeating: 0xEE, count: 50_000)
        XCTAssertEqual(junk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 40_000) }, junk.count)
        close(fd)
        XCTAssertEqual(rename(root + "/grown.part", root + "/grown"), 0)
        // fdatasync counts as a sync; what comes after it does not.
        let ds = TestData.bytes(count: 5_000, seed: 4)
        let fd2 = open(root + "/datasynced", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        XCTAssertEqual(ds.withUnsafeBytes { Glibc.write(fd2, $0.baseAddress, $0.count) }, ds.count)
        XCTAssertEqual(fdatasync(fd2), 0)
        XCTAssertEqual(Glibc.write(fd2, "later", 5), 5)
        close(fd2)
        // Synced, then truncated without a sync.
        try write(c, to: root + "/truncated", sync: true)
        XCTAssertEqual(truncate(root + "/truncated", 10), 0)
        XCTAssertEqual(contents(root + "/unsynced"), b, "before the cut the data is there")

        try m.cut()
        XCTAssertNil(contents(root + "/synced"), "after the cut, the dead mount answers nothing")
        try m.remount()

        XCTAssertEqual(contents(root + "/synced"), a, "a synced file survives")
        XCTAssertEqual(contents(root + "/unsynced"), [], "a file never synced keeps its name, empty")
        XCTAssertEqual(contents(root + "/grown"), c, "unsynced overwrites and growth are undone; the rename stays")
        XCTAssertEqual(contents(root + "/datasynced"), ds, "fdatasync counts as a sync")
        XCTAssertEqual(contents(root + "/truncated"), c, "an unsynced truncate is undone")
    }

    /// The strict model's control: a name made or changed after its folder's last sync
    /// is undone by a cut, one synced with its folder stays.
    func testStrictCutUndoesNamesWhoseFolderWasNotSynced() throws {
        let m = try makeMount(strictNames: true)
        let d = m.mountPoint + "/d"
        XCTAssertEqual(mkdir(d, 0o755), 0)
        syncFolder(m.mountPoint)
        let a = TestData.bytes(count: 6_000, seed: 1)
        let b = TestData.bytes(count: 6_000, seed: 2)
        try write(a, to: d + "/moved.part", sync: true)
        XCTAssertEqual(rename(d + "/moved.part", d + "/moved"), 0)
        try write(b, to: d + "/replaced", sync: true)
        try write(a, to: d + "/new.part", sync: true)
        syncFolder(d)
        try write(b, to: d + "/unsynced-name", sync: true)
        XCTAssertEqual(rename(d + "/new.part", d + "/replaced"), 0)
        XCTAssertEqual(unlink(d + "/moved"), 0)

        try m.cut()
        try m.remount()
        XCTAssertEqual(Set((try? FileManager.default.contentsOfDirectory(atPath: d)) ?? []), ["moved", "replaced", "new.part"])
        XCTAssertEqual(contents(d + "/moved"), a, "an unlink after the folder's sync is undone")
        XCTAssertEqual(contents(d + "/replaced"), b, "a rename over it after the sync is undone")
        XCTAssertEqual(contents(d + "/new.part"), a)
    }

    /// A first run makes its state folder: its name must survive a power cut, or the
    /// database goes with it (every transfer forgotten, ids handed out again). With
    /// strict names, a folder made and never synced in its parent is undone by a cut;
    /// ferryd syncs the parent of each state folder it makes (found by the strict
    /// power-cut run: `state/ferry` was taken back at the first cut).
    func testANewStateFolderSurvivesAPowerCut() async throws {
        let m = try makeMount(strictNames: true)
        try await stopFerryd()
        let state = m.mountPoint + "/state"
        let dl = m.mountPoint + "/Dl"
        for d in [state, dl] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        syncFolder(m.mountPoint)
        // Part files synced every 200 ms (5 s in use), so that cuts fall between syncs of
        // running downloads; a new boot id after each cut, as the machine's would be.
        let ferrydEnvironment = ["XDG_STATE_HOME": state, "XDG_DOWNLOAD_DIR": dl, "FERRY_PART_SYNC_MS": "200",
                                 "FERRY_BOOT_ID": "power-cut-test-boot-0"]
        try await startFerryd(extraEnvironment: ferrydEnvironment)
        _ = serve("/one.bin", size: 300_000)
        server.set(.slow(bytesPerSecond: 100_000), on: "/one.bin")
        let t = try await session("com.example.PowerCut").download(server.url("/one.bin"),
                                                                    options: ["destination": .string(dl + "/one.bin")])
        let folders = ((try? FileManager.default.contentsOfDirectory(atPath: state + "/ferry")) ?? [])
            .filter { var st = stat(); return stat(state + "/ferry/" + $0, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR }
        guard let p = ferryd else { return XCTFail("ferryd is not running") }
        p.kill(SIGKILL)
        XCTAssertNotNil(p.waitForExit(timeout: 10), "ferryd died of SIGKILL")
        try m.cut()
        try await waitForKilledNameToGo()
        try m.remount()
        XCTAssertTrue(exists(state + "/ferry/ferry.sqlite"), "the state database survives the cut:\n\(m.log)")
        for f in folders {
            XCTAssertTrue(exists(state + "/ferry/" + f), "ferryd's folder \(f) (made on the first run) survives the cut:\n\(m.log)")
        }
        try await startFerryd(extraEnvironment: ferrydEnvironment)
        let listed = try await client.listTransfers().map(\.path)
        XCTAssertEqual(listed, [t.path], "the acknowledged transfer is known after the cut")
        try await stopFerryd()
    }

    /// Tallies of the invariant checks, printed at the end of a run.
    struct Tally {
        var passed = 0
        var failed: [String] = []
    }
    var tally = Tally()

    /// One invariant check: counted, and a test failure naming the cut when it fails.
    func check(_ ok: Bool, _ what: @autoclosure () -> String, cut: Int, file: StaticString = #filePath, line: UInt = #line) {
        if ok {
            tally.passed += 1
        } else {
            let text = "cut \(cut): \(what())"
            tally.failed.append(text)
            XCTFail(text, file: file, line: line)
        }
    }

    /// `@unchecked Sendable`: every field is guarded by `lock`.
    final class Acked: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [(FerryTransfer, String)] = []
        private var stopped = false
        func add(_ t: FerryTransfer, _ dest: String) { lock.lock(); items.append((t, dest)); lock.unlock() }
        func stop() { lock.lock(); stopped = true; lock.unlock() }
        var isStopped: Bool { lock.lock(); defer { lock.unlock() }; return stopped }
        var all: [(FerryTransfer, String)] { lock.lock(); defer { lock.unlock() }; return items }
    }

    func testBatchSurvivesPowerCuts() async throws {
        let env = ProcessInfo.processInfo.environment
        let cuts = env["FERRY_POWERCUT_CUTS"].flatMap { Int($0) } ?? 4
        var seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xffff_ffff
        if let fixed = env["FERRY_POWERCUT_SEED"], let v = UInt64(fixed) { seed = v }
        // Torn cuts: of the blocks written since a file's last sync, a random half stays
        // (holes under a part file's length). FERRY_POWERCUT_TORN=1 makes every cut torn,
        // =0 none; unset, every other cut is.
        let tornSetting = env["FERRY_POWERCUT_TORN"]
        // Strict names: a create, rename or unlink is undone unless its folder was synced.
        let strict = env["FERRY_POWERCUT_STRICT"] == "1"
        print("PowerCutTests seed: \(seed), cuts: \(cuts)\(tornSetting == "1" ? ", torn" : tornSetting == "0" ? "" : ", every other one torn")\(strict ? ", strict names" : "") (FERRY_POWERCUT_SEED / _CUTS / _TORN / _STRICT repeat it)")
        var rng = SeededRandom(state: seed)

        let m = try makeMount(strictNames: strict)
        // setUp's ferryd keeps its state in the HOME; this test's one on the layer.
        try await stopFerryd()
        let state = m.mountPoint + "/state"
        let dl = m.mountPoint + "/Dl"
        for d in [state, dl] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        syncFolder(m.mountPoint)  // the folders were there long before (strict names undo them otherwise)
        // Part files synced every 200 ms (5 s in use), so that cuts fall between syncs of
        // running downloads; a new boot id after each cut, as the machine's would be.
        var ferrydEnvironment = ["XDG_STATE_HOME": state, "XDG_DOWNLOAD_DIR": dl, "FERRY_PART_SYNC_MS": "200",
                                 "FERRY_BOOT_ID": "power-cut-test-boot-0"]
        try await startFerryd(extraEnvironment: ferrydEnvironment)

        let sessionName = "com.example.PowerCut"
        var s = try await session(sessionName)
        var bodies: [String: [UInt8]] = [:]       // final name -> served bytes
        var oldContents: [String: [UInt8]] = [:]  // an overwrite's destination as it was before
        var acked: [String: String] = [:]         // transfer path -> destination, Download answered
        var maxId: UInt64 = 0

        /// Completed signals so far: path -> (serial, error name).
        func announced() -> [String: (UInt64, String)] {
            var r: [String: (UInt64, String)] = [:]
            for sig in signals.signals(member: "Completed") where r[sig.path] == nil {
                r[sig.path] = (sig.args[0].uint64 ?? 0, sig.args[1].string ?? "")
            }
            return r
        }

        /// No final name holds a partial or wrong file; no `name (1)`.
        func checkFinalNames(cut: Int) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: dl)) ?? []
            for name in names where !name.hasSuffix(".part") {
                let path = dl + "/" + name
                guard let body = bodies[path] else {
                    check(false, "an unexpected file \(name) in the download folder (a second copy?)", cut: cut)
                    continue
                }
                // Read again when the first open finds nothing: ferryd may replace the file
                // (an overwrite) at that moment, and through fusepy's path-based layer an open
                // racing a rename can reach the replaced inode (ENOENT), which a kernel file
                // system never answers for a name that was only ever replaced.
                let have = contents(path) ?? contents(path)
                check(have == body || (oldContents[path] != nil && have == oldContents[path]),
                      "\(name) holds \(have?.count ?? -1) bytes that are neither the served \(body.count) nor what was there before", cut: cut)
            }
        }

        for cut in 1...cuts {
            // The batch: small ones, slow ones, one with sha256, one on 4 connections,
            // one overwriting a file that is there.
            var items: [(url: String, dest: String, options: [String: DBusValue])] = []
            func add(_ name: String, size: Int, rate: Int?, _ options: [String: DBusValue] = [:]) {
                let urlPath = "/c\(cut)/\(name)"
                let body = serve(urlPath, size: size, seed: UInt64(cut * 100 + items.count + 1), etag: "\"c\(cut)-\(name)\"")
                if let rate { server.set(.slow(bytesPerSecond: rate), on: urlPath) }
                let dest = dl + "/c\(cut)-\(name)"
                bodies[dest] = body
                items.append((server.url(urlPath), dest, options.merging(["destination": .string(dest)]) { $1 }))
            }
            for k in 0..<3 { add("small\(k).bin", size: 8_000 + Int(rng.next() % 60_000), rate: nil) }
            for k in 0..<2 { add("slow\(k).bin", size: 400_000 + Int(rng.next() % 200_000), rate: 300_000) }
            add("sha.bin", size: 300_000, rate: 400_000)
            let shaDest = dl + "/c\(cut)-sha.bin"
            items[items.count - 1].options["sha256"] = .string(TestData.sha256Hex(bodies[shaDest]!))
            add("multi.bin", size: 1_000_000, rate: 600_000, ["connections": .uint32(4)])
            let overDest = dl + "/c\(cut)-over.bin"
            let old = TestData.bytes(count: 50_000, seed: 9_000 + UInt64(cut))
            try write(old, to: overDest, sync: true)
            syncFolder(dl)
            oldContents[overDest] = old
            add("over.bin", size: 200_000, rate: 300_000, ["overwrite": .boolean(true)])
            items.shuffle(using: &rng)

            let round = Acked()
            let session = s
            let toQueue = items
            let queueing = Task {
                for item in toQueue {
                    if round.isStopped { break }
                    do {
                        let t = try await session.download(item.url, options: item.options)
                        round.add(t, item.dest)
                    } catch {
                        break  // ferryd is gone: the power went
                    }
                }
            }

            // The cut, at a random moment of the batch: SIGKILL first, then the layer
            // rolls back, so nothing ferryd wrote after it survives.
            let delayMs = rng.next() % 1_600
            try await Task.sleep(nanoseconds: delayMs * 1_000_000)
            guard let p = ferryd else { return XCTFail("ferryd is not running") }
            p.kill(SIGKILL)
            XCTAssertNotNil(p.waitForExit(timeout: 10), "ferryd died of SIGKILL")
            let logBefore = m.log.count
            let torn = tornSetting == "1" || (tornSetting == nil && cut % 2 == 0)
            let rolledBack = try m.cut(tornSeed: torn ? rng.next() : nil)
            round.stop()
            await queueing.value
            try await waitForKilledNameToGo()
            let before = announced()
            let beforeIds = round.all.map(\.0.id)
            print("cut \(cut)\(torn ? " (torn)" : "") at \(delayMs) ms: \(round.all.count)/\(items.count) Download answered, \(before.count) completions announced in all; the cut took unsynced data from \(rolledBack) files")
            print(String(m.log.dropFirst(logBefore)), terminator: "")

            // Ids handed out in this round are above every one seen before.
            for id in beforeIds {
                check(id > maxId, "transfer id \(id) is not above \(maxId), the highest seen before", cut: cut)
            }
            maxId = max(maxId, beforeIds.max() ?? 0)
            for (t, dest) in round.all { acked[t.path] = dest }
            let maxSerialBefore = before.values.map(\.0).max() ?? 0
            let signalsBefore = signals.mark

            // The machine comes back, in a new boot.
            try m.remount()
            if env["FERRY_POWERCUT_SAME_BOOT"] != "1" { ferrydEnvironment["FERRY_BOOT_ID"] = "power-cut-test-boot-\(cut)" }
            do {
                try await startFerryd(extraEnvironment: ferrydEnvironment)
                check(true, "ferryd starts", cut: cut)
            } catch {
                check(false, "ferryd does not start after the cut: \(error)", cut: cut)
                return
            }
            s = try await self.session(sessionName)

            // Every acknowledged transfer is known.
            let listedTransfers = try await client.listTransfers()
            let listed = Set(listedTransfers.map(\.path))
            maxId = max(maxId, listedTransfers.map(\.id).max() ?? 0)
            for path in acked.keys.sorted() {
                check(listed.contains(path), "\(path), whose Download was answered, is not listed", cut: cut)
                do { _ = try await client.transfer(id: FerryTransfer.idOf(path)).info() } catch {
                    check(false, "\(path) does not answer: \(error)", cut: cut)
                }
            }
            // Every announced completion survives: completed, its file whole at its name.
            let events = try await s.pendingEvents()
            for (path, (serial, errorName)) in before.sorted(by: { $0.key < $1.key }) {
                check(errorName.isEmpty, "\(path) completed with \(errorName)", cut: cut)
                guard errorName.isEmpty else { continue }
                let info = try? await client.transfer(id: FerryTransfer.idOf(path)).info()
                check(info?.state == "completed", "\(path), announced completed, is \(info?.state ?? "unknown") after the cut", cut: cut)
                if let dest = acked[path] ?? info?.destination {
                    check(contents(dest) == bodies[dest], "\(dest), announced complete, holds \(contents(dest)?.count ?? -1) bytes, not the served \(bodies[dest]?.count ?? -1)", cut: cut)
                }
                let its = events.filter { $0.transferPath == path }
                check(its.count <= 1 && its.allSatisfy { $0.serial == serial },
                      "\(path)'s completion (serial \(serial)) is pending as \(its.map(\.serial))", cut: cut)
            }
            checkFinalNames(cut: cut)

            // Serials sent after the restart are above every one seen before; nothing
            // announced before the cut is announced again.
            try await Task.sleep(nanoseconds: 300_000_000)
            for sig in signals.all.dropFirst(signalsBefore) where sig.member == "Completed" {
                let serial = sig.args[0].uint64 ?? 0
                check(serial > maxSerialBefore, "\(sig.path) completed with serial \(serial), not above \(maxSerialBefore)", cut: cut)
                check(before[sig.path] == nil, "\(sig.path), announced before the cut, is announced again", cut: cut)
            }
        }

        // Everything finishes.
        let final = cuts + 1
        let all = try await client.listTransfers()
        for t in all {
            let info = try await t.info()
            if !info.isFinal { _ = try await finish(t, timeout: 60) }
        }
        for (path, dest) in acked.sorted(by: { $0.key < $1.key }) {
            let info = try await client.transfer(id: FerryTransfer.idOf(path)).info()
            check(info.state == "completed", "\(path) ends \(info.state): \(info.errorName) \(info.errorMessage)", cut: final)
            check(contents(dest) == bodies[dest], "\(dest) holds \(contents(dest)?.count ?? -1) bytes, not the served \(bodies[dest]?.count ?? -1)", cut: final)
        }
        checkFinalNames(cut: final)
        check(partFiles(in: dl).isEmpty, "orphan .part files are left: \(partFiles(in: dl))", cut: final)
        let events = try await s.pendingEvents()
        let serials = events.map(\.serial)
        check(Set(serials).count == serials.count, "pending events reuse a serial: \(serials)", cut: final)
        var perTransfer: [String: Int] = [:]
        for e in events { perTransfer[e.transferPath, default: 0] += 1 }
        for (path, n) in perTransfer { check(n == 1, "\(path) has \(n) pending events", cut: final) }
        var completedSignals: [String: Int] = [:]
        for sig in signals.signals(member: "Completed") { completedSignals[sig.path, default: 0] += 1 }
        for (path, n) in completedSignals.sorted(by: { $0.key < $1.key }) {
            check(n == 1, "\(path) was announced completed \(n) times", cut: final)
        }
        let allSerials = signals.signals(member: "Completed").compactMap { $0.args[0].uint64 }
        check(Set(allSerials).count == allSerials.count, "Completed serials repeat: \(allSerials)", cut: final)

        try await stopFerryd()
        print("PowerCutTests: \(cuts) cuts, seed \(seed), \(acked.count) transfers acknowledged, \(tally.passed) checks passed, \(tally.failed.count) failed\(tally.failed.isEmpty ? "" : ":\n  " + tally.failed.joined(separator: "\n  "))")
    }
}

extension FerryTransfer {
    static func idOf(_ path: String) -> UInt64 { UInt64(path.split(separator: "/").last ?? "") ?? 0 }
}
