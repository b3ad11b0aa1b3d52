/// Where a transfer is in its life (the bus property `State`).
public enum TransferState: String, Sendable, Codable, CaseIterable {
    case queued, waiting, running, paused, completed, failed, cancelled

    /// completed, failed or cancelled: nothing more will happen to it.
    public var isFinal: Bool { self == .completed || self == .failed || self == .cancelled }
}

/// Why a transfer is `waiting` (the bus property `WaitingReason`).
public enum WaitingReason: String, Sendable, Codable, CaseIterable {
    /// Its `startAfter` time has not come yet.
    case startAfter = "start-after"
    /// The network is metered and the session does not allow it.
    case metered
    /// There is no network.
    case offline
    /// It failed with a transient error and waits before trying again.
    case retry
    /// (v1.2) A discretionary transfer while the machine runs on battery.
    case battery
    /// (v1.2) A discretionary transfer while the power-saver profile is active.
    case powerSaver = "power-saver"
    /// (v1.2) The service's schedule holds it back: a discretionary transfer outside
    /// the discretionary-only windows, or another one, not yet started, inside one.
    case schedule
}
