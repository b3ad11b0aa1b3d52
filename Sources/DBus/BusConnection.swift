import CDBus
import Dispatch
import Foundation

/// A private connection to a message bus, driven from one serial queue.
///
/// Every libdbus call for this connection happens on `queue`. Public methods may
/// be called from any thread; they hop onto the queue. Incoming method calls,
/// signal handlers and reply callbacks run on the queue.
///
/// `@unchecked Sendable`: all mutable state is confined to `queue`.
public final class BusConnection: @unchecked Sendable {
    public let queue: DispatchQueue
    let raw: OpaquePointer
    let loop: MainLoop
    private var closed = false
    /// Set on `queue` (this connection's own key, so a queue shared by several
    /// connections answers for each): whether `deinit` runs on it.
    private let onQueue = DispatchSpecificKey<Bool>()

    /// Our unique name on the bus (`:1.42`).
    public let uniqueName: String

    // Queue-confined state.
    var objects: [String: ExportedObject] = [:]
    var objectManagerPaths: Set<String> = []
    /// Objects whose `PropertiesChanged` is held back (`coalesceChanges`), oldest first.
    var heldBack: [ExportedObject] = []
    /// Seconds a coalescing object's `PropertiesChanged` waits for more changes.
    public let changeSignalDelay: Double = 0.1
    private var subscriptions: [UInt64: (rule: MatchRule, handler: @Sendable (BusMessage) -> Void)] = [:]
    private var nextSubscription: UInt64 = 1
    private var disconnectHandlers: [@Sendable () -> Void] = []
    /// What to do with a reply or signal too large for the bus (queue-confined).
    private var oversize: (errorName: String?, log: @Sendable (String) -> Void)?
    /// Method calls on missing objects below these path prefixes answer these errors.
    var missingObjectErrors: [(prefix: String, errorName: String, noun: String)] = []
    /// The most bytes of arguments a method call to our objects may carry, and the
    /// error a larger one answers (queue-confined; nil: the bus's own limit).
    var callBodyLimit: (bytes: Int, errorName: String)?
    /// Identifies callers before their calls are dispatched (see `CallerGate`).
    var gatekeeper: CallerGatekeeper?
    /// Well-known name -> the unique name that last answered a call to it (queue-confined):
    /// a signal that connection addresses to us is that service's own (see `route`).
    var answeredFor: [String: String] = [:]

    /// Connects to the session bus (`DBUS_SESSION_BUS_ADDRESS`).
    public static func session(queue: DispatchQueue = DispatchQueue(label: "dbus.session")) throws -> BusConnection {
        try BusConnection(queue: queue) { error in dbus_bus_get_private(DBUS_BUS_SESSION, &error) }
    }

    /// Connects to the system bus.
    public static func system(queue: DispatchQueue = DispatchQueue(label: "dbus.system")) throws -> BusConnection {
        try BusConnection(queue: queue) { error in dbus_bus_get_private(DBUS_BUS_SYSTEM, &error) }
    }

    /// Connects to the bus at `address` and registers with it.
    public convenience init(address: String, queue: DispatchQueue = DispatchQueue(label: "dbus.connection")) throws {
        try self.init(queue: queue) { error in
            guard let c = dbus_connection_open_private(address, &error) else { return nil }
            if dbus_bus_register(c, &error) == 0 {
                dbus_connection_close(c)
                dbus_connection_unref(c)
                return nil
            }
            return c
        }
    }

    private init(queue: DispatchQueue, open: (inout CDBus.DBusError) -> OpaquePointer?) throws {
        _ = BusConnection.threadsInitialised
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let c = open(&error) else {
            if dbus_error_is_set(&error) != 0 { throw BusError(consuming: &error) }
            throw BusError(name: StandardErrors.failed, message: "could not connect to the bus")
        }
        raw = c
        self.queue = queue
        uniqueName = dbus_bus_get_unique_name(c).map { String(cString: $0) } ?? ""
        dbus_connection_set_exit_on_disconnect(c, 0)
        loop = MainLoop(raw: c, queue: queue)
        loop.connection = self
        queue.setSpecific(key: onQueue, value: true)
        loop.install()
    }

