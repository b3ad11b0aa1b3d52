import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A client that sends many `Download` calls, or calls on transfers, without waiting for
/// each answer (a script, `ferry get`, `ferry rm`): ferryd takes those that arrive together
/// as one group, and each call still gets its own answer, in order, as if it had come alone.
final class PipelinedCallTests: FerryTestCase {
    /// Replies to calls sent one after another without waiting, in the order sent.
    final class Replies: @unchecked Sendable {
        private let lock = NSLock()
        private var results: [Int: Result<[DBusValue], BusError>] = [:]
        private var order: [Int] = []

        func record(_ index: Int, _ result: Result<BusMessage, BusError>) {
            let values = result.flatMap { m in Result { try m.arguments() }.mapError { BusError(name: "test.Unreadable", message: "\($0)") } }
            lock.lock()
            results[index] = values
            order.append(index)
            lock.unlock()
        }

        var count: Int { lock.lock(); defer { lock.unlock() }; return results.count }
        var answerOrder: [Int] { lock.lock(); defer { lock.unlock() }; return order }
        subscript(index: Int) -> Result<[DBusValue], BusError>? { lock.lock(); defer { lock.unlock() }; return results[index] }

        func wait(for count: Int, timeout: TimeInterval = 30) async throws {
            let deadline = Date().addingTimeInterval(timeout)
            while self.count < count {
                guard Date() < deadline else { throw TimedOut(description: "\(self.count) of \(count) replies after \(timeout) s") }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
        }
    }

    /// Sends `calls` (method, arguments) on the session at `path` back to back, without waiting.
    func pipeline(_ path: String, _ calls: [(String, [DBusValue])]) throws -> Replies {
        try pipeline(calls.map { (path, BusClient.sessionInterface, $0.0, $0.1) })
    }

    /// Sends `calls` (object path, interface, method, arguments) back to back, without waiting.
    func pipeline(_ calls: [(String, String, String, [DBusValue])]) throws -> Replies {
        let replies = Replies()
        for (i, (path, interface, method, args)) in calls.enumerated() {
            let m = try BusMessage.methodCall(destination: BusClient.busName, path: path, interface: interface, member: method)
            try m.append(args)
            client.bus.send(m) { replies.record(i, $0) }
        }
        return replies
    }

    /// `count` paused downloads of one small file in a persistent session, and their paths.
    func pausedDownloads(_ count: Int, _ identifier: String) async throws -> (BusSession, [String]) {
        _ = serve("/p.bin", size: 1024, seed: 9)
        let s = try await session(identifier, ["persistent": .boolean(true)])
        let calls = (0..<count).map { download(server.url("/p.bin"), ["destination": .string(work + "/p\($0).bin"), "start": .boolean(false)]) }
        let replies = try pipeline(s.path, calls)
        try await replies.wait(for: count)
        let paths = (0..<count).compactMap { i -> String? in
            if case .success(let v)? = replies[i] { return v.first?.string } else { return nil }
        }
        XCTAssertEqual(paths.count, count, "every download was added")
        return (s, paths)
    }

    /// Calls on transfer objects sent back to back (a script cleaning up, `ferry rm` of many
    /// ids) are taken together too: each is answered in order with its own result, and one
    /// that is refused changes nothing for the others.
    func testPipelinedCallsOnTransfersAreEachAnsweredInOrder() async throws {
        let (s, paths) = try await pausedDownloads(30, "com.example.PipelinedRemove")
        let t = BusClient.transferInterface
        func cancelAndRemove(_ some: ArraySlice<String>) -> [(String, String, String, [DBusValue])] {
            some.flatMap { [($0, t, "Cancel", [DBusValue]()), ($0, t, "Remove", [])] }
        }
        var calls = cancelAndRemove(paths[0..<10])     // 0-19
        calls.append((paths[10], t, "Remove", []))    // 20: refused, a paused transfer is not removed
        calls += cancelAndRemove(paths[10...10])       // 21, 22
        calls.append((paths[10], t, "Remove", []))    // 23: refused, gone already
        calls.append((paths[11], t, "Resume", []))    // 24: queued again
        calls += cancelAndRemove(paths[12...])
        let replies = try pipeline(calls)
        try await replies.wait(for: calls.count)

        XCTAssertEqual(replies.answerOrder, Array(calls.indices), "answered in the order sent")
        for i in calls.indices {
            switch (i, replies[i]) {
            case (20, .failure(let e)?):
                XCTAssertEqual(e.name, "org.ferry.Ferry1.Error.InvalidState", e.message)
            case (23, .failure(let e)?):
                XCTAssertEqual(e.name, "org.ferry.Ferry1.Error.NoSuchTransfer", e.message)
            case (20, _), (23, _):
                XCTFail("call \(i) should have been refused: \(String(describing: replies[i]))")
            case (_, .success?):
                break
            default:
                XCTFail("call \(i) (\(calls[i].2) on \(calls[i].0)) refused: \(String(describing: replies[i]))")
            }
        }
        let left = try await s.listTransfers().map(\.path)
        XCTAssertEqual(left, [paths[11]], "only the resumed one is left")
    }

