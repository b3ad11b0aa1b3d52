import Dispatch

extension TransferCoordinator {
    /// The session's properties, nil when there is no such session.
    public func session(_ id: SessionID) -> SessionSnapshot? {
        dispatchPrecondition(condition: .onQueue(queue))
        return sessions[id].map(snapshot(of:))
    }

    /// Completion events not yet acknowledged, oldest first.
    public func pendingEvents(session: SessionID) throws -> [PendingEvent] {
        dispatchPrecondition(condition: .onQueue(queue))
        return try sessionRecord(session).pendingEvents
    }

    /// Drops every pending event with a serial up to and including `serial`.
    public func acknowledgeEvents(session: SessionID, upTo serial: UInt64) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let s = try sessionRecord(session)
        let before = s.pendingEvents.count
        s.pendingEvents.removeAll { $0.serial <= serial }
        if s.configuration.persistent && s.pendingEvents.count != before {
            pendingWrites.append(.acknowledgeEvents(s.id, upTo: serial))
            flushStore()
        }
    }

    /// Forgets the session. With `cancelTransfers` its unfinished transfers are
    /// cancelled and everything goes at once; without, it takes no new downloads and
    /// goes (with its transfers) once they are all completed, failed or cancelled.
    /// Its identifier may be opened again at once, as a new session.
    public func closeSession(_ id: SessionID, cancelTransfers: Bool) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let s = try sessionRecord(id)
        mutate {
            s.isClosing = true
            stageSession(s)
            if cancelTransfers {
                for t in index.ids(session: id).compactMap({ transfers[$0] })
                where TransferStateMachine.Action.cancel.allowedStates.contains(t.state) {
                    cancelTransfer(t, reason: .cancelled("Cancelled because its session was closed"), deletePart: true)
                }
            }
            finishClosingIfDone(s)
        }
    }

    /// Removes a closing session and its transfers once none of them can change any more.
    func finishClosingIfDone(_ s: SessionRecord) {
        guard s.isClosing, sessions[s.id] != nil else { return }
        guard index.unfinishedCount(session: s.id) == 0 else { return }
        for t in index.ids(session: s.id).compactMap({ transfers[$0] }) { forget(t) }
        if s.configuration.persistent { pendingWrites.append(.deleteSession(s.id)) }
        discardCookies(of: s)
        sessions[s.id] = nil
        emit(.sessionRemoved(s.id))
    }

    func snapshot(of s: SessionRecord) -> SessionSnapshot {
        SessionSnapshot(id: s.id, identifier: s.identifier, configuration: s.configuration,
                        activeTransfers: activeCount(s.id))
    }

    /// Queued, waiting and running transfers of a session.
    func activeCount(_ session: SessionID) -> UInt32 {
        UInt32(index.activeCount(session: session))
    }

    /// A session that takes new transfers.
    func openSessionRecord(_ id: SessionID) throws -> SessionRecord {
        let s = try sessionRecord(id)
        guard !s.isClosing else {
            throw FerryError.invalidState("session \(id) ('\(s.identifier)') is closing and takes no new transfers; open it again for a new session")
        }
        return s
    }

    /// Appends a completion event to the session's journal (staged for the store) and
    /// returns its serial. Callers append it before they announce the final state, so
    /// that the state and its event are written together.
    func appendEvent(_ event: PendingEvent, session: SessionID) -> UInt64 {
        var event = event
        event.serial = nextSerial
        nextSerial += 1
        sessions[session]?.pendingEvents.append(event)
        if isPersistent(session) { pendingWrites.append(.appendEvent(session, event)) }
        return event.serial
    }
}
