import DBus
import FerryInterface
import Foundation

/// What happens to transfers, as the service's signals report it.
public enum TransferEvent: Sendable, Equatable {
    case progress(path: String, bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpected: Int64)
    case propertiesChanged(path: String, [String: DBusValue])
    case resumedAtOffset(path: String, offset: Int64, expectedTotal: Int64)
    case finished(path: String, location: String)
    case completed(path: String, serial: UInt64, errorName: String, errorMessage: String)
    /// A new transfer object, with all its properties (`InterfacesAdded`).
    case added(path: String, [String: DBusValue])
    /// A transfer object went away (`Remove`, `InterfacesRemoved`).
    case removed(path: String)
    /// ferryd left the bus (stopped, crashed, or exited with nothing to do: an
    /// activatable one comes back at the next call, and its signals reach this monitor).
    case serviceVanished
    /// The connection to the bus ended: nothing more will come.
    case busClosed
}

/// Subscribes to every transfer's signals. Subscriptions are in place when
/// `start` returns, so reading state afterwards and then following `batches`
/// misses nothing.
public final class TransferMonitor: Sendable {
    /// The events in the order the service sent them, handed over a burst at a time:
    /// what one read of the connection brought (up to thousands of signals while a
    /// batch runs) arrives as one array, so a follower wakes once per burst, not once
    /// per signal, and a display can write once.
    public let batches: AsyncStream<[TransferEvent]>
    private let gatherer: Gatherer
    private let client: BusClient
    private let subscriptions: [BusConnection.Subscription]
    private let watching: WatchState

    /// Whether to ask a ferryd that comes (back) on the bus for the private signals.
    private final class WatchState: @unchecked Sendable { // `on` only under `lock`
        private let lock = NSLock()
        private var on = false
        var isOn: Bool {
            get { lock.withLock { on } }
            set { lock.withLock { on = newValue } }
        }
    }

    private init(client: BusClient, batches: AsyncStream<[TransferEvent]>, gatherer: Gatherer,
                 subscriptions: [BusConnection.Subscription], watching: WatchState) {
        self.watching = watching
        self.client = client
        self.batches = batches
        self.gatherer = gatherer
        self.subscriptions = subscriptions
    }

    /// Collects the events of one burst; the first of a burst schedules its hand-over
    /// on the connection's queue, which runs once the queue has dispatched what it read.
    private final class Gatherer: @unchecked Sendable {
        private let lock = NSLock()
        private var pending: [TransferEvent] = []
        private let continuation: AsyncStream<[TransferEvent]>.Continuation
        private let queue: DispatchQueue

        init(continuation: AsyncStream<[TransferEvent]>.Continuation, queue: DispatchQueue) {
            self.continuation = continuation
            self.queue = queue
        }

        func yield(_ event: TransferEvent) {
            let first = lock.withLock {
                pending.append(event)
                return pending.count == 1
            }
            if first { queue.async { self.handOver() } }
        }

        private func handOver() {
            let burst = lock.withLock {
                defer { pending = [] }
                return pending
            }
            if !burst.isEmpty { continuation.yield(burst) }
        }

        func finish() { continuation.finish() }
    }

    public static func start(_ client: BusClient) async throws -> TransferMonitor {
        let (stream, streamContinuation) = AsyncStream<[TransferEvent]>.makeStream()
        let gatherer = Gatherer(continuation: streamContinuation, queue: client.bus.queue)
        let namespace = String(BusClient.transferPathPrefix.dropLast())
        var subs: [BusConnection.Subscription] = []
        let watching = WatchState()
        subs.append(try await client.bus.subscribe(
            MatchRule(sender: BusClient.busName, pathNamespace: namespace, interface: BusClient.transferInterface)) { m in
            guard let path = m.path, let args = try? m.arguments(),
                  let event = TransferEvent(transferSignal: m, path: path, args: args) else { return }
            gatherer.yield(event)
        })
        subs.append(try await client.bus.subscribe(
            MatchRule(sender: BusClient.busName, pathNamespace: namespace, interface: StandardNames.properties,
                      member: "PropertiesChanged")) { m in
            guard let path = m.path, let args = try? m.arguments(), args.count == 3,
                  args[0].string == BusClient.transferInterface, let changed = args[1].vardict else { return }
            gatherer.yield(.propertiesChanged(path: path, changed))
        })
        subs.append(try await client.bus.subscribe(
            MatchRule(sender: BusClient.busName, path: BusClient.managerPath, interface: StandardNames.objectManager)) { m in
            guard let args = try? m.arguments(), let path = args.first?.string,
                  path.hasPrefix(BusClient.transferPathPrefix) else { return }
            switch (m.member, args.count) {
            case ("InterfacesAdded", 2):
                guard let props = args[1].dictionaryEntries?.first(where: { $0.0 == BusClient.transferInterface })?.1.vardict
                else { return }
                gatherer.yield(.added(path: path, props))
            case ("InterfacesRemoved", 2):
                gatherer.yield(.removed(path: path))
            default:
                break
            }
        })
        subs.append(try await client.bus.subscribe(
            MatchRule(sender: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                      member: "NameOwnerChanged", arg0: BusClient.busName)) { m in
            guard let args = try? m.arguments(), args.count == 3 else { return }
            guard args[2].string == "" else {
                // A ferryd (back) on the bus knows nothing of our Watch: asked again.
                if watching.isOn { Task { _ = try? await client.watch() } }
                return
            }
            gatherer.yield(.serviceVanished)
        })
        client.bus.onDisconnect { gatherer.yield(.busClosed) }
        return TransferMonitor(client: client, batches: stream, gatherer: gatherer, subscriptions: subs, watching: watching)
    }

    /// Asks ferryd for every session's signals, private ones too (`Manager.Watch`), now
    /// and whenever a ferryd comes back on the bus. A daemon without the method (older
    /// than v1.2) broadcasts every signal anyway: that is no error.
    public func watchEverySession() async throws {
        watching.isOn = true
        try await client.watch()
    }

    /// Reads the connection's input at most every `seconds` (0: as it comes), so
    /// that a stream of signals is handled in a few large bursts; replies to calls
    /// made meanwhile wait as long (see `BusConnection.restBetweenReads`).
    public func restBetweenReads(_ seconds: Double) {
        client.bus.restBetweenReads(seconds)
    }

    public func stop() {
        for s in subscriptions { client.bus.unsubscribe(s) }
        gatherer.finish()
    }
}
