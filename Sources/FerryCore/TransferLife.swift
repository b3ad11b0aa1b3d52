/// A transfer's life as a value: its state with the data each state carries, and the
/// rules for every move. Each input changes the value and returns what the coordinator
/// has to do about it (SwiftNIO's state-machine style); nothing else writes a
/// transfer's state. `TransferStateMachine` says which client actions each state allows.
struct TransferLife: Equatable {
    enum Phase: Equatable {
        case queued
        /// Waiting for a time (`start-after`, `retry`: until that moment, µs) or for the
        /// network, power or schedule (`offline`, `metered`, `battery`, `power-saver`,
        /// `schedule`: `until` is `.max`, the conditions decide).
        case waiting(WaitingReason, until: UInt64)
        case running(Attempt)
        case paused
        case completed
        case failed
        case cancelled
    }

    /// One try at moving the bytes. Downloads, uploads and segmented downloads are kinds
    /// of attempt.
    struct Attempt: Equatable {
        enum Kind: Equatable {
            case download
            case segmented(connections: UInt32)
            case upload
            /// A dedupe follower's: no engine attempt of its own, it shows its leader's
            /// (`mirror`), so there is nothing to stop.
            case following
            /// A dedupe follower whose leader completed: its copy of the leader's file is
            /// being made off the core's queue (`FetchedCopier`). Stopping it cancels the
            /// copy, whose end is still reported (`copiesEnded`): until then the copy may
            /// write the `.part`, so the transfer is not started again.
            case copying
        }
        var kind: Kind
        /// 1 for the first try.
        var number: UInt32
        /// Where the body starts in the file (0 for uploads: they always start over).
        var offset: Int64
        /// The engine has reported its end; what follows is being decided.
        var ended = false
    }

    /// What the coordinator must do after an input.
    enum Action: Equatable {
        /// Stop the engine's attempt; its end will still be reported (see `stopping`).
        case stopAttempt
        /// Cancel the copy of the leader's file (`Attempt.Kind.copying`); its end will
        /// still be reported (see `stopping`).
        case stopCopy
        /// Wake the transfer at this moment (µs) to queue it again.
        case wake(at: UInt64)
    }

    /// How an engine attempt's end is to be taken.
    enum AttemptEnd: Equatable {
        /// The attempt was stopping (paused, cancelled, waiting for the network,
        /// removed): only its bytes on disk count.
        case stopped
        /// The running attempt ended: its outcome decides what follows.
        case current
    }

    private(set) var phase: Phase
    /// An attempt was told to stop and its end has not come: the transfer is not
    /// started again before it has.
    private(set) var stopping = false

    init(_ phase: Phase) { self.phase = phase }

    /// A stored transfer's life after a restart: what was running is queued again (its
    /// attempt died with the old daemon).
    init(restoring state: TransferState, waitingReason: String, notBefore: UInt64) {
        switch state {
        case .queued, .running: phase = .queued
        case .waiting: phase = .waiting(WaitingReason(rawValue: waitingReason) ?? .retry, until: notBefore)
        case .paused: phase = .paused
        case .completed: phase = .completed
        case .failed: phase = .failed
        case .cancelled: phase = .cancelled
        }
    }

    // MARK: - What it is

    var state: TransferState {
        switch phase {
        case .queued: return .queued
        case .waiting: return .waiting
        case .running: return .running
        case .paused: return .paused
        case .completed: return .completed
        case .failed: return .failed
        case .cancelled: return .cancelled
        }
    }

    var waitingReason: WaitingReason? {
        if case .waiting(let reason, _) = phase { return reason }
        return nil
    }

    /// Waiting for conditions (the network, power, the schedule) rather than for a time.
    var isWaitingForNetwork: Bool { waitingReason?.isCondition ?? false }

    /// While waiting for a time: not before this moment (µs); `.max` for network waits.
    var notBefore: UInt64 {
        if case .waiting(_, let until) = phase { return until }
        return 0
    }

    /// Queued with no attempt still stopping: the scheduler may start it.
    var isStartable: Bool { phase == .queued && !stopping }

    var attempt: Attempt? {
        if case .running(let a) = phase { return a }
        return nil
    }

    /// Running as a dedupe follower, following its leader or copying its file (see
    /// `Attempt.Kind.following`, `.copying`): it holds no connection.
    var isFollowing: Bool { attempt?.kind == .following || attempt?.kind == .copying }

    /// Running as a dedupe follower whose copy of its leader's file is being made.
    var isCopying: Bool { attempt?.kind == .copying }

    // MARK: - Inputs

    /// The scheduler starts it.
    mutating func start(_ attempt: Attempt) {
        precondition(isStartable, "start while \(phase), stopping \(stopping)")
        phase = .running(attempt)
    }

