import DBus
import FerryBusClient
import Foundation

/// What happened to a followed transfer, for displays and event printers.
enum Change {
    case added(TransferInfo)
    case state(TransferInfo, from: String)
    case progress(TransferInfo, bytesWritten: Int64)
    case resumed(TransferInfo, offset: Int64)
    case finished(TransferInfo, location: String)
    case completed(TransferInfo, serial: UInt64)
    case removed(TransferInfo)
}

/// Something that shows what a `Follower` sees.
protocol FollowSink: AnyObject {
    /// The transfers followed from the start, in their state when following began.
    func start(_ initial: [TransferInfo])
    func apply(_ change: Change)
    /// Following ended (done, or the service left); `final` holds the last state of each.
    func end(_ final: [TransferInfo])
}

/// How often a follower handles the news of the transfers it follows.
enum FollowPace {
    /// Seconds between reads of the bus while following a crowd. A batch of 1,000
    /// downloads sends the CLI about 8,000 signals over a second or two; read as they
    /// come, they cost some 3,400 wake-ups of three threads each. Resting 20 ms between
    /// reads, a `get` of 1,000 files takes 0.30 s of CPU instead of 0.53 s (the
    /// `Download` pipeline before following reads as data comes). A display redraws
    /// at most every 0.2 s, so nobody sees the wait.
    static let rest = 0.02

    /// Transfers still to end from which the follower rests. A few transfers send a
    /// few signals, and each rest would only make their end wait: a `get --wait` of
    /// one small file comes in three or four reads, and resting after each took it
    /// from 20 to 60 ms (`bench/`, the batch suite's one-at-a-time row).
    static let crowd = 32

    /// The rest while `live` followed transfers have not ended.
    static func rest(live: Int) -> Double { live >= crowd ? rest : 0 }
}

/// Follows transfers live: a state read after subscribing, then the bus events,
/// applied in the order the service sent them (so the state converges on the
/// service's even when some events predate the snapshot).
final class Follower {
    struct Options {
        /// Also follow transfers created while following (that `accept` takes).
        var followNew = false
        /// Follow new transfers that are paused too.
        var includePaused = false
        /// Stop once every followed transfer has ended.
        var untilDone = true
        /// Which new transfers to follow.
        var accept: (TransferInfo) -> Bool = { _ in true }
        /// No note on standard error when the service leaves and following goes on.
        var quiet = false
        /// With `untilDone` and `followNew`: nothing to follow yet is not "done": wait
        /// until a transfer comes (`watch --until-done` started before `get`), then until
        /// all have ended.
        var waitForWork = false
    }

    private(set) var infos: [String: TransferInfo] = [:]
    private(set) var order: [String] = []
    /// Transfers whose `Completed` signal came, or that were final when following began.
    private var completedSeen: Set<String> = []
    /// Followed transfers that have not ended (kept per event: no scan of all).
    private var running: Set<String> = []
    /// Transfers just created for us, followed from their `InterfacesAdded` on.
    private var awaited: Set<String> = []
    let options: Options

    init(options: Options) {
        self.options = options
    }

    /// Whether a followed transfer has ended as far as following goes.
    func hasEnded(_ i: TransferInfo) -> Bool {
        // Nobody resumes a paused transfer for us: waiting on it would never end.
        if i.state == "paused" { return true }
        return i.isFinal && completedSeen.contains(i.path)
    }

    var allEnded: Bool { running.isEmpty && awaited.isEmpty }

    /// Some transfer was followed (from the start, or new since).
    private var followedAny = false

    /// Still waiting for the first transfer to follow (`waitForWork`).
    private var waitingForWork: Bool { options.waitForWork && !followedAny }

    /// Following is over (with `untilDone`).
    private var finished: Bool { options.untilDone && allEnded && !waitingForWork }

    /// Stores the transfer's new state and whether it still runs.
    private func update(_ i: TransferInfo) {
        infos[i.path] = i
        if hasEnded(i) { running.remove(i.path) } else { running.insert(i.path) }
    }

    var followed: [TransferInfo] { order.compactMap { infos[$0] } }

