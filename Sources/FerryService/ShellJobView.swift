import DBus
import Dispatch
import FerryCore
import Foundation
import Logging

/// The running batch as one job in the desktop shell, where the shell has a job
/// view: KDE Plasma's `org.kde.JobViewServer` (the progress list of its
/// notifications applet). Elsewhere nothing changes: asking a server that is not
/// on the bus fails at once, and the batch goes on as before.
///
/// - The job is asked for (`requestView`, never starting a service) when the first
///   transfer of a batch runs, and ends (`terminate`) with the manager's
///   `AllFinished`.
/// - It shows the batch's bytes and files (processed and total), its percentage and
///   the manager's rate, sent at most once per `interval` (500 ms), and only what
///   changed since the last update.
/// - Its Cancel (`cancelRequested`) cancels the transfers of the batch still going.
/// - The batch is what the notification sums up: transfers of sessions with
///   `notify` false are left out (those applications show their own progress).
///
/// Cost per core event: a dictionary look-up and a few additions; aggregates are
/// kept as they change, never summed over the batch.
///
/// `@unchecked Sendable`: every mutable field is touched on the core's queue only
/// (core events arrive there; replies and the shell's signals hop there).
final class ShellJobView: @unchecked Sendable {
    static let serverName = "org.kde.JobViewServer"
    static let serverPath = "/JobViewServer"
    static let viewInterface = "org.kde.JobViewV2"
    /// KJob's capability "Killable": the view shows a Cancel button.
    static let killable: Int32 = 1

    private let core: TransferCoordinator
    private let bus: BusConnection
    private let logger: Logger
    private let interval: Double

    /// A transfer of the batch: its bytes as last reported.
    private struct Member {
        var written: Int64
        var expected: Int64
        var done = false
    }

    /// What the shell shows, as last sent.
    private struct Figures: Equatable {
        var bytesWritten: Int64 = -1
        var bytesExpected: Int64 = -1
        var files = -1
        var filesDone = -1
        var rate: UInt64 = .max
    }

    private enum View {
        /// No view for this batch (yet).
        case none
        case requesting
        case shown(path: String, owner: String, subscription: BusConnection.Subscription?)
        /// The shell has no job view (or refused): not asked again in this batch.
        case unavailable
    }

    private var members: [TransferID: Member] = [:]
    private var bytesWritten: Int64 = 0
    private var bytesExpected: Int64 = 0
    private var filesDone = 0
    private var rate: UInt64 = 0
    private var view = View.none
    /// Counts batches, so that a reply or a signal about an earlier one is told apart.
    private var batch: UInt64 = 0
    private var sent = Figures()
    private var lastUpdate: DispatchTime?
    private var updateScheduled = false
    /// Whether a session's transfers count (its `notify`), looked up once per session.
    private var sessionCounts: [SessionID: Bool] = [:]

    init(core: TransferCoordinator, bus: BusConnection, logger: Logger, interval: Double = 0.5) {
        self.core = core
        self.bus = bus
        self.logger = logger
        self.interval = interval
    }

    // MARK: Core events (on the core's queue)

    func handle(_ event: CoreEvent) {
        switch event {
        case .transferAdded(let t), .transferChanged(let t):
            changed(t)
        case .progress(let p):
            if let rates = p.managerRates { rate = rates.download &+ rates.upload }
            guard members[p.id] != nil else { return }
            setBytes(p.id, written: p.totalBytesWritten, expected: p.totalBytesExpected)
            needsUpdate()
        case .managerChanged(let m):
            rate = m.downloadRate &+ m.uploadRate
        case .completed(let c):
            guard var m = members[c.transfer.id], !m.done else { return }
            m.done = true
            members[c.transfer.id] = m
            filesDone += 1
            // Done: its bytes are what it moved; a failed or cancelled transfer's
            // missing bytes leave the total.
            let final = c.transfer.state == .completed ? c.transfer.bytesTransferred : m.written
            setBytes(c.transfer.id, written: final, expected: final)
            needsUpdate()
        case .transferRemoved(let id, _):
            guard let m = members[id], !m.done else { return }
            leave(id, m)
        case .sessionRemoved(let id):
            sessionCounts[id] = nil
        case .sessionChanged(let s):
            sessionCounts[s.id] = s.configuration.notify
        case .allFinished(let end):
            finish(end.counts)
        default:
            break
        }
    }

