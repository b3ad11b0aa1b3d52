/// Hands out session ids, transfer ids and event serials, and knows which of them the
/// store's counters already cover.
///
/// Rules: an id or serial is never handed out twice, not even after a restart. Those of
/// persistent sessions go with the counters written in the same transaction; ephemeral
/// sessions and their transfers and events are never written, so their ids are reserved
/// in the store a block at a time (`reservation`, then `reserved` once written).
struct IDAllocator {
    /// How many ids one store write reserves for ephemeral sessions and transfers.
    static let reservationBlock: UInt64 = 1024

    /// The next id or serial to hand out.
    private(set) var nextSessionID: SessionID = 1
    private(set) var nextTransferID: TransferID = 1
    private(set) var nextSerial: UInt64 = 1
    /// The stored counters already keep ids below these from being handed out again.
    private var reservedSessionIDs: SessionID = 0
    private var reservedTransferIDs: TransferID = 0
    private var reservedSerials: UInt64 = 0

    /// The counters to store: past every id handed out or reserved.
    func counters(nextGroupID: GroupID) -> StoreCounters {
        StoreCounters(nextSessionID: max(nextSessionID, reservedSessionIDs),
                      nextTransferID: max(nextTransferID, reservedTransferIDs),
                      nextSerial: max(nextSerial, reservedSerials), nextGroupID: nextGroupID)
    }

    /// `session` (handed out now) is taken: the next session gets the one after it.
    mutating func tookSession(_ session: SessionID) {
        nextSessionID = session + 1
    }

    /// Transfers up to `last` (handed out now, consecutively from `nextTransferID`) are
    /// taken.
    mutating func tookTransfers(through last: TransferID) {
        nextTransferID = last + 1
    }

    /// The next event serial, taken.
    mutating func takeSerial() -> UInt64 {
        defer { nextSerial += 1 }
        return nextSerial
    }

    /// Carries on from what the store held: past its counters and past every id and
    /// serial found in it.
    mutating func restore(_ stored: StoreCounters, maxSession: SessionID, maxTransfer: TransferID, maxSerial: UInt64) {
        nextSessionID = max(nextSessionID, stored.nextSessionID, maxSession + 1)
        nextTransferID = max(nextTransferID, stored.nextTransferID, maxTransfer + 1)
        nextSerial = max(nextSerial, stored.nextSerial, maxSerial + 1)
    }

    /// The counters to write so that a restart never hands out `session`, `transfer` or
    /// `serial` again although nothing of theirs is stored: moved a block past those that
    /// reach the last reservation. Nil when the stored counters already cover them.
    func reservation(session: SessionID? = nil, transfer: TransferID? = nil, serial: UInt64? = nil,
                     nextGroupID: GroupID) -> StoreCounters? {
        let needsSession = session.map { $0 >= reservedSessionIDs } ?? false
        let needsTransfer = transfer.map { $0 >= reservedTransferIDs } ?? false
        let needsSerial = serial.map { $0 >= reservedSerials } ?? false
        guard needsSession || needsTransfer || needsSerial else { return nil }
        var next = counters(nextGroupID: nextGroupID)
        if needsSession, let session { next.nextSessionID = session + Self.reservationBlock }
        if needsTransfer, let transfer { next.nextTransferID = transfer + Self.reservationBlock }
        if needsSerial, let serial { next.nextSerial = serial + Self.reservationBlock }
        return next
    }

    /// `counters` (from `reservation`) are written: ids below them are reserved.
    mutating func reserved(_ counters: StoreCounters) {
        reservedSessionIDs = counters.nextSessionID
        reservedTransferIDs = counters.nextTransferID
        reservedSerials = counters.nextSerial
    }
}
