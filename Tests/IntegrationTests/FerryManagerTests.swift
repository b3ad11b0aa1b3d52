@testable import FerryClient
import FerryTestSupport
import Foundation
import XCTest

/// FerryClient's view of the whole service (`FerryManager`) and of a session's stored
/// configuration, against the real ferryd on a private bus. (This file imports
/// FerryClient only: `FerrySession` here is the library's.)
final class FerryManagerTests: FerryTestCase {
    func configuration(_ identifier: String) -> FerrySession.Configuration {
        var c = FerrySession.Configuration.background(identifier: identifier)
        c.busAddress = bus.address
        return c
    }

    /// `sessions()` lists every session with its transfers; `closeSession` closes one
    /// by its identifier (cancelling its transfers when asked), and an unknown one is
    /// `noSuchSession`.
    func testTheManagerListsAndClosesSessions() async throws {
        serve("/m/one.bin", size: 1_000)
        var suspended = DownloadOptions()
        suspended.startsSuspended = true
        let a = FerrySession(configuration: configuration("org.example.ListedA"))
        defer { a.detach() }
        var ephemeral = configuration("org.example.ListedB")
        ephemeral.isPersistent = false
        let b = FerrySession(configuration: ephemeral)
        defer { b.detach() }
        let ta = try await a.download(from: URL(string: server.url("/m/one.bin"))!, to: URL(fileURLWithPath: work + "/a.bin"), options: suspended)
        let tb1 = try await b.download(from: URL(string: server.url("/m/one.bin"))!, to: URL(fileURLWithPath: work + "/b1.bin"), options: suspended)
        let tb2 = try await b.download(from: URL(string: server.url("/m/one.bin"))!, to: URL(fileURLWithPath: work + "/b2.bin"), options: suspended)

        let ferry = FerryManager(busAddress: bus.address)
        let listed = try await ferry.sessions()
        let byName = Dictionary(listed.map { ($0.identifier, $0) }, uniquingKeysWith: { _, newer in newer })
        XCTAssertEqual(byName["org.example.ListedA"]?.tasks.map(\.id), [ta.id])
        XCTAssertEqual(byName["org.example.ListedA"]?.isPersistent, true)
        XCTAssertEqual(byName["org.example.ListedB"]?.tasks.map(\.id), [tb1.id, tb2.id])
        XCTAssertEqual(byName["org.example.ListedB"]?.tasks.map(\.state), [.paused, .paused])
        XCTAssertEqual(byName["org.example.ListedB"]?.isPersistent, false)

        try await ferry.closeSession("org.example.ListedB", cancellingTasks: true)
        let after = try await ferry.sessions().map(\.identifier)
        XCTAssertFalse(after.contains("org.example.ListedB"), "\(after)")
        XCTAssertTrue(after.contains("org.example.ListedA"), "\(after)")
        // Closed without cancelling, A stays (closing) while its paused task is there;
        // opened again, its identifier is listed twice, and closing it closes the open one.
        try await ferry.closeSession("org.example.ListedA")
        let reopened = FerrySession(configuration: configuration("org.example.ListedA"))
        defer { reopened.detach() }
        try await reopened.attach()
        let twice = try await ferry.sessions().filter { $0.identifier == "org.example.ListedA" }
        XCTAssertEqual(twice.map { $0.tasks.map(\.id) }, [[ta.id], []], "the closing one, then the open one")
        try await ferry.closeSession("org.example.ListedA", cancellingTasks: true)
        let left = try await ferry.sessions().filter { $0.identifier == "org.example.ListedA" }
        XCTAssertEqual(left.map { $0.tasks.map(\.id) }, [[ta.id]], "the open one was closed, not the closing one")
        XCTAssertEqual(left.first?.tasks.first?.state, .paused, "the closing one's task was not cancelled")
        do {
            try await ferry.closeSession("org.example.NeverWas")
            XCTFail("closed a session that is not there")
        } catch let e as FerryError {
            guard case .noSuchSession(let m) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(m.contains("org.example.NeverWas"), m)
        }
    }