    private func changed(_ t: TransferSnapshot) {
        if let m = members[t.id] {
            guard !m.done else { return }
            if t.state.isActive {
                setBytes(t.id, written: t.bytesTransferred, expected: t.bytesExpected)
            } else if t.state == .paused {
                // Paused by hand: out of the batch (as for AllFinished) until resumed.
                leave(t.id, m)
                return
            }
        } else {
            guard t.state.isActive, counts(t.session) else { return }
            members[t.id] = Member(written: t.bytesTransferred, expected: max(t.bytesExpected, 0))
            bytesWritten += t.bytesTransferred
            bytesExpected += max(t.bytesExpected, 0)
        }
        // The job appears when the batch first moves, not while it only waits.
        if t.state == .running, case .none = view { requestView() }
        needsUpdate()
    }

    private func counts(_ session: SessionID) -> Bool {
        if let known = sessionCounts[session] { return known }
        let notify = core.session(session)?.configuration.notify ?? true
        sessionCounts[session] = notify
        return notify
    }

    private func setBytes(_ id: TransferID, written: Int64, expected: Int64) {
        guard var m = members[id] else { return }
        let expected = max(expected, 0)
        bytesWritten += written - m.written
        bytesExpected += expected - m.expected
        m.written = written
        m.expected = expected
        members[id] = m
    }

    private func leave(_ id: TransferID, _ m: Member) {
        members[id] = nil
        bytesWritten -= m.written
        bytesExpected -= m.expected
        needsUpdate()
    }

    // MARK: The view

    private func requestView() {
        view = .requesting
        let batch = self.batch
        guard let call = try? BusMessage.methodCall(destination: Self.serverName, path: Self.serverPath,
                                                    interface: Self.serverName, member: "requestView") else { return }
        do {
            try call.append([.string("Ferry"), .string("org.ferry.Ferry"), .int32(Self.killable)])
        } catch {
            return
        }
        call.autoStart = false // a shell without a job view is not to be started for one
        bus.send(call, timeout: 10) { [self] result in
            core.queue.async { [self] in viewRequested(result, batch: batch) }
        }
    }

    private func viewRequested(_ result: Result<BusMessage, BusError>, batch: UInt64) {
        switch result {
        case .failure(let error):
            if batch == self.batch { view = .unavailable }
            logger.debug("no job view in the desktop shell (\(error.name))")
        case .success(let reply):
            guard let path = (try? reply.arguments())?.first?.string, BusNames.isValidObjectPath(path),
                  let owner = reply.sender else {
                if batch == self.batch { view = .unavailable }
                logger.warning("the desktop shell's job view answered requestView without an object path")
                return
            }
            guard batch == self.batch else {
                // The batch ended while the shell was asked: its job ends at once.
                send(path: path, owner: owner, "terminate", [.string("")])
                return
            }
            view = .shown(path: path, owner: owner, subscription: nil)
            sent = Figures()
            lastUpdate = nil
            needsUpdate()
            Task.onQueue { [self] in
                let rule = MatchRule(sender: owner, path: path, interface: Self.viewInterface, member: "cancelRequested")
                let subscription = try? await bus.subscribe(rule) { [weak self] _ in
                    guard let self else { return }
                    core.queue.async { self.cancelRequested(batch: batch) }
                }
                core.queue.async { [self] in
                    guard let subscription else { return }
                    if batch == self.batch, case .shown(let p, let o, nil) = view {
                        view = .shown(path: p, owner: o, subscription: subscription)
                    } else {
                        bus.unsubscribe(subscription)
                    }
                }
            }
        }
    }

