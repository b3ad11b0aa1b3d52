import XCTest
@testable import FerryCore

/// The value-type state machine of one transfer: each input's new state and the
/// actions the coordinator must carry out.
final class TransferLifeTests: XCTestCase {
    private let attempt = TransferLife.Attempt(kind: .download, number: 1, offset: 0)

    private func running() -> TransferLife {
        var life = TransferLife(.queued)
        life.start(attempt)
        return life
    }

    func testPausingARunningTransferStopsItsAttemptAndHoldsTheNextStart() {
        var life = running()
        XCTAssertEqual(life.pause(), [.stopAttempt])
        XCTAssertEqual(life.state, .paused)
        XCTAssertTrue(life.stopping)
        // Resumed before the old attempt has ended: queued, but not startable yet.
        XCTAssertEqual(life.resume(startAfter: 0, now: 10), [])
        XCTAssertEqual(life.state, .queued)
        XCTAssertFalse(life.isStartable)
        XCTAssertEqual(life.attemptEnded(), .stopped)
        XCTAssertTrue(life.isStartable)
    }

    func testAMoveToAnotherNetworkQueuesARunningTransferOnceItsAttemptHasStopped() {
        var life = running()
        XCTAssertEqual(life.restartOnNewNetwork(), [.stopAttempt])
        XCTAssertEqual(life.state, .queued)
        XCTAssertFalse(life.isStartable, "not started while the old attempt may still write")
        XCTAssertEqual(life.attemptEnded(), .stopped)
        XCTAssertTrue(life.isStartable)
    }

    func testAFollowersCopyIsStoppedAndWaitedForLikeAnAttempt() {
        var life = TransferLife(.queued)
        life.mirror(TransferLife(.running(attempt)))
        XCTAssertEqual(life.pause(), [], "following: nothing of its own to stop")
        life = TransferLife(.queued)
        life.receiveCopy()
        XCTAssertTrue(life.isCopying)
        XCTAssertTrue(life.isFollowing, "no connection of its own")
        XCTAssertEqual(life.pause(), [.stopCopy])
        XCTAssertEqual(life.resume(startAfter: 0, now: 10), [])
        XCTAssertFalse(life.isStartable, "not started while the copy may still write its .part")
        XCTAssertEqual(life.attemptEnded(), .stopped)
        XCTAssertTrue(life.isStartable)
        var done = TransferLife(.queued)
        done.receiveCopy()
        XCTAssertEqual(done.attemptEnded(), .current)
        XCTAssertEqual(done.cancel(), [], "the copy is over: nothing to stop")
    }

    func testPausingWhatDoesNotRunStopsNothing() {
        var queued = TransferLife(.queued)
        XCTAssertEqual(queued.pause(), [])
        var waiting = TransferLife(.waiting(.retry, until: 50))
        XCTAssertEqual(waiting.pause(), [])
        XCTAssertEqual(waiting.state, .paused)
        XCTAssertEqual(waiting.notBefore, 0, "a paused transfer waits for nothing")
    }

    func testResumeHonoursAStartAfterStillInTheFuture() {
        var life = TransferLife(.paused)
        XCTAssertEqual(life.resume(startAfter: 100, now: 10), [.wake(at: 100)])
        XCTAssertEqual(life.waitingReason, .startAfter)
        XCTAssertFalse(life.wake(now: 99))
        XCTAssertTrue(life.wake(now: 100))
        XCTAssertEqual(life.state, .queued)
    }

    func testARetryWaitsForItsTime() {
        var life = running()
        XCTAssertEqual(life.attemptEnded(), .current)
        XCTAssertEqual(life.retry(at: 500), [.wake(at: 500)])
        XCTAssertEqual(life.waitingReason, .retry)
        XCTAssertEqual(life.notBefore, 500)
        XCTAssertFalse(life.stopping, "the attempt had ended: nothing to stop")
    }

    func testTheNetworkHoldsAndReleases() {
        var life = running()
        XCTAssertEqual(life.waitForNetwork(.metered), [.stopAttempt])
        XCTAssertTrue(life.isWaitingForNetwork)
        XCTAssertEqual(life.notBefore, .max)
        XCTAssertFalse(life.wake(now: .max), "no timer wakes a network wait")
        XCTAssertEqual(life.waitForNetwork(.offline), [], "the reason follows the network")
        XCTAssertEqual(life.waitingReason, .offline)
        life.networkAllows()
        XCTAssertEqual(life.state, .queued)
        XCTAssertFalse(life.isStartable, "its stopped attempt has not ended yet")
        XCTAssertEqual(life.attemptEnded(), .stopped)
        XCTAssertTrue(life.isStartable)
    }

    func testFailingAfterTheAttemptEndedStopsNothing() {
        var ended = running()
        XCTAssertEqual(ended.attemptEnded(), .current)
        XCTAssertEqual(ended.fail(), [])
        XCTAssertEqual(ended.state, .failed)
        // Failing while the attempt still runs (no disk space, deadline) stops it.
        var live = running()
        XCTAssertEqual(live.fail(), [.stopAttempt])
        XCTAssertEqual(live.attemptEnded(), .stopped)
    }

    func testCancelFromEveryLiveState() {
        for phase: TransferLife.Phase in [.queued, .waiting(.retry, until: 1), .paused, .failed] {
            var life = TransferLife(phase)
            XCTAssertEqual(life.cancel(), [], "\(phase)")
            XCTAssertEqual(life.state, .cancelled)
        }
        var life = running()
        XCTAssertEqual(life.cancel(), [.stopAttempt])
    }

    func testRestoringQueuesWhatWasRunning() {
        XCTAssertEqual(TransferLife(restoring: .running, waitingReason: "", notBefore: 0).phase, .queued)
        XCTAssertEqual(TransferLife(restoring: .waiting, waitingReason: "metered", notBefore: .max).phase,
                       .waiting(.metered, until: .max))
        XCTAssertEqual(TransferLife(restoring: .waiting, waitingReason: "start-after", notBefore: 77).notBefore, 77)
        XCTAssertEqual(TransferLife(restoring: .paused, waitingReason: "", notBefore: 0).state, .paused)
    }

    func testAnEndThatBelongsToNoAttemptIsIgnored() {
        var life = TransferLife(.paused)
        XCTAssertNil(life.attemptEnded())
    }
}