    private static let threadsInitialised: Bool = { dbus_threads_init_default() != 0 }()

    deinit {
        if !closed {
            // A read or a rest's end may be running on the queue right now (they hold
            // the loop, not us): libdbus's watches are let go of on the queue, after it.
            let loop = loop
            if DispatchQueue.getSpecific(key: onQueue) == true {
                loop.uninstallFromAnyThread()
            } else {
                queue.sync { loop.uninstallFromAnyThread() }
            }
        }
        dbus_connection_unref(raw)
    }

    /// Closes the connection. Pending calls fail; handlers are dropped (the
    /// `onDisconnect` ones are not called). Not from the connection's queue.
    public func close() {
        queue.sync {
            guard !closed else { return }
            closed = true
            subscriptions.removeAll()
            disconnectHandlers.removeAll()
            dbus_connection_close(raw)
            // Dispatching once more makes libdbus drop the pending calls, which
            // fails them (see ReplyBox); what is still queued goes nowhere.
            loop.drain()
            loop.uninstall()
        }
    }

    /// Runs `body` on the connection's queue.
    public func perform(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
    }

    /// A reply or signal that would break the bus's size limits is never sent (see
    /// `WireLimits`): a method call then answers `errorName` (default
    /// `org.freedesktop.DBus.Error.LimitsExceeded`) instead, and `log` hears of
    /// every such message, signals included (on the queue).
    public func onOversizeMessage(errorName: String? = nil, log: @escaping @Sendable (String) -> Void) {
        queue.async { self.oversize = (errorName, log) }
    }

    /// Reports a message that was too large; returns the error to answer with. On the queue.
    func tooLarge(_ what: String, _ error: BusError) -> BusError {
        oversize?.log("\(what) not sent: \(error.message)")
        return BusError(name: oversize?.errorName ?? error.name, message: "the reply would be too large for the bus: \(error.message)")
    }

    /// Method calls to this connection's objects whose arguments take more than `bytes`
    /// on the wire answer `errorName` before any of them is read: a call the bus lets
    /// through (up to 128 MiB) can otherwise hold millions of values, each one
    /// allocated before any per-argument limit sees it.
    public func limitCallArguments(to bytes: Int, errorName: String = StandardErrors.limitsExceeded) {
        queue.async { self.callBodyLimit = (bytes, errorName) }
    }

    /// Method calls on an object that does not exist below `prefix` (a session or
    /// transfer that never was, or is gone) answer `errorName` rather than
    /// `UnknownObject`; the message calls it a `noun`.
    public func setMissingObjectError(prefix: String, errorName: String, noun: String) {
        queue.async { self.missingObjectErrors.append((prefix, errorName, noun)) }
    }

    /// After handling what one read of the socket brought, waits `seconds` before
    /// reading again, so that a stream of signals is handled in a few large bursts
    /// rather than one wake-up (of several threads) per message or two. For a client
    /// that follows many transfers and can take their news late by that much (a
    /// display); replies wait as long. 0 (the default) reads as soon as data comes,
    /// and set later it ends a rest under way.
    public func restBetweenReads(_ seconds: Double) {
        // At most an hour; NaN and below zero mean no rest.
        let ns = seconds > 0 ? UInt64(min(seconds, 3600) * 1_000_000_000) : 0
        queue.async { self.loop.setReadRest(ns) }
    }

    /// Called when the bus goes away (on the queue).
    public func onDisconnect(_ handler: @escaping @Sendable () -> Void) {
        queue.async { self.disconnectHandlers.append(handler) }
    }

    // MARK: Sending

