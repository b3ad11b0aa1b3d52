import Foundation
internal import FerryInterface
internal import DBus
internal import FerryBusClient

/// A session's events, on its `queue`: each signal about one of its tasks is handled
/// once, in the order the service sent it; a completion goes to the task and the
/// delegate, and what the app took is acknowledged.
extension SessionCore {
    func receive(_ i: Incoming) {
        queue.async { [self] in
            if replaying { buffered.append(i) } else { process(i) }
        }
    }

    /// The task object for a path of this session (made on first sight).
    func task(_ path: String) -> FerryTask {
        dispatchPrecondition(condition: .onQueue(queue))
        if let t = tasks[path] { return t }
        let t = FerryTask(path: path, core: self)
        tasks[path] = t
        return t
    }

    /// The task for a path the app now holds (its events may be acknowledged). `seed`:
    /// what the creating call knows of it, should the service have said nothing yet.
    func handOut(_ path: String, upload: Bool? = nil, source: String? = nil, seed: [String: DBusValue] = [:]) -> FerryTask {
        queue.sync {
            handedOut.insert(path)
            let t = task(path)
            t.status.seed(seed)
            if let upload { t.isUpload = upload }
            if let source, t.source == nil { t.source = source } // the service's name (from .added) wins
            taken(path)
            return t
        }
    }

    func allTasks() -> [FerryTask] {
        queue.sync {
            handedOut.formUnion(tasks.keys)
            for serial in untaken.values { notTaken.take(serial) }
            untaken = [:]
            acknowledgeTaken()
            return tasks.values.sorted { $0.id < $1.id }
        }
    }

    /// On `queue`: the app now holds `path`; its completion, if one came before, is taken.
    func taken(_ path: String) {
        guard let serial = untaken.removeValue(forKey: path) else { return }
        notTaken.take(serial)
        acknowledgeTaken()
    }

    /// On `queue`: a transfer of this session appeared (kind and, for an upload, the
    /// source as the service names it).
    func added(_ path: String, _ props: [String: DBusValue]) {
        guard props[FerryInterface.TransferProperty.session.name]?.string == sessionPath else { return }
        let t = task(path)
        t.status.apply(props)
        t.isUpload = props[FerryInterface.TransferProperty.kind.name]?.string == "upload"
        if t.isUpload, let source = props[FerryInterface.TransferProperty.destination.name]?.string { t.source = source }
    }

    /// On `queue`: the transfer is gone from the service (removed, or vanished with it);
    /// no one can take its events any more.
    func forget(_ path: String) {
        tasks[path] = nil
        handedOut.remove(path)
        responses[path] = nil
        totals[path] = nil
        digests[path] = nil
        if untaken[path] != nil { taken(path) }
    }

    func process(_ i: Incoming) {
        switch i {
        case .added(let path, let props):
            added(path, props)
        case .removed(let path):
            forget(path)
        case .changed(let path, let state, let response, let sha256, let properties):
            guard let t = tasks[path] else { return }
            t.status.apply(properties)
            if let sha256, !t.isCompleted { digests[path] = sha256.isEmpty ? nil : sha256 }
            // An answer for the run under way (not one heard again after its replay).
            if let response, t.isUpload, !t.isCompleted { responses[path] = response.isEmpty ? nil : response }
            guard let state, let s = TransferState(rawValue: state) else { return }
            // A final state is told with the task's completion (`deliver`), after
            // `.finished`, so that it is a task's last event.
            guard !s.isFinal else { return }
            t.reopen() // a failed task resumed: a new run
            t.yield(.stateChanged(s))
        case .allFinished(let path):
            guard path == sessionPath, let s = session, let d = delegate else { return }
            delegateCalls.run { d.ferrySessionDidBecomeIdle(s) }
        case .serviceBack:
            lock.withLock { attachTask = nil }
            scheduleAttach()
        case .serviceGone:
            attached = false
            lock.withLock { attachTask = nil }
        case .transfer(let event):
            transferSignal(event)
        }
    }

    /// On `queue`: a transfer signal about one of this session's tasks.
    func transferSignal(_ event: TransferEvent) {
        switch event {
        case .progress(let path, let written, let total, let expected):
            guard let t = tasks[path] else { return }
            totals[path] = total
            t.status.progressed(total: total, expected: expected)
            t.yield(.progress(bytes: written, totalBytes: total, totalBytesExpected: expected))
            if let s = session, let d = delegate {
                if t.isUpload {
                    delegateCalls.run { d.ferrySession(s, task: t, didSendBodyData: written, totalBytesSent: total, totalBytesExpectedToSend: expected) }
                } else {
                    delegateCalls.run { d.ferrySession(s, downloadTask: t, didWriteData: written, totalBytesWritten: total, totalBytesExpectedToWrite: expected) }
                }
            }
        case .resumedAtOffset(let path, let offset, let expected):
            guard let t = tasks[path] else { return }
            t.yield(.resumed(offset: offset, expectedTotal: expected))
            if let s = session, let d = delegate {
                delegateCalls.run { d.ferrySession(s, downloadTask: t, didResumeAtOffset: offset, expectedTotalBytes: expected) }
            }
        case .finished(let path, let location):
            guard tasks[path] != nil else { return }
            // Delivered with the Completed that follows (so a replayed one is not delivered twice).
            locations[path] = location
        case .completed(let path, let serial, let name, let message):
            guard tasks[path] != nil, serial > lastDelivered else { return }
            guard attached else {
                // Kept in the service: the next attach replays it.
                if !replaying { scheduleAttach() }
                return
            }
            deliver(path: path, serial: serial, state: name.isEmpty ? "completed" : (name.hasSuffix(".Cancelled") ? "cancelled" : "failed"),
                    errorName: name, errorMessage: message, httpStatus: 0, location: locations[path] ?? "",
                    bytes: totals[path], sha256: digests[path])
        case .propertiesChanged, .added, .removed, .serviceVanished, .busClosed:
            break // not transfer signals: they come as other `Incoming` cases
        }
    }