    /// Settings written through the manager are the service's (read back on another
    /// connection, and through `status()`); a bad value is a typed error.
    func testTheManagersSettingsAreTheServices() async throws {
        let ferry = FerryManager(busAddress: bus.address)
        let before = try await ferry.status()
        XCTAssertFalse(before.version.isEmpty)
        XCTAssertEqual(before.interfaceVersion, "1.2", "the contract version, apart from the package's")
        XCTAssertEqual(before.maximumConcurrentTransfers, 6)
        XCTAssertNil(before.speedLimit)
        XCTAssertEqual(before.activeTransfers, 0)

        try await ferry.setMaximumConcurrentTransfers(2)
        try await ferry.setSpeedLimit(1_000_000)
        try await ferry.setNotificationsEnabled(false)
        let raw = try await client.managerProperties()
        XCTAssertEqual(raw["MaxConcurrentTransfers"]?.uint32, 2)
        XCTAssertEqual(raw["SpeedLimit"]?.uint64, 1_000_000)
        XCTAssertEqual(raw["NotificationsEnabled"]?.bool, false)
        let after = try await ferry.status()
        XCTAssertEqual(after.maximumConcurrentTransfers, 2)
        XCTAssertEqual(after.speedLimit, 1_000_000)
        XCTAssertFalse(after.notificationsEnabled)
        try await ferry.setSpeedLimit(nil)
        let unlimited = try await ferry.status().speedLimit
        XCTAssertNil(unlimited)

        for bad in [0, -1, 100_000] {
            do {
                try await ferry.setMaximumConcurrentTransfers(bad)
                XCTFail("\(bad) concurrent transfers accepted")
            } catch let e as FerryError {
                guard case .invalidArgument = e else { return XCTFail("\(bad): \(e)") }
            }
        }
        let unchanged = try await ferry.status().maximumConcurrentTransfers
        XCTAssertEqual(unchanged, 2, "a refused value changes nothing")

        let nowhere = FerryManager(busAddress: "unix:path=/nonexistent/ferry-bus")
        do {
            _ = try await nowhere.status()
            XCTFail("a bus that is not there answered")
        } catch let e as FerryError {
            guard case .serviceUnavailable = e else { return XCTFail("\(e)") }
        }
    }

    /// The schedule (v1.2) through the library: set, read back, refused when bad; a
    /// discretionary session's task waits for its discretionary-only window and says so.
    func testTheScheduleAndDiscretionaryTasksThroughTheLibrary() async throws {
        let ferry = FerryManager(busAddress: bus.address)
        let none = try await ferry.schedule()
        XCTAssertEqual(none, [])
        // A night window far from now (the hour opposite to this one, UTC or local).
        let hour = (Calendar.current.component(.hour, from: Date()) + 12) % 24
        let night = FerryScheduleWindow(days: "*", start: String(format: "%02d:00", hour), end: String(format: "%02d:30", hour),
                                        speedLimit: nil, discretionaryOnly: true)
        let office = FerryScheduleWindow(days: "Mon-Fri", start: "09:00", end: "17:00", speedLimit: 512 * 1024)
        try await ferry.setSchedule([night, office])
        let read = try await ferry.schedule()
        XCTAssertEqual(read, [night, office])
        do {
            try await ferry.setSchedule([FerryScheduleWindow(days: "Mon", start: "9:00", end: "17:00")])
            XCTFail("a bad time was accepted")
        } catch let e as FerryError {
            guard case .invalidArgument = e else { return XCTFail("\(e)") }
        }
        let unchanged = try await ferry.schedule()
        XCTAssertEqual(unchanged, [night, office])

        var c = configuration("org.example.Discretionary")
        c.isDiscretionary = true
        let session = FerrySession(configuration: c)
        serve("/later.bin", size: 10_000)
        let task = try await session.download(from: URL(string: server.url("/later.bin"))!)
        let snapshot = try await task.snapshot()
        XCTAssertEqual(snapshot.state, .waiting)
        XCTAssertEqual(snapshot.waitingReason, .schedule)
        // No schedule any more: nothing keeps it waiting (bounded: `finish` has a timeout).
        try await ferry.setSchedule([])
        let done = try await finish(client.transfer(id: task.id))
        XCTAssertEqual(done.state, "completed", "it went on once the schedule was gone")
    }

