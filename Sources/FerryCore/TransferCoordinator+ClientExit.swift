import Dispatch

/// The session key `on-client-exit`: what a session's unfinished transfers do when the
/// last bus connection that opened or used it leaves the bus. The service follows the
/// connections (`clientsLeft`, `clientReturned`); the rules are here.
///
/// A transfer paused by the policy carries a stored mark (`pausedByClientExit`), and its
/// session keeps the set of them, so a client opening the session again resumes those
/// alone (not the ones a user paused) without looking at the session's other transfers.
extension TransferCoordinator {
    /// The session's last client left the bus: applies its `on-client-exit` policy.
    /// `continue` changes nothing; `pause` pauses its queued, waiting and running
    /// transfers (marked, for `clientReturned`), but for a POST awaiting its answer
    /// (resumed, it would be sent again: it runs on); `cancel` cancels every unfinished one.
    /// Nothing happens for an unknown session.
    public func clientsLeft(session id: SessionID) {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        guard let s = sessions[id] else { return }
        let policy = s.configuration.onClientExit
        guard policy != .continue else { return }
        let own = index.ids(session: id).compactMap { transfers[$0] }
        mutate {
            switch policy {
            case .continue:
                break
            case .pause:
                var paused = 0
                for t in own where t.state.isActive && !t.isPOSTAwaitingItsAnswer {
                    // Marked first: the pause stores the transfer with its mark.
                    t.pausedByClientExit = true
                    s.pausedOnClientExit.insert(t.id)
                    pauseTransfer(t)
                    paused += 1
                }
                if paused > 0 { logger.info("session \(s.identifier): its last client left; paused \(paused) transfers") }
            case .cancel:
                var cancelled = 0
                for t in own where TransferStateMachine.Action.cancel.allowedStates.contains(t.state) {
                    cancelTransfer(t, reason: .cancelled("Cancelled because the last client of its session left the bus (on-client-exit is cancel)"),
                                   deletePart: true)
                    cancelled += 1
                }
                if cancelled > 0 { logger.info("session \(s.identifier): its last client left; cancelled \(cancelled) transfers") }
            }
        }
    }

    /// A client opened the session again: the transfers its `on-client-exit` policy
    /// paused are resumed (those alone). O(those transfers).
    public func clientReturned(session id: SessionID) {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        guard let s = sessions[id], !s.pausedOnClientExit.isEmpty else { return }
        let marked = s.pausedOnClientExit.sorted().compactMap { transfers[$0] }
        mutate {
            for t in marked where t.state == .paused { resumeTransfer(t) }
            // Any left (not paused any more) lose their mark too.
            for t in marked where t.pausedByClientExit {
                clearClientExitPause(t)
                stageTransfer(t)
            }
        }
    }

    /// The transfer starts or ends some other way: it is no longer the policy's to
    /// resume. The caller stores the transfer (its `publishChanged` does).
    func clearClientExitPause(_ t: TransferRecord) {
        guard t.pausedByClientExit else { return }
        t.pausedByClientExit = false
        sessions[t.session]?.pausedOnClientExit.remove(t.id)
    }

    /// After a restore: each session's set of the transfers its policy paused, from
    /// their stored marks (a mark on a transfer that is not paused is dropped).
    func restoreClientExitPauses() {
        for t in transfers.values where t.pausedByClientExit {
            if t.state == .paused, let s = sessions[t.session] {
                s.pausedOnClientExit.insert(t.id)
            } else {
                t.pausedByClientExit = false
            }
        }
    }
}