    /// Follows `initial` (read after `monitor` was started) and the transfers at
    /// `created` (made after `monitor` was started, so their `InterfacesAdded`, which
    /// carries all their properties, is among its events) until all ended (with
    /// `untilDone`) or forever; returns their last state.
    func run(_ initial: [TransferInfo], created: [String] = [], monitor: TransferMonitor,
             sink: FollowSink) async throws -> [TransferInfo] {
        awaited = Set(created).subtracting(initial.map(\.path))
        var rest = 0.0
        /// Rests while a crowd is followed; reads as news comes for the last few.
        func pace() {
            let wanted = FollowPace.rest(live: running.count + awaited.count)
            guard wanted != rest else { return }
            rest = wanted
            monitor.restBetweenReads(wanted)
        }
        defer { if rest != 0 { monitor.restBetweenReads(0) } }
        if !initial.isEmpty || !created.isEmpty { followedAny = true }
        for i in initial {
            if infos[i.path] == nil { order.append(i.path) }
            if i.isFinal { completedSeen.insert(i.path) }
            update(i)
        }
        pace()
        sink.start(followed)
        if finished {
            sink.end(followed)
            return followed
        }
        following: for await batch in monitor.batches {
            var vanished: String?
            let done = Output.burst { () -> Bool in
                for event in batch {
                    if case .busClosed = event {
                        vanished = "the connection to the bus closed"
                        return true
                    }
                    if case .serviceVanished = event {
                        // Waiting for transfers to end: they cannot now. Following until
                        // Ctrl-C: ferryd also leaves when it has had nothing to do for a
                        // while, and comes back at the next call (its signals reach us).
                        // Waiting for work to come, the service may leave (idle) and come back with it.
                        guard options.untilDone && !waitingForWork else {
                            if !options.quiet { printError("the Ferry service left the bus; following on when it is back") }
                            continue
                        }
                        vanished = "the Ferry service left the bus"
                        return true
                    }
                    if let change = apply(event) {
                        if case .added = change { followedAny = true }
                        sink.apply(change)
                    }
                    if finished { return true }
                }
                return false
            }
            if let vanished {
                sink.end(followed)
                throw CLIError.unreachable(vanished)
            }
            if done { break following }
            pace()
        }
        sink.end(followed)
        return followed
    }

    func apply(_ event: TransferEvent) -> Change? {
        switch event {
        case .added(let path, let props):
            if awaited.remove(path) != nil {
                let i = TransferInfo(id: BusClient.transferID(path), path: path, properties: props)
                update(i)
                order.append(path)
                return .added(i)
            }
            guard options.followNew, infos[path] == nil else { return nil }
            let i = TransferInfo(id: BusClient.transferID(path), path: path, properties: props)
            guard options.accept(i), options.includePaused || i.state != "paused" else { return nil }
            update(i)
            order.append(path)
            return .added(i)
        case .progress(let path, let written, let total, let expected):
            guard var i = infos[path] else { return nil }
            i.bytesTransferred = total
            if expected >= 0 || i.bytesExpected < 0 { i.bytesExpected = expected }
            update(i)
            return .progress(i, bytesWritten: written)
        case .propertiesChanged(let path, let changed):
            guard var i = infos[path] else { return nil }
            let old = i.state
            i.apply(changed)
            // A transfer that moves again (resumed) waits for a new Completed.
            if !i.isFinal { completedSeen.remove(path) }
            update(i)
            return old != i.state ? .state(i, from: old) : nil
        case .resumedAtOffset(let path, let offset, let expected):
            guard var i = infos[path] else { return nil }
            i.bytesTransferred = offset
            if expected >= 0 { i.bytesExpected = expected }
            update(i)
            return .resumed(i, offset: offset)
        case .finished(let path, let location):
            guard var i = infos[path] else { return nil }
            i.destination = location
            update(i)
            return .finished(i, location: location)
        case .completed(let path, let serial, let errorName, let errorMessage):
            guard var i = infos[path] else { return nil }
            i.errorName = errorName
            i.errorMessage = errorMessage
            if !i.isFinal {
                // The Completed signal is the last word even if the State change is still on its way.
                i.state = errorName.isEmpty ? "completed" : (errorName.hasSuffix(".Cancelled") ? "cancelled" : "failed")
            }
            completedSeen.insert(path)
            update(i)
            return .completed(i, serial: serial)
        case .removed(let path):
            guard let i = infos.removeValue(forKey: path) else { return nil }
            running.remove(path)
            order.removeAll { $0 == path }
            return .removed(i)
        case .serviceVanished, .busClosed:
            return nil
        }
    }
}

