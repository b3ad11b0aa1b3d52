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

    let gate: CallerGate
    var waiting: [String: [BusMessage]] = [:]

    init(gate: CallerGate) { self.gate = gate }
}

extension BusConnection {
    /// Identifies callers from now on (before objects are exported and the name taken).
    public func setCallerGate(_ gate: CallerGate) {
        queue.async { [self] in gatekeeper = CallerGatekeeper(gate: gate) }
    }

    /// Dispatches a method call once its sender is known (on the queue).
    func admitMethodCall(_ m: BusMessage) {
        guard let keeper = gatekeeper, let sender = m.sender else { return dispatchMethodCall(m, caller: nil) }
        if keeper.waiting[sender] != nil {
            guard keeper.waiting[sender]!.count < CallerGatekeeper.waitingLimit else {
                if !m.noReplyExpected, let e = try? m.makeError(name: "org.freedesktop.DBus.Error.LimitsExceeded",
                                                                  message: "too many calls while the caller is being identified") {
                    sendOnQueue(e)
                }
                return
            }
            keeper.waiting[sender]!.append(m)
            return
        }
        if let caller = keeper.gate.knownCaller(sender) { return dispatchMethodCall(m, caller: caller) }
        keeper.waiting[sender] = [m]
        keeper.gate.lookUp(sender) { [weak self] caller in
            guard let self else { return }
            self.queue.async {
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
