import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A seeded fuzzer over every method and property of the three interfaces, against
/// the real ferryd on a private bus: wrong signatures, wrong variant types, boundary
/// numbers, huge and deeply nested values, file descriptors in variants. ferryd must
/// never crash or hang (it answers Ping after every batch), refuse only with named
/// errors, keep its descriptors and memory within a bound, and write nothing outside
/// the temporary HOME. `FERRY_FUZZ_SEED=N` replays a run; `FERRY_FUZZ_CALLS` sets
/// its length (default 3,000).
final class FuzzTests: FerryTestCase {
    /// Refusals that are not a Ferry error but a standard one the binding gives for
    /// a call that does not fit (signature, name, access).
    static let standardRefusals: Set<String> = [
        StandardErrors.invalidArgs, StandardErrors.unknownMethod, StandardErrors.unknownInterface,
        StandardErrors.unknownProperty, StandardErrors.propertyReadOnly, StandardErrors.unknownObject,
        // Upload is in the contract but may not be built yet.
        "org.freedesktop.DBus.Error.NotSupported",
    ]

    struct Target {
        var path: () -> String
        var interface: String
        var member: String
        /// The contract's argument types (for well-formed calls).
        var signature: [String]
    }

    var rng = SeededRandom(state: 0)
    var devNull: Int32 = -1
    var sessionPaths: [String] = []
    var transferPaths: [String] = []
    var resumeData: [UInt8] = []