    /// Sends a message that expects no reply (signals, replies).
    public func send(_ message: BusMessage) {
        queue.async { [self] in
            guard !closed else { return }
            dbus_connection_send(raw, message.raw, nil)
        }
    }

    /// Sends a method call; `completion` gets the method return, or the error reply
    /// as a `BusError`. Runs on the queue.
    public func send(_ call: BusMessage, timeout: Double = 25,
                     completion: @escaping @Sendable (Result<BusMessage, BusError>) -> Void) {
        queue.async { [self] in
            guard !closed else {
                completion(.failure(BusError(name: StandardErrors.disconnected, message: "connection closed")))
                return
            }
            var pending: OpaquePointer? = nil
            let ms = timeout < 0 ? -1 : Int32(min(timeout * 1000, Double(Int32.max)))
            guard dbus_connection_send_with_reply(raw, call.raw, &pending, ms) != 0, let pending else {
                completion(.failure(BusError(name: StandardErrors.disconnected, message: "not connected to the bus")))
                return
            }
            // Who answers for a well-known name: the bus routed the call to its owner, or
            // said who owns it (GetNameOwner).
            let wellKnown = call.destination.flatMap { $0.hasPrefix(":") || $0 == StandardNames.bus ? nil : $0 }
            let ownerAsked = call.destination == StandardNames.bus && call.member == "GetNameOwner"
                ? (try? call.arguments())?.first?.string : nil
            let box = ReplyBox(queue: queue) { [weak self] result in
                if case .success(let reply) = result {
                    if let wellKnown, let owner = reply.sender, owner.hasPrefix(":") {
                        self?.answeredFor[wellKnown] = owner
                    } else if let ownerAsked, let owner = (try? reply.arguments())?.first?.string, owner.hasPrefix(":") {
                        self?.answeredFor[ownerAsked] = owner
                    }
                }
                completion(result)
            }
            // The reply can only be read on this queue, so it cannot complete
            // between sending and setting the notify function.
            guard dbus_pending_call_set_notify(pending, replyArrived, Unmanaged.passRetained(box).toOpaque(), releaseReplyBox) != 0 else {
                Unmanaged.passUnretained(box).release()
                dbus_pending_call_cancel(pending)
                dbus_pending_call_unref(pending)
                return
            }
            if dbus_pending_call_get_completed(pending) != 0 { box.finish(pending) }
            // The connection keeps the pending call until it completes or is
            // dropped, and the call keeps the box: the box must not keep the call,
            // or neither is ever freed.
            dbus_pending_call_unref(pending)
        }
    }