    /// `suspendAll`, `resumeAll` and `cancelAll` reach every session's transfers, and
    /// `batches()` gives one element per batch with its counts.
    func testTheManagerSteersEverySessionAndReportsEachBatch() async throws {
        // A batch ends after 3 s without work, not 1: on a loaded machine the three
        // Download calls of one batch may not all come within a second.
        try await stopFerryd()
        try await startFerryd(["--batch-settle", "3"])
        serve("/m/a.bin", size: 20_000)
        let ferry = FerryManager(busAddress: bus.address)
        let one = FerrySession(configuration: configuration("org.example.ManagerOne"))
        let two = FerrySession(configuration: configuration("org.example.ManagerTwo"))
        defer { one.detach(); two.detach() }
        var later = DownloadOptions()
        later.startAfter = Date().addingTimeInterval(3600)
        let a = try await one.download(from: URL(string: server.url("/m/a.bin"))!, to: URL(fileURLWithPath: work + "/a1.bin"), options: later)
        let b = try await two.download(from: URL(string: server.url("/m/a.bin"))!, to: URL(fileURLWithPath: work + "/a2.bin"), options: later)

        try await ferry.suspendAll()
        for t in [a, b] {
            let s = try await t.snapshot().state // another connection changed it: ask
            XCTAssertEqual(s, .paused, "\(t.id) in its session")
        }
        try await ferry.resumeAll()
        for t in [a, b] {
            let s = try await t.snapshot().state // another connection changed it: ask
            XCTAssertTrue([.queued, .waiting].contains(s), "\(t.id) resumed: \(s)")
        }
        // Waiting for their time, they keep the batch open until they are cancelled.
        // A stream keeps its manager: no reference to it is needed while iterating.
        let batches = try await FerryManager(busAddress: bus.address).batches()
        let ended = Mailbox<FerryManager.Batch>()
        let reader = Task { for await b in batches { ended.put(b) } }
        defer { reader.cancel() }
        try await ferry.cancelAll()
        for t in [a, b] {
            let s = try await t.snapshot().state // another connection changed it: ask
            XCTAssertEqual(s, .cancelled)
        }
        let cancelled = try await ended.next(timeout: 20, "a batch")
        XCTAssertEqual(cancelled, FerryManager.Batch(succeeded: 0, failed: 0, cancelled: 2))

        // A batch: two downloads and a 404; then another batch of one.
        let ok1 = try await one.download(from: URL(string: server.url("/m/a.bin"))!, to: URL(fileURLWithPath: work + "/b1.bin"))
        let ok2 = try await two.download(from: URL(string: server.url("/m/a.bin"))!, to: URL(fileURLWithPath: work + "/b2.bin"))
        let missing = try await one.download(from: URL(string: server.url("/m/missing"))!, to: URL(fileURLWithPath: work + "/b3.bin"))
        let batch = try await ended.next(timeout: 20, "a batch")
        for t in [ok1, ok2] { _ = try await t.value }
        do { _ = try await missing.value; XCTFail("a 404 succeeded") } catch is FerryError {}
        XCTAssertEqual(batch, FerryManager.Batch(succeeded: 2, failed: 1, cancelled: 0))
        let ok3 = try await two.download(from: URL(string: server.url("/m/a.bin"))!, to: URL(fileURLWithPath: work + "/b4.bin"))
        let next = try await ended.next(timeout: 20, "a batch")
        _ = try await ok3.value
        XCTAssertEqual(next, FerryManager.Batch(succeeded: 1, failed: 0, cancelled: 0))
    }

