import Dispatch
import FerryCore
import Foundation
import Synchronization
import XCTest
@testable import FerryEngine

final class EngineInboxTests: XCTestCase {
    /// A daemon that runs for weeks hands its core millions of events, each through the
    /// same handler. Each must cost one call, however many came before: when the handler
    /// was a closure kept straight in a `Mutex`, every event wrapped it in one more
    /// conversion thunk, so the n-th event went n calls deep — quadratic CPU, then a
    /// stack overflow. On a thread with a small stack such a chain overflows within a
    /// few thousand events; 100,000 must all arrive.
    func testEveryEventReachesTheHandlerOneCallDeepAfterMany() {
        let events = 100_000
        // Any address: the multi handle is used only to wake the engine on `post`, which
        // this test never calls.
        let inbox = EngineInbox(multi: UnsafeMutableRawPointer(bitPattern: 0x1000)!)
        let received = Count()
        inbox.setHandler { _ in received.value.add(1, ordering: .relaxed) }
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            for i in 0..<events { inbox.currentHandler?(.completed(TransferID(i), .stopped(bytesOnDisk: 0))) }
            done.signal()
        }
        thread.stackSize = 256 * 1024
        thread.start()
        XCTAssertEqual(done.wait(timeout: .now() + 120), .success, "the events were all handed over")
        XCTAssertEqual(received.value.load(ordering: .relaxed), events)
    }

    private final class Count: Sendable {
        let value = Atomic<Int>(0)
    }
}