    /// Calls a method and waits for its reply.
    public func call(_ call: BusMessage, timeout: Double = 25) async throws -> BusMessage {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<BusMessage, Error>) in
            send(call, timeout: timeout) { result in c.resume(with: result.mapError { $0 as Error }) }
        }
    }

    /// Calls a method and returns the reply's values.
    @discardableResult
    public func call(destination: String, path: String, interface: String, method: String,
                     arguments: [DBusValue] = [], timeout: Double = 25, autoStart: Bool = true) async throws -> [DBusValue] {
        let m = try BusMessage.methodCall(destination: destination, path: path, interface: interface, member: method)
        try m.append(arguments)
        m.autoStart = autoStart
        return try await call(m, timeout: timeout).arguments()
    }

    /// Emits a signal: to the `audience` of the object at `path` when it has one, else
    /// broadcast. One on an object that coalesces its property changes goes after
    /// every change held back (an `AllFinished` after the counts that say so).
    public func emitSignal(path: String, interface: String, name: String, arguments: [DBusValue] = []) throws {
        let m = try BusMessage.signal(path: path, interface: interface, member: name)
        try m.append(arguments)
        queue.async { [self] in sendSignalOnQueue(m, path: path, audience: objects[path]?.audience) }
    }

    /// `emitSignal` for code already on the queue (work handed over in one `perform`).
    /// `audience`: who hears it, for a signal that is not its object's (a manager's
    /// signal about private work); nil: the object's audience, else broadcast.
    public func emitSignalNow(path: String, interface: String, name: String, arguments: [DBusValue] = [],
                              to audience: SignalAudience? = nil) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        let m = try BusMessage.signal(path: path, interface: interface, member: name)
        try m.append(arguments)
        sendSignalOnQueue(m, path: path, audience: audience ?? objects[path]?.audience)
    }

    private func sendSignalOnQueue(_ m: BusMessage, path: String, audience: SignalAudience?) {
        guard !closed else { return }
        if !heldBack.isEmpty, objects[path]?.coalescesChanges == true { sendHeldBackChanges() }
        sendSignal(m, to: audience)
    }

    // MARK: Bus methods

    public enum RequestNameReply: UInt32, Sendable {
        case primaryOwner = 1, inQueue = 2, exists = 3, alreadyOwner = 4
    }

    /// `RequestName` with `DBUS_NAME_FLAG_DO_NOT_QUEUE` by default.
    public func requestName(_ name: String, flags: UInt32 = 4) async throws -> RequestNameReply {
        let r = try await call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                               method: "RequestName", arguments: [.string(name), .uint32(flags)])
        guard let code = r.first?.uint32, let reply = RequestNameReply(rawValue: code) else {
            throw BusError(name: StandardErrors.failed, message: "unexpected RequestName reply")
        }
        return reply
    }

    /// Whether a name currently has an owner on the bus.
    public func nameHasOwner(_ name: String) async throws -> Bool {
        let r = try await call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                               method: "NameHasOwner", arguments: [.string(name)])
        return r.first?.bool ?? false
    }

    // MARK: Signals

    /// A registered signal handler; pass it to `unsubscribe`.
    public struct Subscription: Hashable, Sendable {
        let id: UInt64
        let rule: MatchRule
    }

    /// Adds the match rule on the bus (waiting until the bus has it, so no signal
    /// sent after this returns is missed) and calls `handler` on the queue for
    /// every matching signal.
    public func subscribe(_ rule: MatchRule, handler: @escaping @Sendable (BusMessage) -> Void) async throws -> Subscription {
        let id: UInt64 = queue.sync {
            let id = nextSubscription
            nextSubscription += 1
            subscriptions[id] = (rule, handler)
            return id
        }
        do {
            try await call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                           method: "AddMatch", arguments: [.string(rule.text)])
        } catch {
            // Taken back from the bus too: a call that timed out may have added it there.
            unsubscribe(Subscription(id: id, rule: rule), evenIfUnknown: true)
            throw error
        }
        // A rule naming a service by its well-known name: who owns it now, so that the
        // signals it addresses to us before it first answers a call of ours are taken.
        if let name = rule.sender, !name.hasPrefix(":"), name != StandardNames.bus,
           queue.sync(execute: { answeredFor[name] == nil }) {
            _ = try? await call(destination: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                                method: "GetNameOwner", arguments: [.string(name)])
        }
        return Subscription(id: id, rule: rule)
    }

    /// Calls `handler` with every unique name (`:1.42`) that leaves the bus: the bus
    /// daemon's `NameOwnerChanged` for it with no new owner.
    public func subscribeToDepartures(_ handler: @escaping @Sendable (String) -> Void) async throws -> Subscription {
        let rule = MatchRule(sender: StandardNames.bus, path: StandardNames.busPath, interface: StandardNames.bus,
                             member: "NameOwnerChanged")
        return try await subscribe(rule) { message in
            guard let args = try? message.arguments(), args.count == 3,
                  let name = args[0].string, name.hasPrefix(":"), args[2].string == "" else { return }
            handler(name)
        }
    }

    /// Adds several match rules, all or none: when the bus refuses one (its quota of
    /// rules, a timeout), the ones added before it are removed again, so a caller that
    /// tries again later holds each rule once.
    public func subscribe(all rules: [(MatchRule, @Sendable (BusMessage) -> Void)]) async throws -> [Subscription] {
        var added: [Subscription] = []
        do {
            for (rule, handler) in rules { added.append(try await subscribe(rule, handler: handler)) }
        } catch {
            for s in added { unsubscribe(s) }
            throw error
        }
        return added
    }

    public func unsubscribe(_ s: Subscription) { unsubscribe(s, evenIfUnknown: false) }

    private func unsubscribe(_ s: Subscription, evenIfUnknown: Bool) {
        queue.async { [self] in
            guard subscriptions.removeValue(forKey: s.id) != nil || evenIfUnknown, !closed else { return }
            if let m = try? BusMessage.methodCall(destination: StandardNames.bus, path: StandardNames.busPath,
                                                  interface: StandardNames.bus, member: "RemoveMatch") {
                try? m.append([.string(s.rule.text)])
                send(m) { _ in }
            }
        }
    }

    // MARK: Routing (on the queue, from the filter)

    /// Returns true when the message was handled here.
    func route(_ message: BusMessage) -> Bool {
        if closed { return true }
        switch message.type {
        case .signal:
            if message.interface == StandardNames.local, message.member == "Disconnected" {
                let handlers = disconnectHandlers
                for h in handlers { h() }
                return true
            }
            // A signal addressed to us reaches us whatever our match rules say (the bus
            // applies them only to broadcasts): from anyone but the bus itself it is a
            // peer's, which a subscription takes only when its rule names that peer as
            // sender — by unique name, or by a well-known name whose owner answered our
            // last call to it (a service sending its private signals unicast). Otherwise
            // a peer could pass one off as the bus's or a service's (a NameOwnerChanged,
            // a transfer's Completed).
            if message.destination != nil && message.sender != StandardNames.bus {
                guard let sender = message.sender else { return true }
                for (_, s) in subscriptions where s.rule.isFrom(sender, answeredFor: answeredFor) && s.rule.matches(message) {
                    s.handler(message)
                }
                return true
            }
            for (_, s) in subscriptions where s.rule.matches(message) { s.handler(message) }
            return false
        case .methodCall:
            admitMethodCall(message)
            return true
        default:
            return false
        }
    }
}