    func chance(_ n: UInt64) -> Bool { rng.next() % n == 0 }
    func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }

    // MARK: Values

    func randomString() -> String {
        switch rng.next() % 24 {
        case 0: return ""
        case 1: return String(repeating: "a", count: pick([255, 256, 4096, 4097, 8192, 8193, 65_536, 65_537]))
        case 2: return chance(8) ? String(repeating: "m", count: 1 << 20) : String(repeating: "k", count: 70_000)
        case 3: return pick(["ü✓🚀", "\r\n", "a\rb", "\t", "x\u{7F}", "%00", "..", "/", "//", "~"])
        case 4, 5: return server.url(pick(["/fuzz.bin", "/missing", "/fuzz.bin?q=1", "/a%20b"]))
        case 6: return pick(["http://127.0.0.1:1/x", "http://u:p@127.0.0.1:1/x", "ftp://127.0.0.1/x", "file:///etc/passwd",
                             "http://", "http://[::1", "https://127.0.0.1:0/", "http://host:99999/", "data:,x", "not a url"])
        case 7, 8: return work + "/" + pick(["f.bin", "d", "sub/x", String(repeating: "n", count: 251), "a b", ".hidden", "x.part"])
        case 9: return pick([downloads + "/", work, work + "/../work/g.bin", "rel/x", "../x", "/nonexistent-ferry-fuzz/x",
                             "/proc/1/x", "/" + String(repeating: "d/", count: 2100)])
        case 10: return pick(["com.example.Fuzz\(rng.next() % 4)", "org.example.App", "a", "bad id", "9lives.x", "x..y"])
        case 11: return pick(["Authorization", "Host", "Content-Length", "Transfer-Encoding", "Connection", "X-Ok", "Bad Name",
                              "Range", "x-a", String(repeating: "H", count: 257)])
        case 12: return pick(["PUT", "POST", "GET", "put"])
        case 13: return String(repeating: "0123456789abcdef", count: 4)
        case 14: return pick(["http://proxy.example:3128", "socks5h://127.0.0.1:1", "ftp://p", "http://u:pw@p.example"])
        default:
            let n = Int(rng.next() % 12)
            return String((0..<n).map { _ in Character(Unicode.Scalar(UInt8(32 + rng.next() % 95))) })
        }
    }

    func randomBasic() -> DBusValue {
        switch rng.next() % 13 {
        case 0: return .byte(pick([0, 1, 255]))
        case 1: return .boolean(chance(2))
        case 2: return .int16(pick([0, -1, .min, .max]))
        case 3: return .uint16(pick([0, 1, .max]))
        case 4: return .int32(pick([0, -1, 1, 2, -2, .min, .max]))
        case 5: return .uint32(pick([0, 1, 6, 16, 17, 64, 65, .max]))
        case 6: return .int64(pick([0, -1, .min, .max]))
        case 7: return .uint64(pick([0, 1, .max, UInt64(Date().timeIntervalSince1970 * 1e6) + 3_600_000_000]))
        case 8: return .double(pick([0, -1, 1e-9, .infinity, -.infinity, .nan, 1e300, 60]))
        case 9: return .objectPath(pick(["/", "/org/ferry/Ferry1", sessionPaths.first ?? "/x", "/org/ferry/Ferry1/transfer/999999"]))
        case 10: return .signature(pick(["", "s", "a{sv}", "v"]))
        case 11: return devNull >= 0 ? .unixFD(devNull) : .string("fd")
        default: return .string(randomString())
        }
    }

    func randomValue(depth: Int = 0) -> DBusValue {
        let choice = depth > 6 ? 0 : rng.next() % 10
        switch choice {
        case 0, 1, 2, 3: return randomBasic()
        case 4: return .variant(randomValue(depth: depth + 1))
        case 5: return .bytes((0..<Int(pick([0, 1, 16, 65_537]))).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
        case 6: return .structure([randomValue(depth: depth + 1), randomBasic()])
        case 7: return .array(element: "v", (0..<Int(rng.next() % 4)).map { _ in .variant(randomValue(depth: depth + 1)) })
        case 8: return .stringDict(randomHeaders())
        default:
            // A deep chain of variants (the bus's own limit is 64 levels in all).
            var v = randomBasic()
            for _ in 0..<Int(rng.next() % 20) { v = .variant(v) }
            return v
        }
    }

    func randomHeaders() -> [String: String] {
        var h: [String: String] = [:]
        let n = chance(10) ? Int(pick([64, 65, 1_000])) : Int(rng.next() % 4)
        for i in 0..<n {
            let name = n > 4 ? "X-H\(i)" : randomString()
            h[name] = chance(3) ? randomString() : "v"
        }
        return h
    }

    static let optionKeys = ["destination", "headers", "description", "sha256", "start-after", "priority", "speed-limit",
                             "connections", "overwrite", "start", "method", "content-type", "form-field", "response-destination",
                             "destination-fd", "source-fd", "persistent", "directory", "max-connections-per-host",
                             "request-timeout", "resource-timeout", "allow-metered", "notify", "retries", "proxy", "cookies",
                             "application-id", "private-signals", "on-client-exit", "bogus", ""]
    static let optionTypes: [String: String] = [
        "destination": "s", "headers": "a{ss}", "description": "s", "sha256": "s", "start-after": "t", "priority": "i",
        "speed-limit": "t", "connections": "u", "overwrite": "b", "start": "b", "method": "s", "content-type": "s",
        "form-field": "s", "response-destination": "s", "destination-fd": "h", "source-fd": "h", "persistent": "b",
        "directory": "s", "max-connections-per-host": "u", "request-timeout": "d", "resource-timeout": "d",
        "allow-metered": "b", "notify": "b", "retries": "u", "proxy": "s", "cookies": "b", "application-id": "s",
        "private-signals": "b", "on-client-exit": "s",
    ]

    /// A value of D-Bus type `type` (the basic ones and `a{ss}`), random within it.
    func value(ofType type: String) -> DBusValue {
        for _ in 0..<40 {
            let v: DBusValue = type == "a{ss}" ? .stringDict(randomHeaders()) : type == "s" ? .string(randomString()) : randomBasic()
            if v.signature == type { return v }
        }
        return randomBasic()
    }

    /// An `a{sv}` of options: mostly right keys with values of the right type (so the
    /// checks behind the type check are reached), some wrong types and nesting.
    func randomOptions() -> DBusValue {
        var d: [String: DBusValue] = [:]
        for _ in 0..<Int(rng.next() % 5) {
            let key = pick(Self.optionKeys)
            if let type = Self.optionTypes[key], !chance(4) {
                d[key] = value(ofType: type)
            } else {
                d[key] = randomValue(depth: 1)
            }
        }
        // Keep most calls from starting real downloads: they would all 404 anyway.
        if d["start"] == nil, !chance(4) { d["start"] = .boolean(false) }
        return .vardict(d)
    }

    /// Arguments of exactly the contract's types, with random contents.
    func wellFormed(_ signature: [String]) -> [DBusValue] {
        signature.map { type in
            switch type {
            case "a{sv}": return randomOptions()
            case "ay": return chance(3) && !resumeData.isEmpty ? .bytes(mutated(resumeData)) : .bytes((0..<Int(pick([0, 8, 100, 65_537]))).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            case "v": return .variant(randomValue(depth: 1))
            case "as": return .stringArray((0..<Int(rng.next() % 4)).map { _ in chance(3) ? randomString() : pick(["State", "Url", "Error", "Response", "Priority"]) })
            default: return value(ofType: type)
            }
        }
    }

    func mutated(_ bytes: [UInt8]) -> [UInt8] {
        var b = bytes
        if chance(2), !b.isEmpty { b[Int(rng.next() % UInt64(b.count))] ^= UInt8(1 << (rng.next() % 8)) }
        return b
    }

    // MARK: Targets

    func targets() -> [Target] {
        let m = { BusClient.managerPath }
        let s = { [unowned self] in sessionPaths.isEmpty ? "/org/ferry/Ferry1/session/1" : pick(sessionPaths) }
        let t = { [unowned self] in transferPaths.isEmpty ? "/org/ferry/Ferry1/transfer/1" : pick(transferPaths) }
        let anyObject = { [unowned self] in pick([m(), s(), t(), "/org/ferry/Ferry1/session/987654", "/org/ferry/Ferry1/transfer/987654", "/"]) }
        let mi = BusClient.managerInterface, si = BusClient.sessionInterface, ti = BusClient.transferInterface
        let p = StandardNames.properties
        return [
            Target(path: m, interface: mi, member: "OpenSession", signature: ["s", "a{sv}"]),
            Target(path: m, interface: mi, member: "ListSessions", signature: []),
            Target(path: m, interface: mi, member: "ListTransfers", signature: []),
            Target(path: m, interface: mi, member: "ListTransferProperties", signature: ["as"]),
            Target(path: m, interface: mi, member: "PauseAll", signature: []),
            Target(path: m, interface: mi, member: "ResumeAll", signature: []),
            Target(path: m, interface: mi, member: "CancelAll", signature: []),
            Target(path: s, interface: si, member: "Download", signature: ["s", "a{sv}"]),
            Target(path: s, interface: si, member: "Download", signature: ["s", "a{sv}"]),
            Target(path: s, interface: si, member: "Upload", signature: ["s", "s", "a{sv}"]),
            Target(path: s, interface: si, member: "ResumeDownload", signature: ["ay", "a{sv}"]),
            Target(path: s, interface: si, member: "ListTransfers", signature: []),
            Target(path: s, interface: si, member: "PauseAll", signature: []),
            Target(path: s, interface: si, member: "ResumeAll", signature: []),
            Target(path: s, interface: si, member: "CancelAll", signature: []),
            Target(path: s, interface: si, member: "PendingEvents", signature: []),
            Target(path: s, interface: si, member: "AcknowledgeEvents", signature: ["t"]),
            Target(path: s, interface: si, member: "Close", signature: ["b"]),
            Target(path: t, interface: ti, member: "Pause", signature: []),
            Target(path: t, interface: ti, member: "Resume", signature: []),
            Target(path: t, interface: ti, member: "Cancel", signature: []),
            Target(path: t, interface: ti, member: "Remove", signature: []),
            Target(path: t, interface: ti, member: "SetUrl", signature: ["s"]),
            Target(path: anyObject, interface: p, member: "Get", signature: ["s", "s"]),
            Target(path: anyObject, interface: p, member: "GetAll", signature: ["s"]),
            Target(path: anyObject, interface: p, member: "Set", signature: ["s", "s", "v"]),
            Target(path: anyObject, interface: p, member: "Set", signature: ["s", "s", "v"]),
            Target(path: m, interface: StandardNames.objectManager, member: "GetManagedObjects", signature: []),
            Target(path: anyObject, interface: StandardNames.introspectable, member: "Introspect", signature: []),
            Target(path: anyObject, interface: mi, member: "NoSuchMethod", signature: ["s"]),
        ]
    }

    static let properties: [(String, [String])] = [
        (BusClient.managerInterface, ["Version", "ActiveTransfers", "QueuedTransfers", "DownloadRate", "UploadRate",
                                        "MaxConcurrentTransfers", "SpeedLimit", "NotificationsEnabled"]),
        (BusClient.sessionInterface, ["Identifier", "Configuration", "ActiveTransfers"]),
        (BusClient.transferInterface, ["Kind", "Url", "Session", "Description", "Destination", "State", "WaitingReason",
                                         "BytesTransferred", "BytesExpected", "Rate", "ExpectedEnd", "Error", "HttpStatus",
                                         "Attempts", "Resumable", "Sha256", "Created", "Started", "Completed", "Priority",
                                         "SpeedLimit", "Response"]),
    ]

    /// Arguments for one call: well-formed most of the time, else random.
    func arguments(for target: Target) -> [DBusValue] {
        if target.interface == StandardNames.properties, !chance(5) {
            let (iface, names) = pick(Self.properties)
            let name = chance(10) ? randomString() : pick(names)
            switch target.member {
            case "Get": return [.string(iface), .string(name)]
            case "GetAll": return [.string(chance(6) ? randomString() : iface)]
            default:
                let writable: [String: String] = ["MaxConcurrentTransfers": "u", "SpeedLimit": "t", "NotificationsEnabled": "b", "Priority": "i"]
                let v = writable[name].map { chance(3) ? randomValue(depth: 1) : value(ofType: $0) } ?? randomValue(depth: 1)
                return [.string(iface), .string(name), .variant(v)]
            }
        }
        if !chance(4) { return wellFormed(target.signature) }
        return (0..<Int(rng.next() % 4)).map { _ in randomValue() }
    }

    // MARK: Measuring

    func openDescriptors(_ pid: Int32) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []).count
    }

    func residentKiB(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return -1 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }

    /// Where ferryd's open descriptors lead, for files outside the allowed folders.
    func filesOpenOutside(_ pid: Int32, allowed: [String]) -> [String] {
        let dir = "/proc/\(pid)/fd"
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).compactMap { fd in
            // 0-2: the log files the harness gave it.
            guard (Int(fd) ?? 0) > 2, let target = try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + fd), target.hasPrefix("/") else { return nil }
            if target.hasPrefix("/dev/") || target.hasPrefix("/proc/") || allowed.contains(where: { target.hasPrefix($0) }) { return nil }
            return target
        }
    }

    func testFuzzEveryMethodAndProperty() async throws {
        let environmentSeed = ProcessInfo.processInfo.environment["FERRY_FUZZ_SEED"].flatMap { UInt64($0) }
        let seed = environmentSeed ?? UInt64(Date().timeIntervalSince1970 * 1000) ^ UInt64(getpid())
        let total = ProcessInfo.processInfo.environment["FERRY_FUZZ_CALLS"].flatMap { Int($0) } ?? 3_000
        print("FERRY_FUZZ_SEED=\(seed) (\(total) calls; set FERRY_FUZZ_SEED to replay)")
        rng = SeededRandom(state: seed)
        devNull = open("/dev/null", O_RDONLY)
        defer { close(devNull) }
        guard let pid = ferryd?.pid else { return XCTFail("no ferryd") }
        serve("/fuzz.bin", size: 2_000)

        let main = try await session("com.example.Fuzz0")
        sessionPaths = [main.path]
        for i in 0..<3 {
            let t = try await main.download(server.url("/fuzz.bin"), options: ["start": .boolean(false), "destination": .string(work + "/seed\(i).bin")])
            transferPaths.append(t.path)
        }
        transferPaths.append("/org/ferry/Ferry1/transfer/999999")
        // The cwd ferryd runs in, which nothing should touch.
        let cwd = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd")) ?? "/"
        let cwdBefore = Set((try? FileManager.default.contentsOfDirectory(atPath: cwd)) ?? [])
        _ = try await call(BusClient.managerPath, StandardNames.peer, "Ping")
        let fdsBefore = openDescriptors(pid)
        let rssBefore = residentKiB(pid)
        let started = Date()

        let all = targets()
        var seen: [String: Int] = [:]
        var succeeded = 0
        var bad: [String] = []
        let batch = 100
        for i in 0..<total {
            let target = pick(all)
            let path = target.path()
            let args = arguments(for: target)
            do {
                let reply = try await client.bus.call(destination: BusClient.busName, path: path, interface: target.interface,
                                                      method: target.member, arguments: args, timeout: 15)
                succeeded += 1
                DBusValue.closeUnixFDs(in: reply)
                // Follow what the calls make, so later calls reach real objects.
                if let o = reply.first, case .objectPath(let made) = o {
                    if made.contains("/session/") { if !sessionPaths.contains(made) { sessionPaths.append(made) } }
                    else if made.contains("/transfer/") { transferPaths.append(made); if transferPaths.count > 40 { transferPaths.removeFirst() } }
                }
                if target.member == "Pause", let data = reply.first?.bytes, !data.isEmpty { resumeData = data }
            } catch let e as BusError {
                seen[e.name, default: 0] += 1
                // Forget what is gone (closed, removed), so most calls reach live objects.
                if e.name.hasSuffix(".NoSuchSession") { sessionPaths.removeAll { $0 == path } }
                if e.name.hasSuffix(".NoSuchTransfer"), !chance(8) { transferPaths.removeAll { $0 == path } }
                let named = e.name.hasPrefix("org.ferry.Ferry1.Error.") || Self.standardRefusals.contains(e.name)
                // The contract names a missing session or transfer: not UnknownObject.
                let unnamedMissing = e.name == StandardErrors.unknownObject && (path.contains("/session/") || path.contains("/transfer/"))
                if unnamedMissing { sessionPaths.removeAll { $0 == path }; transferPaths.removeAll { $0 == path } }
                if !named || e.name == StandardErrors.failed || unnamedMissing {
                    bad.append("call \(i): \(target.interface).\(target.member) on \(path) -> \(e.name): \(e.message.prefix(200)) [args \(String(describing: args).prefix(300))]")
                }
            }
            if i % batch == batch - 1 {
                do {
                    _ = try await client.bus.call(destination: BusClient.busName, path: BusClient.managerPath,
                                                  interface: StandardNames.peer, method: "Ping", timeout: 10, autoStart: false)
                } catch {
                    XCTFail("ferryd does not answer Ping after call \(i) (seed \(seed)): \(error)")
                    break
                }
                if !(ferryd?.isRunning ?? false) { XCTFail("ferryd exited after call \(i) (seed \(seed))"); break }
            }
            // Closed sessions and removed transfers are replaced, so the calls keep landing.
            if sessionPaths.isEmpty {
                sessionPaths.append(try await client.openSession("com.example.Fuzz\(i % 4)").path)
            }
            if transferPaths.count < 3, let s = sessionPaths.first {
                if let made = try? await call(s, BusClient.sessionInterface, "Download", [
                    .string(server.url("/fuzz.bin")), .vardict(["start": .boolean(false), "destination": .string(work + "/re\(i).bin")]),
                ]).first?.string {
                    transferPaths.append(made)
                }
            }
        }
        let elapsed = Date().timeIntervalSince(started)
        await assertDaemonAlive()
        // Let the refused and the finished settle, then measure.
        try await client.cancelAll()
        _ = try await call(BusClient.managerPath, StandardNames.peer, "Ping")
        let fdsAfter = openDescriptors(pid)
        let rssAfter = residentKiB(pid)
        print("""
            fuzz: seed \(seed), \(total) calls in \(String(format: "%.1f", elapsed)) s: \(succeeded) accepted, \(total - succeeded) refused
            fuzz: errors seen: \(seen.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", "))
            fuzz: ferryd fds \(fdsBefore) -> \(fdsAfter), RSS \(rssBefore) KiB -> \(rssAfter) KiB
            """)
        XCTAssertTrue(bad.isEmpty, "seed \(seed): refusals without a named error:\n" + bad.prefix(20).joined(separator: "\n"))
        XCTAssertLessThanOrEqual(fdsAfter, fdsBefore + 12, "seed \(seed): ferryd's descriptors grew \(fdsBefore) -> \(fdsAfter)")
        XCTAssertLessThanOrEqual(rssAfter, rssBefore + 160 * 1024, "seed \(seed): ferryd's memory grew \(rssBefore) -> \(rssAfter) KiB")
        // Nothing written outside the temporary HOME: not in ferryd's cwd, not at the
        // absolute paths outside it the fuzzer offered, and no file open elsewhere.
        let cwdAfter = Set((try? FileManager.default.contentsOfDirectory(atPath: cwd)) ?? [])
        XCTAssertEqual(cwdAfter.subtracting(cwdBefore), [], "seed \(seed): files appeared in ferryd's cwd \(cwd)")
        XCTAssertFalse(exists("/nonexistent-ferry-fuzz"), "seed \(seed)")
        XCTAssertEqual(filesOpenOutside(pid, allowed: [home]), [], "seed \(seed): ferryd holds files outside \(home!)")
        XCTAssertLessThan(elapsed, 90, "seed \(seed): the fuzz run should stay around a minute")
    }
}
