/// The moves a transfer's `State` may make, and which client actions each state
/// allows. The coordinator asks here before it changes anything.
public enum TransferStateMachine {
    /// Whether `from` → `to` is a legal move.
    public static func canMove(from: TransferState, to: TransferState) -> Bool {
        switch (from, to) {
        // queued/waiting → failed: not enough disk space to start, or the session's
        // resource-timeout ran out before the transfer could finish.
        case (.queued, .running), (.queued, .waiting), (.queued, .paused), (.queued, .cancelled), (.queued, .failed):
            return true
        case (.waiting, .queued), (.waiting, .paused), (.waiting, .cancelled), (.waiting, .failed):
            return true
        // running → queued: the engine stopped an attempt on its own (shutdown).
        // running → waiting: a retry after a transient failure.
        case (.running, .completed), (.running, .failed), (.running, .paused), (.running, .cancelled),
             (.running, .waiting), (.running, .queued):
            return true
        case (.paused, .queued), (.paused, .waiting), (.paused, .cancelled):
            return true
        // failed → cancelled: the user gives up on it (its partial file goes), or its
        // partial file is taken over by a ResumeDownload.
        case (.failed, .queued), (.failed, .waiting), (.failed, .cancelled):
            return true
        default:
            return false
        }
    }

    /// Client actions on one transfer.
    public enum Action: CaseIterable, Sendable {
        case pause, resume, cancel, remove, setURL

        /// The states in which the action is allowed.
        public var allowedStates: [TransferState] {
            switch self {
            case .pause: return [.queued, .waiting, .running]
            case .resume, .setURL: return [.paused, .failed]
            case .cancel: return [.queued, .waiting, .running, .paused, .failed]
            case .remove: return [.completed, .failed, .cancelled]
            }
        }

        var pastParticiple: String {
            switch self {
            case .pause: return "paused"
            case .resume: return "resumed"
            case .cancel: return "cancelled"
            case .remove: return "removed"
            case .setURL: return "given a new URL"
            }
        }
    }

    /// `.invalidState` with a message saying what the state is and what would be
    /// needed, or nothing when the action is allowed.
    public static func check(_ action: Action, state: TransferState, transfer id: TransferID) throws {
        guard !action.allowedStates.contains(state) else { return }
        let names = action.allowedStates.map(\.rawValue)
        let list = names.count == 1 ? names[0]
            : names.dropLast().joined(separator: ", ") + " or " + names.last!
        throw CoreError.invalidState("transfer \(id) is \(state.rawValue); only \(list) transfers can be \(action.pastParticiple)")
    }
}