/// Acknowledges the pending events of the CLI's own session that concern
/// transfers it has shown in a final state, that are gone, or that have started
/// another run since (resumed: that run ends with its own event): the longest such
/// run of events from the oldest, since acknowledging a serial drops every earlier
/// one too. `listed`: each transfer of a listing the caller made before the events
/// were read, and whether it was final then (asked for otherwise, only if an event
/// needs it).
/// Each transfer of a listing, and whether it was final then (`acknowledgeShown`'s `listed`).
func finalByPath(_ objects: ManagedObjects) -> [String: Bool] {
    Dictionary(objects.transfers.map { ($0.path, $0.isFinal) }, uniquingKeysWith: { a, _ in a })
}

func acknowledgeShown(_ client: BusClient, session identifier: String, sessions: [SessionInfo],
                      shown: Set<String>, listed: [String: Bool]?) async {
    // The session and those runs with settings of their own made beside it
    // (`SettingsSession`): the user's session, as far as the user can tell.
    var seen: Set<String> = []
    for info in sessions.reversed()
    where (info.identifier == identifier || SettingsSession.isDerived(info.identifier, from: identifier)) && seen.insert(info.identifier).inserted {
        await acknowledgeShown(BusSession(client: client, path: info.path), client: client, shown: shown, listed: listed)
    }
}

/// The highest transfer id in a listing (0 for none).
func newestListed(_ listed: [String: Bool]?) -> UInt64 {
    listed?.keys.lazy.map(BusClient.transferID).max() ?? 0
}

func acknowledgeShown(_ session: BusSession, client: BusClient, shown: Set<String>, listed: [String: Bool]?) async {
    guard let events = try? await session.pendingEvents(), !events.isEmpty else { return }
    // The newest transfer of a listing made before the events were read: one missing
    // from it but newer was made since, not removed.
    let newestBefore = newestListed(listed)
    var listed = listed
    // A listing made after the events were read: a transfer not final in it has
    // started another run since its event (a run that ends later has a later event).
    var fresh = false
    /// Transfers found still not final by a look of their own (asked once each).
    var stillRunning: Set<String> = []
    var last: UInt64?
    for e in events {
        if !shown.contains(e.transferPath) {
            // Asked for only when an event is not of a shown transfer (a `get` showed all of its own).
            if listed == nil {
                guard let objects = try? await client.listing() else { break }
                listed = finalByPath(objects)
                fresh = true
            }
            switch listed?[e.transferPath] {
            case nil where !fresh && BusClient.transferID(e.transferPath) > newestBefore:
                // Made after the listing (ids only grow), and ended before the events were
                // read: not gone, just never shown.
                return await acknowledge(session, upTo: last)
            case nil: break // gone: nothing left to show
            case true?: return await acknowledge(session, upTo: last) // final, and the user has not seen how it ended
            case false?:
                // Not final when listed, before the events were read: it may have ended since
                // (one look per transfer, however many of its events wait).
                if !fresh && !stillRunning.contains(e.transferPath) {
                    if let now = try? await FerryTransfer(client: client, path: e.transferPath).info(), now.isFinal {
                        return await acknowledge(session, upTo: last)
                    }
                    stillRunning.insert(e.transferPath)
                }
            }
        }
        last = e.serial
    }
    await acknowledge(session, upTo: last)
}

private func acknowledge(_ session: BusSession, upTo last: UInt64?) async {
    if let last { try? await session.acknowledgeEvents(upTo: last) }
}