/// Carries a pending call's completion through libdbus; owned by the pending call
/// (its notify data), so it goes when the call is freed.
private final class ReplyBox {
    let queue: DispatchQueue
    let completion: @Sendable (Result<BusMessage, BusError>) -> Void
    private var done = false
    init(queue: DispatchQueue, completion: @escaping @Sendable (Result<BusMessage, BusError>) -> Void) {
        self.queue = queue
        self.completion = completion
    }
    func finish(_ pending: OpaquePointer) {
        guard !done else { return }
        done = true
        guard let reply = dbus_pending_call_steal_reply(pending) else {
            completion(.failure(BusError(name: StandardErrors.noReply, message: "no reply")))
            return
        }
        let message = BusMessage(owning: reply)
        if message.type == .error {
            completion(.failure(message.asError()))
        } else {
            completion(.success(message))
        }
    }
    deinit {
        // libdbus drops, without completing them, the pending calls of a connection
        // that is closed or lost (and frees them with it): the caller must hear.
        // Later, on the queue: this runs inside libdbus.
        guard !done else { return }
        let completion = self.completion
        queue.async {
            completion(.failure(BusError(name: StandardErrors.disconnected, message: "the connection closed before the reply arrived")))
        }
    }
}

private let replyArrived: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { pending, data in
    guard let pending, let data else { return }
    Unmanaged<ReplyBox>.fromOpaque(data).takeUnretainedValue().finish(pending)
}

private let releaseReplyBox: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
    guard let data else { return }
    Unmanaged<ReplyBox>.fromOpaque(data).release()
}