    /// Cancels and removals answered together are stored together: a SIGKILL right after
    /// the last answer brings none of the removed transfers back.
    func testPipelinedRemovalsSurviveSIGKILLOnceAnswered() async throws {
        let (s, paths) = try await pausedDownloads(60, "com.example.PipelinedRemoveKill")
        let t = BusClient.transferInterface
        let replies = try pipeline(paths[..<50].flatMap { [($0, t, "Cancel", [DBusValue]()), ($0, t, "Remove", [])] })
        try await replies.wait(for: 100)
        for i in 0..<100 {
            guard case .success? = replies[i] else { return XCTFail("call \(i) refused: \(String(describing: replies[i]))") }
        }
        try await killAndRestart()
        let again = try await session("com.example.PipelinedRemoveKill", ["persistent": .boolean(true)])
        XCTAssertEqual(again.path, s.path)
        let left = try await again.listTransfers().map(\.path)
        XCTAssertEqual(left, Array(paths[50...]), "none of the 50 removed came back")
    }

    func download(_ url: String, _ options: [String: DBusValue]) -> (String, [DBusValue]) {
        ("Download", [.string(url), .vardict(options)])
    }

    func testPipelinedDownloadsAreEachAnsweredInOrderAndRefusedOnlyByThemselves() async throws {
        let count = 40
        let body = serve("/same.bin", size: 4096, seed: 7)
        let s = try await session()
        var calls: [(String, [DBusValue])] = []
        for i in 0..<count {
            switch i {
            case 10: calls.append(download("ftp://example.com/x.bin", ["destination": .string(work)]))
            case 20: calls.append(download(server.url("/same.bin"), ["destination": .string(work + "/no/such/dir/x.bin")]))
            default: calls.append(download(server.url("/same.bin"), ["destination": .string(work)]))
            }
        }
        let replies = try pipeline(s.path, calls)
        try await replies.wait(for: count)
        XCTAssertEqual(replies.answerOrder, Array(0..<count), "answered in the order asked")

        guard case .failure(let scheme)? = replies[10], case .failure(let dir)? = replies[20] else {
            return XCTFail("the two bad calls were accepted: \(String(describing: replies[10])), \(String(describing: replies[20]))")
        }
        XCTAssertEqual(scheme.name, "org.ferry.Ferry1.Error.UnsupportedScheme", scheme.message)
        XCTAssertEqual(dir.name, "org.ferry.Ferry1.Error.InvalidDestination", dir.message)
        let paths = (0..<count).filter { $0 != 10 && $0 != 20 }.compactMap { i -> String? in
            guard case .success(let values)? = replies[i] else { XCTFail("call \(i) refused: \(String(describing: replies[i]))"); return nil }
            return values.first?.string
        }
        XCTAssertEqual(paths.count, count - 2)
        let ids = paths.compactMap { UInt64($0.split(separator: "/").last ?? "") }
        XCTAssertEqual(ids, ids.sorted(), "ids in the order the calls were sent")
        XCTAssertEqual(Set(ids).count, ids.count)

        // The same URL into one folder 38 times: 38 files, each whole, none sharing a name.
        for path in paths { try await signals.completed(path, timeout: 60) }
        for path in paths {
            let info = try await FerryTransfer(client: client, path: path).info()
            XCTAssertEqual(info.state, "completed", "\(path): \(info.errorMessage)")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: work).sorted()
        XCTAssertEqual(names.count, count - 2, "\(names)")
        XCTAssertTrue(names.contains("same.bin") && names.contains("same (1).bin"), "\(names)")
        for name in names { assertFile(work + "/" + name, equals: body) }
    }

    /// The cap on a session's transfers counts the downloads of the same group that are
    /// not added yet: six pipelined calls into a session capped at four get four transfers.
    func testTheTransferCapHoldsWithinAGroup() async throws {
        try await stopFerryd()
        try await startFerryd(["--max-transfers-per-session", "4"])
        serve("/cap.bin", size: 10)
        let s = try await session()
        let calls = (0..<6).map { download(server.url("/cap.bin"), ["destination": .string(work + "/cap\($0).bin"), "start": .boolean(false)]) }
        let replies = try pipeline(s.path, calls)
        try await replies.wait(for: calls.count)
        for i in 0..<4 {
            guard case .success? = replies[i] else { return XCTFail("call \(i) refused: \(String(describing: replies[i]))") }
        }
        for i in 4..<6 {
            guard case .failure(let e)? = replies[i] else { return XCTFail("call \(i) over the cap was accepted") }
            XCTAssertEqual(e.name, "org.ferry.Ferry1.Error.LimitExceeded", e.message)
        }
        let listed = try await s.listTransfers()
        XCTAssertEqual(listed.count, 4)
    }

