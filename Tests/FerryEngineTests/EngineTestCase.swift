import FerryCore
import FerryEngine
import FerryTestSupport
import Foundation
import XCTest

/// Collects engine events (delivered on the engine thread) and lets a test wait for
/// them with a bound.
final class EventLog: @unchecked Sendable {
    // @unchecked Sendable: every field is read and written under `condition`.
    private let condition = NSCondition()
    private var events: [(event: EngineEvent, at: Date)] = []
    private var threads = Set<UInt>()

    func append(_ event: EngineEvent) {
        condition.lock()
        events.append((event, Date()))
        threads.insert(UInt(pthread_self()))
        condition.broadcast()
        condition.unlock()
    }

    /// The events of one transfer, oldest first, with the time they arrived.
    func timedEvents(for id: TransferID) -> [(event: EngineEvent, at: Date)] {
        condition.lock(); defer { condition.unlock() }
        return events.filter { $0.event.transferID == id }
    }

    func events(for id: TransferID) -> [EngineEvent] {
        timedEvents(for: id).map(\.event)
    }

    var all: [EngineEvent] {
        condition.lock(); defer { condition.unlock() }
        return events.map(\.event)
    }

    /// How many distinct threads delivered events.
    var threadCount: Int {
        condition.lock(); defer { condition.unlock() }
        return threads.count
    }

    /// Waits (bounded) until `predicate` holds over all events so far.
    @discardableResult
    func wait(timeout: TimeInterval, until predicate: ([EngineEvent]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock(); defer { condition.unlock() }
        while !predicate(events.map(\.event)) {
            if !condition.wait(until: deadline) { return predicate(events.map(\.event)) }
        }
        return true
    }

    /// The outcome of the transfer's attempt, waiting for it up to `timeout`.
    func outcome(of id: TransferID, timeout: TimeInterval) -> EngineOutcome? {
        var result: EngineOutcome?
        wait(timeout: timeout) { events in
            for case .completed(id, let outcome) in events {
                result = outcome
                return true
            }
            return false
        }
        return result
    }
}

extension EngineEvent {
    var transferID: TransferID {
        switch self {
        case .response(let id, _), .progress(let id, _, _, _), .completed(let id, _), .segments(let id, _),
             .connectionsFreed(let id), .unansweredStream(let id), .durable(let id, _): return id
        }
    }

    var segments: SegmentMap? {
        if case .segments(_, let map) = self { return map }
        return nil
    }

    var response: EngineResponse? {
        if case .response(_, let r) = self { return r }
        return nil
    }

    var progress: (bytesWritten: Int64, totalOnDisk: Int64, expected: Int64)? {
        if case .progress(_, let w, let t, let e) = self { return (w, t, e) }
        return nil
    }

    var isCompleted: Bool {
        if case .completed = self { return true }
        return false
    }
}

/// A real CurlEngine against a real loopback TestHTTPServer, in a temp directory.
class EngineTestCase: XCTestCase {
    var server: TestHTTPServer!
    var engine: CurlEngine!
    var log: EventLog!
    var directory: URL!

    override func setUpWithError() throws {
        server = TestHTTPServer()
        try server.start()
        log = EventLog()
        engine = CurlEngine()
        engine.setEventHandler { [log] event in log!.append(event) }
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-engine-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        engine?.shutdown()
        server?.stop()
        if let directory {
            _ = chmod(directory.path, 0o755)
            try? FileManager.default.removeItem(at: directory)
        }
        engine = nil
        server = nil
        super.tearDown()
    }

    /// What this process has open under `folder` (from /proc/self/fd).
    func descriptorsOpen(under folder: String) -> [String] {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
            .filter { $0.hasPrefix(folder + "/") }
    }

    func partPath(_ name: String = "file.part") -> String {
        directory.appendingPathComponent(name).path
    }

    func request(_ id: TransferID, _ path: String, part: String? = nil, offset: Int64 = 0, ifRange: String? = nil,
                 speedLimit: UInt64 = 0, requestTimeout: Double = 30, sha: Bool = false,
                 headers: [(name: String, value: String)] = []) -> EngineRequest {
        EngineRequest(id: id, url: server.url(path), headers: headers, partPath: part ?? partPath("\(id).part"),
                      offset: offset, ifRange: ifRange, speedLimit: speedLimit, requestTimeout: requestTimeout,
                      computeSHA256: sha)
    }

    /// Starts the request and waits (bounded) for its outcome.
    func run(_ request: EngineRequest, timeout: TimeInterval = 30,
             file: StaticString = #filePath, line: UInt = #line) -> EngineOutcome? {
        engine.start(request)
        let outcome = log.outcome(of: request.id, timeout: timeout)
        XCTAssertNotNil(outcome, "no completion for transfer \(request.id) within \(timeout) s", file: file, line: line)
        return outcome
    }

    func contents(_ path: String) -> [UInt8] {
        (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))) ?? []
    }

    func write(_ bytes: [UInt8], to path: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    func responses(_ id: TransferID) -> [EngineResponse] {
        log.events(for: id).compactMap(\.response)
    }

    /// Asserts the per-transfer event order: at most one response, first; progress
    /// counts add up; exactly one completion, last.
    /// One completion, last; at most one response. A download's body (its progress)
    /// comes after the response; an upload's body goes before the server answers, so
    /// its progress is all reported before the response.
    func assertWellFormedEvents(_ id: TransferID, upload: Bool = false, file: StaticString = #filePath, line: UInt = #line) {
        let events = log.events(for: id)
        XCTAssertEqual(events.filter(\.isCompleted).count, 1, "one completion", file: file, line: line)
        XCTAssertTrue(events.last?.isCompleted ?? false, "completion is last", file: file, line: line)
        let responseIndices = events.indices.filter { events[$0].response != nil }
        XCTAssertLessThanOrEqual(responseIndices.count, 1, "at most one response", file: file, line: line)
        if let r = responseIndices.first {
            if upload {
                XCTAssertFalse(events[r...].contains { $0.progress != nil }, "no progress after the response", file: file, line: line)
            } else {
                XCTAssertFalse(events[..<r].contains { $0.progress != nil }, "no progress before the response", file: file, line: line)
            }
        }
    }
}
