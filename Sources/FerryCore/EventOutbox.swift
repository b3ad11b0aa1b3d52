/// The core's event delivery: who hears events and round ends, the events of the change
/// under way, and whether a round of deliveries is going on.
///
/// Rules: events leave in the order they were posted; one round at a time (events that
/// subscribers' calls post during a round are sent in the same round, after the
/// current ones); handlers are only added, never removed.
struct EventOutbox {
    /// Hear every `CoreEvent`, in order (`subscribe`).
    private(set) var subscribers: [(CoreEvent) -> Void] = []
    /// Called after each round of deliveries (`subscribeToRoundEnds`).
    private(set) var roundEndHandlers: [() -> Void] = []
    private var pending: [CoreEvent] = []
    private var isDelivering = false

    var hasPending: Bool { !pending.isEmpty }
    /// A round of deliveries is going on (its subscribers are being called).
    var inRound: Bool { isDelivering }

    mutating func subscribe(_ handler: @escaping (CoreEvent) -> Void) {
        subscribers.append(handler)
    }

    mutating func subscribeToRoundEnds(_ handler: @escaping () -> Void) {
        roundEndHandlers.append(handler)
    }

    mutating func post(_ event: CoreEvent) {
        pending.append(event)
    }

    /// The events posted so far, oldest first; none is pending afterwards.
    mutating func takePending() -> [CoreEvent] {
        defer { pending = [] }
        return pending
    }

    /// Starts a round of deliveries; false when one is going on already (its loop sends
    /// what is posted meanwhile).
    mutating func beginRound() -> Bool {
        guard !isDelivering else { return false }
        isDelivering = true
        return true
    }

    mutating func endRound() {
        isDelivering = false
    }
}
