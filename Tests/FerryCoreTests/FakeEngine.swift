import Foundation
@testable import FerryCore
@_exported import FerryCoreTestSupport

/// A clock the test moves by hand.
final class FakeClock: @unchecked Sendable {
    // Read on the core's queue, written by the test between queue.sync calls.
    private let lock = NSLock()
    private var value: UInt64
    init(_ start: UInt64 = 1_700_000_000_000_000) { value = start }
    var now: UInt64 { lock.lock(); defer { lock.unlock() }; return value }
    func advance(seconds: Double) {
        lock.lock(); defer { lock.unlock() }
        value += UInt64(seconds * 1_000_000)
    }
}

/// Free space as the test says: nil (unknown) unless set.
final class FakeDisk: @unchecked Sendable {
    // Read on the core's queue, written by the test between queue.sync calls.
    private let lock = NSLock()
    private var bytes: Int64?
    private var _asked: [String] = []
    init(free: Int64? = nil) { bytes = free }
    func free(_ path: String) -> Int64? {
        lock.lock(); defer { lock.unlock() }
        _asked.append(path)
        return bytes
    }
    func set(free: Int64?) {
        lock.lock(); defer { lock.unlock() }
        bytes = free
    }
    /// The directories the core asked about.
    var asked: [String] { lock.lock(); defer { lock.unlock() }; return _asked }
}
