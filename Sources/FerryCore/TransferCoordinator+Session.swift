import Dispatch

extension TransferCoordinator {
    /// The session's properties, nil when there is no such session.
    public func session(_ id: SessionID) -> SessionSnapshot? {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return sessions[id].map(snapshot(of:))
    }

    /// Completion events not yet acknowledged, oldest first.
    public func pendingEvents(session: SessionID) throws -> [PendingEvent] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return try sessionRecord(session).pendingEvents
    }

    /// A page of the events not acknowledged: those after serial `after`, oldest first,
    /// at most `maxCount` (0: no count) and no more than `maxBytes` of reply
    /// (`PendingEvent.wireBytesBound`), but always one when there is one. O(log n + page).
    public func pendingEvents(session: SessionID, after: UInt64, maxCount: Int, maxBytes: Int) throws -> [PendingEvent] {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let all = try sessionRecord(session).pendingEvents
        // Serials only grow: the first one after `after`, by bisection.
        var low = 0, high = all.count
        while low < high {
            let mid = (low + high) / 2
            if all[mid].serial <= after { low = mid + 1 } else { high = mid }
        }
        var page: [PendingEvent] = []
        var bytes = 0
        for e in all[low...] {
            if maxCount > 0 && page.count >= maxCount { break }
            bytes += e.wireBytesBound
            if !page.isEmpty && bytes > maxBytes { break }
            page.append(e)
        }
        return page
    }

    /// How many completion events of the session are not acknowledged yet (0 when there
    /// is no such session). O(1).
    public func pendingEventCount(session: SessionID) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return sessions[session]?.pendingEvents.count ?? 0
    }

    /// How many more runs the session may start within `environment.pendingEventsPerSession`
    /// completion events. Counted are the events it holds unacknowledged (a removed
    /// transfer's stay until acknowledged), one for each transfer not ended yet (it ends
    /// with one), one for each failed one (it ends once more when resumed or cancelled),
    /// and one more for each run that began by resuming a failed transfer (it adds its
    /// own event and may fail again). So what a client starts never takes a session past
    /// the cap; only a new transfer's first run, failing, may add one more than counted
    /// (its event and its failed state), so the events held can pass the cap by one per
    /// such transfer. `starting`: new transfers of the session prepared, not added yet.
    /// O(1).
    func eventRoom(session: SessionID, starting: Int = 0) -> Int {
        environment.pendingEventsPerSession - pendingEventCount(session: session) - eventsToCome(session: session, starting: starting)
    }

    /// The completion events the session's transfers may still add (`eventRoom`). O(1).
    private func eventsToCome(session: SessionID, starting: Int) -> Int {
        index.unfinishedCount(session: session) + index.failedCount(session: session)
            + index.resumedRunCount(session: session) + starting
    }

    /// Refuses (`LimitExceeded`) a new transfer in a session without room for its
    /// completion event (`eventRoom`). What bounds a session's events — the memory and
    /// disk they take, and `PendingEvents`' reply — for a client that never
    /// acknowledges. `starting`: the session's downloads prepared but not added yet.
    public func checkRoomForEvents(session: SessionID, starting: Int = 0) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        guard eventRoom(session: session, starting: starting) < 1 else { return }
        throw eventCapRefusal(session, starting: starting)
    }

    /// `starting`: downloads of the same group not added yet, counted with the rest.
    func eventCapRefusal(_ session: SessionID, starting: Int = 0) -> CoreError {
        let name = sessions[session].map { "'\($0.identifier)'" } ?? "\(session)"
        let mayCome = eventsToCome(session: session, starting: starting)
        return CoreError.limitExceeded("session \(name) holds \(pendingEventCount(session: session)) completion events not "
            + "acknowledged, and \(mayCome) more may come from its transfers not ended, failed or resumed after failing (each "
            + "may end once more); together they reach the most a session may hold (\(environment.pendingEventsPerSession)); "
            + "acknowledge its events (Session.AcknowledgeEvents; `ferry ls` does for the CLI's session) or remove "
            + "failed transfers first")
    }

    /// Drops every pending event with a serial up to and including `serial`.
    public func acknowledgeEvents(session: SessionID, upTo serial: UInt64) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let s = try sessionRecord(session)
        let before = s.pendingEvents.count
        s.pendingEvents.removeAll { $0.serial <= serial }
        if s.configuration.persistent && s.pendingEvents.count != before {
            journal.stage(.acknowledgeEvents(s.id, upTo: serial))
            flushStore()
        }
    }

    /// Forgets the session. With `cancelTransfers` its unfinished transfers are
    /// cancelled and everything goes at once; without, it takes no new downloads and
    /// goes (with its transfers) once they are all completed, failed or cancelled.
    /// Its identifier may be opened again at once, as a new session.
    public func closeSession(_ id: SessionID, cancelTransfers: Bool) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
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
        forgetGroups(of: s.id)
        if s.configuration.persistent { journal.stage(.deleteSession(s.id)) }
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
            throw CoreError.invalidState("session \(id) ('\(s.identifier)') is closing and takes no new transfers; open it again for a new session")
        }
        return s
    }

    /// Appends a completion event to the session's journal (staged for the store) and
    /// returns its serial. Callers append it before they announce the final state, so
    /// that the state and its event are written together.
    func appendEvent(_ event: PendingEvent, session: SessionID) -> UInt64 {
        var event = event
        event.serial = numbering.takeSerial()
        sessions[session]?.pendingEvents.append(event)
        if isPersistent(session) {
            journal.stage(.appendEvent(session, event))
        } else {
            // Never stored, yet its serial must not come again after a restart.
            reserveIDs(serial: event.serial)
        }
        return event.serial
    }
}
