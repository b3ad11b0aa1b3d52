import XCTest
@testable import FerryCore

final class TransferStateMachineTests: XCTestCase {
    func testAllowedMoves() {
        let allowed: [(TransferState, TransferState)] = [
            (.queued, .running), (.queued, .waiting), (.queued, .paused), (.queued, .cancelled), (.queued, .failed),
            (.waiting, .queued), (.waiting, .paused), (.waiting, .cancelled), (.waiting, .failed),
            (.running, .completed), (.running, .failed), (.running, .paused), (.running, .cancelled),
            (.running, .waiting), (.running, .queued),
            (.paused, .queued), (.paused, .waiting), (.paused, .cancelled),
            (.failed, .queued), (.failed, .waiting), (.failed, .cancelled),
        ]
        for from in TransferState.allCases {
            for to in TransferState.allCases {
                let expected = allowed.contains { $0 == (from, to) }
                XCTAssertEqual(TransferStateMachine.canMove(from: from, to: to), expected, "\(from) -> \(to)")
            }
        }
    }

    func testFinalStatesOnlyLeaveByResume() {
        for to in TransferState.allCases {
            XCTAssertFalse(TransferStateMachine.canMove(from: .completed, to: to))
            XCTAssertFalse(TransferStateMachine.canMove(from: .cancelled, to: to))
        }
        XCTAssertTrue(TransferStateMachine.canMove(from: .failed, to: .cancelled), "a failed transfer can be given up for good")
        XCTAssertFalse(TransferStateMachine.canMove(from: .failed, to: .completed))
        XCTAssertNoThrow(try TransferStateMachine.check(.cancel, state: .failed, transfer: 3))
    }

    func testActionChecksNameStateAndAlternatives() {
        XCTAssertFerryError(try TransferStateMachine.check(.pause, state: .completed, transfer: 7), { error in
            error == .invalidState("transfer 7 is completed; only queued, waiting or running transfers can be paused")
        })
        XCTAssertFerryError(try TransferStateMachine.check(.resume, state: .running, transfer: 3), { $0.isInvalidState && $0.message.contains("paused or failed") })
        XCTAssertFerryError(try TransferStateMachine.check(.remove, state: .paused, transfer: 3), { $0.isInvalidState && $0.message.contains("removed") })
        XCTAssertNoThrow(try TransferStateMachine.check(.cancel, state: .paused, transfer: 3))
        XCTAssertNoThrow(try TransferStateMachine.check(.setURL, state: .failed, transfer: 3))
    }

    func testEveryActionAllowedStateIsConsistentWithMoves() {
        // What the actions allow must be reachable by a legal move.
        for state in TransferStateMachine.Action.pause.allowedStates { XCTAssertTrue(TransferStateMachine.canMove(from: state, to: .paused)) }
        for state in TransferStateMachine.Action.resume.allowedStates { XCTAssertTrue(TransferStateMachine.canMove(from: state, to: .queued)) }
        for state in TransferStateMachine.Action.cancel.allowedStates { XCTAssertTrue(TransferStateMachine.canMove(from: state, to: .cancelled)) }
    }
}