    /// What the service holds for a session comes back typed, with the defaults for
    /// what was never set, what an earlier run set, and no secret.
    func testASessionsStoredConfigurationComesBackWithoutSecrets() async throws {
        var c = configuration("org.example.Stored")
        c.httpAdditionalHeaders = ["Authorization": "Bearer s3cret-token"]
        c.speedLimit = 5000
        c.retries = 2
        c.proxy = URL(string: "http://user:pa55word@127.0.0.1:9/")
        c.downloadDirectory = URL(fileURLWithPath: work, isDirectory: true)
        c.allowsExpensiveNetworkAccess = false
        let first = FerrySession(configuration: c)
        let stored = try await first.storedConfiguration()
        first.detach()
        XCTAssertEqual(stored.identifier, "org.example.Stored")
        XCTAssertTrue(stored.isPersistent)
        XCTAssertEqual(stored.httpAdditionalHeaders, ["Authorization": "(hidden)"])
        XCTAssertEqual(stored.speedLimit, 5000)
        XCTAssertEqual(stored.retries, 2)
        XCTAssertEqual(stored.allowsExpensiveNetworkAccess, false)
        XCTAssertEqual(stored.downloadDirectory?.path, work)
        XCTAssertEqual(stored.proxy?.host, "127.0.0.1")
        XCTAssertEqual(stored.proxy?.port, 9)
        XCTAssertFalse(stored.proxy?.absoluteString.contains("pa55word") ?? true, "\(stored.proxy as Any)")
        XCTAssertEqual(stored.httpMaximumConnectionsPerHost, 6, "the default of what was never set")
        XCTAssertEqual(stored.timeoutIntervalForRequest, 60)
        XCTAssertEqual(stored.httpShouldSetCookies, true)
        XCTAssertNil(stored.applicationID)
        XCTAssertEqual(stored.busAddress, bus.address)

        // A later run that sets only the identifier finds what the first one set.
        var again = configuration("org.example.Stored")
        again.retries = 4
        let second = FerrySession(configuration: again)
        defer { second.detach() }
        let kept = try await second.storedConfiguration()
        XCTAssertEqual(kept.speedLimit, 5000)
        XCTAssertEqual(kept.retries, 4)
        XCTAssertEqual(kept.httpAdditionalHeaders, ["Authorization": "(hidden)"])
        var same = kept
        same.readHeaders = nil
        same.readProxy = nil
        same.sendsPersistence.toggle()
        XCTAssertEqual(same, kept, "equal by what the app sees, not by what the library remembers of the read")

        // The proxy and the folder set back to the service's defaults (nil keeps them).
        var reset = configuration("org.example.Stored")
        reset.resetToDefault(.proxy)
        reset.resetToDefault(.downloadDirectory)
        let third = FerrySession(configuration: reset)
        defer { third.detach() }
        let defaults = try await third.storedConfiguration()
        XCTAssertNil(defaults.proxy)
        XCTAssertNotEqual(defaults.downloadDirectory?.path, work, "the XDG download directory again")
        XCTAssertEqual(defaults.speedLimit, 5000, "the rest kept")
    }

    /// A session opened with what `storedConfiguration()` read back keeps the real
    /// secrets: the server still gets the token, not "(hidden)".
    func testAStoredConfigurationReusedKeepsTheSecrets() async throws {
        var c = configuration("org.example.Reused")
        c.httpAdditionalHeaders = ["Authorization": "Bearer s3cret-token"]
        let first = FerrySession(configuration: c)
        var read = try await first.storedConfiguration()
        first.detach()
        read.retries = 1
        let again = FerrySession(configuration: read)
        defer { again.detach() }
        serve("/secret.bin", size: 10)
        let task = try await again.download(from: URL(string: server.url("/secret.bin"))!, to: URL(fileURLWithPath: work + "/secret.bin"))
        _ = try await task.value
        XCTAssertEqual(server.requests(for: "/secret.bin").last?.header("Authorization"), "Bearer s3cret-token")
        let retries = try await again.storedConfiguration().retries
        XCTAssertEqual(retries, 1, "what was changed is sent")
    }

    /// Read back, one header added and one changed: the header left as read keeps its
    /// real value, not the "(hidden)" it reads as.
    func testAHeaderAddedToAStoredConfigurationKeepsTheOthersSecrets() async throws {
        var c = configuration("org.example.Edited")
        c.httpAdditionalHeaders = ["Authorization": "Bearer s3cret-token", "X-App": "one"]
        let first = FerrySession(configuration: c)
        var read = try await first.storedConfiguration()
        first.detach()
        XCTAssertEqual(read.httpAdditionalHeaders?["Authorization"], "(hidden)")
        read.httpAdditionalHeaders?["X-Extra"] = "added"
        read.httpAdditionalHeaders?["X-App"] = "two"
        let again = FerrySession(configuration: read)
        defer { again.detach() }
        serve("/edited.bin", size: 10)
        let task = try await again.download(from: URL(string: server.url("/edited.bin"))!, to: URL(fileURLWithPath: work + "/edited.bin"))
        _ = try await task.value
        let request = server.requests(for: "/edited.bin").last
        XCTAssertEqual(request?.header("Authorization"), "Bearer s3cret-token", "kept, though sent back as (hidden)")
        XCTAssertEqual(request?.header("X-App"), "two", "changed")
        XCTAssertEqual(request?.header("X-Extra"), "added", "added")
        let names = try await again.storedConfiguration().httpAdditionalHeaders.map { Set($0.keys) }
        XCTAssertEqual(names, ["Authorization", "X-App", "X-Extra"])
    }
}