    /// The client pauses it (queued, waiting or running).
    mutating func pause() -> [Action] {
        let actions = stopIfRunning()
        move(.paused)
        return actions
    }

    /// The client resumes it (paused or failed): queued, or waiting again for a
    /// `start-after` still in the future.
    mutating func resume(startAfter: UInt64, now: UInt64) -> [Action] {
        if startAfter > now {
            move(.waiting(.startAfter, until: startAfter))
            return [.wake(at: startAfter)]
        }
        move(.queued)
        return []
    }

    /// Cancelled for good (user, session close, takeover by resume data).
    mutating func cancel() -> [Action] {
        let actions = stopIfRunning()
        move(.cancelled)
        return actions
    }

    /// The network does not allow it now: it waits (a running attempt stops at a
    /// resumable point). Already waiting for the network: the reason follows.
    mutating func waitForNetwork(_ reason: WaitingReason) -> [Action] {
        precondition(reason.isCondition)
        if isWaitingForNetwork {
            phase = .waiting(reason, until: .max)
            return []
        }
        let actions = stopIfRunning()
        move(.waiting(reason, until: .max))
        return actions
    }

    /// The machine moved to another network: a running attempt stops at a resumable
    /// point and the transfer is queued again at once (started once the stop has ended).
    mutating func restartOnNewNetwork() -> [Action] {
        let actions = stopIfRunning()
        move(.queued)
        return actions
    }

    /// The network allows it again.
    mutating func networkAllows() {
        precondition(isWaitingForNetwork)
        move(.queued)
    }

    /// A transient failure: try again at `due`.
    mutating func retry(at due: UInt64) -> [Action] {
        move(.waiting(.retry, until: due))
        return [.wake(at: due)]
    }

    /// Its time has come: a timed wait that is due goes back to the queue.
    /// - Returns: whether it did.
    mutating func wake(now: UInt64) -> Bool {
        guard case .waiting(let reason, let until) = phase, reason == .startAfter || reason == .retry, until <= now else {
            return false
        }
        move(.queued)
        return true
    }

    /// The engine stopped the attempt on its own (shutting down): it waits for its turn.
    mutating func requeue() { move(.queued) }

    /// The engine reports the end of an attempt.
    mutating func attemptEnded() -> AttemptEnd? {
        if stopping {
            stopping = false
            return .stopped
        }
        guard case .running(var attempt) = phase else { return nil }
        attempt.ended = true
        phase = .running(attempt)
        return .current
    }

    mutating func complete() { move(.completed) }

    /// A dedupe follower shows its leader's state: queued, waiting (for the same reason
    /// and time) or running (a `following` attempt). A leader in any other state
    /// changes nothing: the coordinator ends the following first.
    mutating func mirror(_ leader: TransferLife) {
        precondition(state.isActive && !stopping, "mirror while \(phase), stopping \(stopping)")
        switch leader.phase {
        case .queued: phase = .queued
        case .waiting(let reason, let until): phase = .waiting(reason, until: until)
        case .running(let a): phase = .running(Attempt(kind: .following, number: a.number, offset: 0))
        case .paused, .completed, .failed, .cancelled: break
        }
    }

    /// A dedupe follower whose leader completed: it runs while it gets its own copy
    /// (`copying`; `attemptEnded` when the copy is over).
    mutating func receiveCopy() {
        precondition(state.isActive && !stopping, "receiveCopy while \(phase), stopping \(stopping)")
        phase = .running(Attempt(kind: .copying, number: max(attempt?.number ?? 1, 1), offset: 0))
    }

    /// A dedupe follower fetches for itself from now on (its leader stopped): queued.
    mutating func stopFollowing() {
        precondition(state.isActive && !stopping, "stopFollowing while \(phase), stopping \(stopping)")
        phase = .queued
    }

    /// At a restart: the store says the verified file had reached its final place.
    mutating func finishedBeforeRestart() {
        precondition(!state.isFinal && !stopping)
        phase = .completed
    }

    /// Fails it for good (until resumed): from running, or before it could start.
    mutating func fail() -> [Action] {
        let actions = stopIfRunning()
        move(.failed)
        return actions
    }

    // MARK: -

    private mutating func stopIfRunning() -> [Action] {
        guard case .running(let attempt) = phase, !attempt.ended, attempt.kind != .following else { return [] }
        stopping = true
        return [attempt.kind == .copying ? .stopCopy : .stopAttempt]
    }

    private mutating func move(_ next: Phase) {
        let to = TransferLife(next).state
        precondition(TransferStateMachine.canMove(from: state, to: to), "illegal move \(state) -> \(to)")
        phase = next
    }
}