    /// Ordering across kinds of call: a CancelAll sent between downloads cancels those
    /// sent before it and none sent after, although all of them arrive together.
    func testACallBetweenPipelinedDownloadsRunsInItsPlace() async throws {
        let body = serve("/o.bin", size: 2048, seed: 3)
        let s = try await session()
        var calls: [(String, [DBusValue])] = []
        for i in 0..<5 { calls.append(download(server.url("/o.bin"), ["destination": .string(work + "/before\(i).bin"), "start": .boolean(false)])) }
        calls.append(("CancelAll", []))
        for i in 0..<5 { calls.append(download(server.url("/o.bin"), ["destination": .string(work + "/after\(i).bin")])) }
        let replies = try pipeline(s.path, calls)
        try await replies.wait(for: calls.count)
        var paths: [String] = []
        for i in 0..<calls.count where i != 5 {
            guard case .success(let values)? = replies[i], let path = values.first?.string else {
                return XCTFail("call \(i) refused: \(String(describing: replies[i]))")
            }
            paths.append(path)
        }
        for path in paths.prefix(5) {
            let info = try await FerryTransfer(client: client, path: path).info()
            XCTAssertEqual(info.state, "cancelled", "a download sent before CancelAll is cancelled by it")
        }
        for (i, path) in paths.suffix(5).enumerated() {
            let info = try await finish(FerryTransfer(client: client, path: path))
            XCTAssertEqual(info.state, "completed", "a download sent after CancelAll is untouched by it: \(info.errorMessage)")
            assertFile(work + "/after\(i).bin", equals: body)
        }
    }

    /// A listing sent between pipelined downloads lists those sent before it, each with
    /// its properties, and none sent after.
    func testAListingBetweenPipelinedDownloadsListsThoseBeforeIt() async throws {
        serve("/l.bin", size: 10)
        let s = try await session()
        let replies = Replies()
        var index = 0
        func send(_ path: String, _ interface: String, _ member: String, _ args: [DBusValue]) throws {
            let m = try BusMessage.methodCall(destination: BusClient.busName, path: path, interface: interface, member: member)
            try m.append(args)
            let i = index
            index += 1
            client.bus.send(m) { replies.record(i, $0) }
        }
        for i in 0..<30 {
            try send(s.path, BusClient.sessionInterface, "Download",
                     [.string(server.url("/l.bin")), .vardict(["destination": .string(work + "/b\(i).bin"), "start": .boolean(false)])])
        }
        try send(BusClient.managerPath, BusClient.managerInterface, "ListTransferProperties", [.stringArray(["Destination"])])
        for i in 0..<5 {
            try send(s.path, BusClient.sessionInterface, "Download",
                     [.string(server.url("/l.bin")), .vardict(["destination": .string(work + "/a\(i).bin"), "start": .boolean(false)])])
        }
        try await replies.wait(for: 36)
        let before = (0..<30).compactMap { i -> String? in
            guard case .success(let v)? = replies[i] else { return nil }
            return v.first?.string
        }
        XCTAssertEqual(before.count, 30)
        guard case .success(let listing)? = replies[30] else { return XCTFail("the listing was refused: \(String(describing: replies[30]))") }
        XCTAssertEqual(listing.first?.arrayElements?.compactMap(\.string), before, "the downloads sent before it, and none after")
        let destinations = listing.dropFirst().first?.dictionaryEntries?.first?.1.arrayElements?.compactMap(\.string)
        XCTAssertEqual(destinations, (0..<30).map { work + "/b\($0).bin" }, "each with its own properties")
    }

    /// Downloads answered together are stored together: a SIGKILL right after the last
    /// answer loses none of them.
    func testPipelinedDownloadsSurviveSIGKILLOnceAnswered() async throws {
        _ = serve("/k.bin", size: 1024, seed: 5)
        let s = try await session("com.example.Pipelined", ["persistent": .boolean(true)])
        let count = 60
        let calls = (0..<count).map { download(server.url("/k.bin"), ["destination": .string(work + "/k\($0).bin"), "start": .boolean(false)]) }
        let replies = try pipeline(s.path, calls)
        try await replies.wait(for: count)
        let answered = (0..<count).compactMap { i -> String? in
            if case .success(let v)? = replies[i] { return v.first?.string } else { return nil }
        }
        XCTAssertEqual(answered.count, count)
        try await killAndRestart()
        let again = try await session("com.example.Pipelined", ["persistent": .boolean(true)])
        XCTAssertEqual(again.path, s.path)
        let listed = try await again.listTransfers().map(\.path)
        XCTAssertEqual(listed, answered, "every answered download is there after the SIGKILL, in order")
        for (i, path) in answered.enumerated() {
            let info = try await FerryTransfer(client: client, path: path).info()
            XCTAssertEqual(info.state, "paused")
            XCTAssertEqual(info.destination, work + "/k\(i).bin")
        }
    }
}
