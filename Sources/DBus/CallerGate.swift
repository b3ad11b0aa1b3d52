import Dispatch

/// Who is calling, decided by the application before a call is dispatched: lets a
/// service show each caller only the objects that are its own.
///
/// With a gate set (`BusConnection.setCallerGate`), every method call to this
/// connection's objects — the application's methods and the standard `Properties`,
/// `ObjectManager` and `Introspectable` ones — waits until its sender is known. A
/// sender's calls stay in order; a sender being looked up never holds up another.
/// The gate's answer travels with the call (`MethodInvocation.caller`).
public protocol CallerGate: AnyObject, Sendable {
    /// What is known of `sender` now (on the connection's queue, so: fast, no waiting),
    /// nil to have `lookUp` called first.
    func knownCaller(_ sender: String) -> (any Sendable)?
    /// Finds out who `sender` is without blocking; calls `done` once, on any thread.
    func lookUp(_ sender: String, done: @escaping @Sendable ((any Sendable)) -> Void)
    /// On the queue: nil when `caller` may use the object at `path` (`object` is nil
    /// when nothing is exported there), else the error the call gets. `member` is the
    /// method called (`Get`, `Set`, `GetAll`, `GetManagedObjects`, `Introspect` for the
    /// standard interfaces; `GetManagedObjects` also asks about each managed object).
    func refusal(for caller: any Sendable, path: String, object: ExportedObject?,
                 interface: String?, member: String) -> BusError?
}

/// The connection's side of the gate: the gate and the calls waiting for it.
/// Queue-confined (the connection's queue).
final class CallerGatekeeper {
    /// Calls one sender may have waiting while it is looked up; more are refused.
    static let waitingLimit = 256

    /// Bytes of calls one sender, and all senders together, may have waiting. libdbus
    /// stops reading the bus once the messages it holds pass about 63 MiB, and then
    /// could not read the lookups' own answers either: every caller would wait out
    /// their timeout.
    static let waitingBytesPerSender = 8 << 20
    static let waitingBytesInAll = 32 << 20

    let gate: CallerGate
    var waiting: [String: [BusMessage]] = [:]
    var waitingBytes: [String: Int] = [:]
    var waitingBytesTotal = 0

    init(gate: CallerGate) { self.gate = gate }
}

extension BusConnection {
    /// Identifies callers from now on (before objects are exported and the name taken).
    public func setCallerGate(_ gate: CallerGate) {
        queue.async { [self] in
            let keeper = CallerGatekeeper(gate: gate)
            if let old = gatekeeper { // a gate set again: the calls waiting for the old one wait on
                (keeper.waiting, keeper.waitingBytes, keeper.waitingBytesTotal) = (old.waiting, old.waitingBytes, old.waitingBytesTotal)
            }
            gatekeeper = keeper
        }
    }

    /// Dispatches a method call once its sender is known (on the queue).
    func admitMethodCall(_ m: BusMessage) {
        guard let keeper = gatekeeper, let sender = m.sender else { return dispatchMethodCall(m, caller: nil) }
        if keeper.waiting[sender] == nil, let caller = keeper.gate.knownCaller(sender) { return dispatchMethodCall(m, caller: caller) }
        // To wait while its sender is looked up: refused at once when it is larger than a
        // call may be, or than the room left for waiting calls.
        func refuse(_ error: BusError) {
            if !m.noReplyExpected, let e = try? m.makeError(name: error.name, message: error.message) { sendOnQueue(e) }
        }
        let size = m.bodyLength ?? 0
        if let limit = callBodyLimit, size > limit.bytes {
            return refuse(.callTooLarge(size, limit: limit.bytes, name: limit.errorName))
        }
        let held = keeper.waitingBytes[sender] ?? 0
        guard (keeper.waiting[sender]?.count ?? 0) < CallerGatekeeper.waitingLimit,
              held + size <= CallerGatekeeper.waitingBytesPerSender,
              keeper.waitingBytesTotal + size <= CallerGatekeeper.waitingBytesInAll else {
            return refuse(BusError(name: callBodyLimit?.errorName ?? StandardErrors.limitsExceeded,
                                   message: "too many calls while the caller is being identified"))
        }
        keeper.waitingBytes[sender] = held + size
        keeper.waitingBytesTotal += size
        if keeper.waiting[sender] != nil {
            keeper.waiting[sender]!.append(m)
            return
        }
        keeper.waiting[sender] = [m]
        keeper.gate.lookUp(sender) { [weak self] caller in
            guard let self else { return }
            self.queue.async {
                // The gatekeeper is the connection's (queue-confined): read there, not captured.
                guard let keeper = self.gatekeeper else { return }
                keeper.waitingBytesTotal -= keeper.waitingBytes.removeValue(forKey: sender) ?? 0
                for call in keeper.waiting.removeValue(forKey: sender) ?? [] { self.dispatchMethodCall(call, caller: caller) }
            }
        }
    }

    /// The gate's refusal for this call, if any (on the queue).
    func gateRefusal(_ caller: (any Sendable)?, path: String, object: ExportedObject?, interface: String?,
                     member: String) -> BusError? {
        guard let caller, let gate = gatekeeper?.gate else { return nil }
        return gate.refusal(for: caller, path: path, object: object, interface: interface, member: member)
    }
}
