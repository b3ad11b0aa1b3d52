import DBus
import FerryCore
import FerryInterface
import Foundation

/// `Download` calls that arrive while the core is busy, handed to it as one group: one
/// hop onto its queue, one store transaction and one change for all of them (a script
/// that pipelines 1,000 calls pays for tens of writes, not 1,000).
///
/// Order is kept: a group takes only calls that came in one after another; any other
/// call handed to the core (`FerryBusService.run`, `onCore`) closes the open group
/// first, so it runs after the downloads sent before it and before those sent after.
final class DownloadCalls: @unchecked Sendable {
    /// Calls in the order they came; taken whole by the hop that runs them.
    /// `@unchecked Sendable`: `calls` is read and written only under `DownloadCalls.lock`.
    final class Group: @unchecked Sendable {
        fileprivate var calls: [(MethodInvocation, SessionID)] = []
    }

    private let lock = NSLock()
    /// The group new calls join; nil once closed or taken.
    private var open: Group?

    /// Adds a call; returns its group when it is a new one (the caller schedules its hop).
    func add(_ inv: MethodInvocation, session: SessionID) -> Group? {
        lock.lock()
        defer { lock.unlock() }
        if let group = open {
            group.calls.append((inv, session))
            return nil
        }
        let group = Group()
        group.calls = [(inv, session)]
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
    func take(_ group: Group) -> [(MethodInvocation, SessionID)] {
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
        guard let session = session(of: inv), let group = downloadCalls.add(inv, session: session) else { return }
        core.queue.async { [self] in runDownloads(downloadCalls.take(group)) }
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
}