    /// The shell's Cancel: cancels the batch's transfers still going.
    private func cancelRequested(batch: UInt64) {
        guard batch == self.batch else { return }
        var cancelled = 0
        for (id, m) in members where !m.done {
            do {
                try core.cancel(id)
                cancelled += 1
            } catch {
                logger.debug("job view cancel: transfer \(id) could not be cancelled: \(error)")
            }
        }
        logger.info("the desktop shell's job view cancelled the batch (\(cancelled) transfer(s))")
    }

    private func needsUpdate() {
        guard case .shown = view, !updateScheduled else { return }
        updateScheduled = true
        let now = DispatchTime.now()
        let due = lastUpdate.map { $0 + interval } ?? now
        if due <= now {
            update()
        } else {
            let batch = self.batch
            core.queue.asyncAfter(deadline: due) { [self] in
                guard batch == self.batch else { return }
                update()
            }
        }
    }

    /// Sends what changed since the last update.
    private func update() {
        updateScheduled = false
        guard case .shown(let path, let owner, _) = view else { return }
        lastUpdate = .now()
        let now = Figures(bytesWritten: bytesWritten, bytesExpected: bytesExpected, files: members.count,
                          filesDone: filesDone, rate: rate)
        if now.files != sent.files || now.filesDone != sent.filesDone {
            let message = now.files == 1 ? "1 transfer" : "\(now.filesDone) of \(now.files) transfers"
            send(path: path, owner: owner, "setInfoMessage", [.string(message)])
            send(path: path, owner: owner, "setTotalAmount", [.uint64(UInt64(now.files)), .string("files")])
            send(path: path, owner: owner, "setProcessedAmount", [.uint64(UInt64(now.filesDone)), .string("files")])
        }
        if now.bytesExpected != sent.bytesExpected {
            send(path: path, owner: owner, "setTotalAmount", [.uint64(UInt64(max(now.bytesExpected, 0))), .string("bytes")])
        }
        if now.bytesWritten != sent.bytesWritten {
            send(path: path, owner: owner, "setProcessedAmount", [.uint64(UInt64(max(now.bytesWritten, 0))), .string("bytes")])
        }
        if now.bytesWritten != sent.bytesWritten || now.bytesExpected != sent.bytesExpected {
            send(path: path, owner: owner, "setPercent", [.uint32(Self.percent(now.bytesWritten, of: now.bytesExpected))])
        }
        if now.rate != sent.rate {
            send(path: path, owner: owner, "setSpeed", [.uint64(now.rate)])
        }
        sent = now
    }

    static func percent(_ written: Int64, of expected: Int64) -> UInt32 {
        guard expected > 0, written > 0 else { return 0 }
        return UInt32(min(100, Double(written) * 100 / Double(expected)))
    }

    /// The batch is over: the job ends, with a message when something failed.
    private func finish(_ counts: BatchCounts) {
        if case .shown(let path, let owner, let subscription) = view {
            if updateScheduled || sent.filesDone != filesDone { update() }
            let message = counts.failed == 0 ? "" : counts.failed == 1 ? "1 transfer failed" : "\(counts.failed) transfers failed"
            send(path: path, owner: owner, "terminate", [.string(message)])
            if let subscription { bus.unsubscribe(subscription) }
        }
        batch &+= 1
        view = .none
        members = [:]
        bytesWritten = 0
        bytesExpected = 0
        filesDone = 0
        sent = Figures()
        lastUpdate = nil
        updateScheduled = false
    }

    /// One of the view's methods, as the shell's own clients send them: no reply.
    private func send(path: String, owner: String, _ method: String, _ arguments: [DBusValue]) {
        do {
            let m = try BusMessage.methodCall(destination: owner, path: path, interface: Self.viewInterface, member: method)
            try m.append(arguments)
            m.noReplyExpected = true
            bus.send(m)
        } catch {
            logger.debug("job view: could not build \(method): \(error)")
        }
    }
}
