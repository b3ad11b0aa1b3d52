import DBus
import FerryCore
import FerryInterface
import Foundation

/// Calls that arrive one after another while the core is busy, handed to it as one group:
/// one hop onto its queue, one store transaction and one change for all of them (a script
/// that pipelines 1,000 `Download` calls, or removes 1,000 transfers, pays for tens of
/// writes, not 1,000). Two kinds group: `Download` calls, and calls on transfer objects
/// (Pause, Resume, Cancel, Remove, SetURL).
///
/// Order is kept: a group takes only calls of its kind that came in one after another; a
/// call of the other kind, or any other call handed to the core (`FerryBusService.run`,
/// `onCore`), closes the open group first, so it runs after the calls sent before it and
/// before those sent after.
final class PipelinedCalls: @unchecked Sendable {
    /// Calls in the order they came; taken whole by the hop that runs them.
    /// `@unchecked Sendable`: `calls` is read and written only under `PipelinedCalls.lock`,
    /// and what a call carries is run once, by the hop on the core's queue.
    final class Group<Call>: @unchecked Sendable {
        fileprivate var calls: [Call] = []
    }

    private let lock = NSLock()
    /// The group new calls of its kind join; nil once closed or taken.
    private var open: AnyObject?

    /// Adds a call; returns its group when it is a new one (the caller schedules its hop).
    func add<Call>(_ call: Call) -> Group<Call>? {
        lock.lock()
        defer { lock.unlock() }
        if let group = open as? Group<Call> {
            group.calls.append(call)
            return nil
        }
        let group = Group<Call>()
        group.calls = [call]
        open = group
        return group
    }

    /// Later calls start a new group (another call to the core comes in between).
    func close() {
        lock.lock()
        defer { lock.unlock() }
        open = nil
    }

    /// The group's calls; it takes no more.
    func take<Call>(_ group: Group<Call>) -> [Call] {
        lock.lock()
        defer { lock.unlock() }
        if open === group { open = nil }
        let calls = group.calls
        group.calls = []
        return calls
    }
}

extension FerryBusService {
    /// `Session.Download`: joins the open group of download calls, or starts one.
    func download(_ inv: MethodInvocation) {
        guard let session = session(of: inv), let group = pipelinedCalls.add((inv, session)) else { return }
        core.queue.async { [self] in runDownloads(pipelinedCalls.take(group)) }
    }

    /// On the core's queue: checks each call as it comes, adds the accepted downloads
    /// together, then answers every call in order. A `destination-fd` download is added
    /// on its own, after those before it.
    private func runDownloads(_ calls: [(MethodInvocation, SessionID)]) {
        var outcomes: [Result<TransferID, Error>] = []
        var preparedAt: [Int] = []
        func addPrepared() {
            do {
                try core.addPreparedDownloads()
            } catch {
                for i in preparedAt { outcomes[i] = .failure(error) }
            }
            preparedAt = []
        }
        for (inv, session) in calls {
            do {
                let args = CallArguments(FerryInterface.SessionMethod.download, of: inv)
                var dict = try OptionParsing.vardict(args.value(FerryInterface.Argument.options))
                let descriptor = try destinationDescriptor(dict.removeValue(forKey: FerryInterface.DownloadOption.destinationFD.name))
                // The descriptor now owns the fd (it closes it); the invocation must not.
                if let descriptor { inv.keepUnixFD(descriptor.fd) }
                let options = try OptionParsing.download(dict)
                try checkTransferLimit(core, session: session)
                let url = args.string(FerryInterface.Argument.url)
                if let descriptor {
                    addPrepared()
                    outcomes.append(.success(try core.download(session: session, url: url, options: options, into: descriptor)))
                } else {
                    try confineDownload(inv, core, session: session, destination: options.destination)
                    outcomes.append(.success(try core.prepareDownload(session: session, url: url, options: options)))
                    preparedAt.append(outcomes.count - 1)
                }
            } catch {
                outcomes.append(.failure(error))
            }
        }
        addPrepared()
        for ((inv, _), outcome) in zip(calls, outcomes) {
            answer(inv, outcome.map { [.objectPath(FerryInterface.transferPath($0))] })
        }
    }

    /// A method call on a transfer object: `body` runs on the core's queue with the
    /// transfer's id, in one change with the calls on transfers sent just before or after
    /// it; each call is answered with its own result, once the change is stored.
    func runOnTransfer(_ inv: MethodInvocation, _ body: @escaping TransferCallBody) {
        guard let id = FerryInterface.id(inPath: inv.path, kind: "transfer") else {
            return inv.fail(Self.busError(CoreError.noSuchTransfer("no transfer at \(inv.path)")))
        }
        // A caller acting on a transfer uses its session: it hears the session's private signals.
        if let audience = bus.object(at: inv.path)?.audience as? SessionAudience {
            callers.signalRecipients.noteClient(inv.sender, ofSession: audience.identifier)
        }
        guard let group = pipelinedCalls.add(TransferCall(inv: inv, id: id, body: body)) else { return }
        core.queue.async { [self] in runTransferCalls(pipelinedCalls.take(group)) }
    }

    /// On the core's queue: the calls' bodies in order, in one change, then their answers.
    private func runTransferCalls(_ calls: [TransferCall]) {
        let outcomes = core.inOneChange {
            calls.map { call in
                Result {
                    // A caller acting on a transfer uses its session (on-client-exit).
                    if let session = core.transfer(call.id)?.session { sessionClients?.note(call.inv.sender, of: session) }
                    return try call.body(core, call.id)
                }
            }
        }
        for (call, outcome) in zip(calls, outcomes) { answer(call.inv, outcome) }
    }
}

/// What a method on a transfer object does, on the core's queue.
typealias TransferCallBody = (TransferCoordinator, TransferID) throws -> [DBusValue]

/// A call on a transfer object waiting in a group of `PipelinedCalls`.
struct TransferCall {
    let inv: MethodInvocation
    let id: TransferID
    let body: TransferCallBody
}