    /// Hands one completion to the task and the delegate, then acknowledges it.
    func deliver(path: String, serial: UInt64, state: String, errorName: String, errorMessage: String,
                         httpStatus: Int, location: String, bytes: Int64?, sha256: String?) {
        let t = task(path)
        let location = t.isUpload ? t.source ?? "" : location // an upload's: the file it sent
        locations[path] = nil
        totals[path] = nil
        digests[path] = nil
        let response = t.isUpload ? responses[path] : nil
        var status = httpStatus
        if status == 0 && errorName.hasSuffix(".Http") {
            // The message names the status ("… 404 …"); the event's details carry it when replayed.
            status = errorMessage.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }.first { (400...599).contains($0) } ?? 0
        }
        let outcome = Self.outcome(state: state, errorName: errorName, errorMessage: errorMessage, httpStatus: status,
                                   location: location, response: response, bytes: bytes, sha256: sha256)
        // Live, the run's end is the newest news of the task; replayed, the listing the
        // attach read is newer.
        if !replaying, !t.isCompleted {
            t.status.ended(state: state, errorName: errorName, errorMessage: errorMessage, httpStatus: status, bytes: bytes)
        }
        if case .success = outcome { responses[path] = nil } // kept after a failure: a retry may not answer anew
        if case .success(let r) = outcome, let url = r.location, !t.isUpload {
            t.yield(.finished(location: url))
            if let s = session, let d = delegate { delegateCalls.run { d.ferrySession(s, downloadTask: t, didFinishDownloadingTo: url) } }
        }
        if !t.isCompleted, let final = TransferState(rawValue: state) { t.yield(.stateChanged(final)) }
        if let s = session {
            let error: FerryError?
            if case .failure(let e) = outcome { error = e } else { error = nil }
            if let events = delegate as? FerrySessionEvents {
                // Acknowledged once a reader has taken it.
                notTaken.add(serial)
                delegateCalls.run { events.completed(t, error: error, serial: serial) }
            } else if let d = delegate {
                if delegateCalls.operationQueue == nil {
                    d.ferrySession(s, task: t, didCompleteWithError: error)
                } else {
                    // Acknowledged once the delegate has returned, on the app's queue.
                    notTaken.add(serial)
                    delegateCalls.run({ d.ferrySession(s, task: t, didCompleteWithError: error) }, then: { [weak self] in
                        guard let self else { return }
                        self.queue.async {
                            self.notTaken.take(serial)
                            self.acknowledgeTaken()
                        }
                    })
                }
            }
        }
        t.complete(outcome)
        if closeWhenTasksEnd { closeIfTasksEnded() }
        lastDelivered = max(lastDelivered, serial)
        if delegate == nil && !handedOut.contains(path) {
            // No one took it: it stays pending (a later run, or the app's own call
            // returning this task, takes it).
            if untaken[path] == nil { // its oldest event holds the rest
                untaken[path] = serial
                notTaken.add(serial)
            }
        }
        acknowledgeTaken()
    }

    static func outcome(state: String, errorName: String, errorMessage: String, httpStatus: Int,
                        location: String, response: [UInt8]? = nil, bytes: Int64? = nil,
                        sha256: String? = nil) -> Result<FerryTaskResult, FerryError> {
        // Completed is a success, whatever `Error` held (a failure it retried past).
        if state == "completed" {
            return .success(FerryTaskResult(location: location.isEmpty ? nil : URL(fileURLWithPath: location),
                                            response: response.map { Data($0) }, bytes: bytes,
                                            sha256: sha256.flatMap { $0.isEmpty ? nil : $0 }))
        }
        let name = errorName.isEmpty ? (state == "cancelled" ? FerryInterface.ErrorName.cancelled : .network).fullName : errorName
        return .failure(FerryError(name: name, message: errorMessage.isEmpty ? state : errorMessage, httpStatus: httpStatus))
    }

    /// On `queue`: acknowledges every delivered event up to the first one not taken
    /// (acknowledging drops every event up to the serial given).
    func acknowledgeTaken() {
        let upTo = min(lastDelivered, notTaken.lowest.map { $0 - 1 } ?? .max)
        guard attached, upTo > acknowledged, let path = sessionPath, let bus = lock.withLock({ bus }),
              let m = try? BusClient.methodCall(FerryInterface.SessionMethod.acknowledgeEvents, on: path, [.uint64(upTo)])
        else { return }
        acknowledged = upTo
        bus.send(m) { _ in }
    }
}
