import CDBus
import Dispatch

/// Who hears an object's signals when not everyone may: set on an `ExportedObject`
/// (`audience`), it makes every signal of that object — `PropertiesChanged`, the
/// signals the application emits on its path, and the `InterfacesAdded`/`Removed`
/// an object manager sends about it — go to each recipient on its own (a copy of the
/// message with DESTINATION set: the bus routes it to that connection only, whatever
/// the other connections' match rules say) instead of being broadcast.
public protocol SignalAudience: AnyObject, Sendable {
    /// On the connection's queue, once per signal: nil to broadcast it; else the unique
    /// names that each get a copy (empty: nobody hears of it).
    func recipients() -> [String]?
}

extension BusConnection {
    /// Sends a signal to `audience` (nil: broadcast). On the queue.
    func sendSignal(_ m: BusMessage, to audience: SignalAudience?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let names = audience?.recipients() else { return dbus_connection_send_if_open(self, m) }
        for name in names {
            // A sent message is locked: each recipient gets its own copy.
            guard let raw = dbus_message_copy(m.raw) else { continue }
            let copy = BusMessage(owning: raw)
            guard (try? copy.setDestination(name)) != nil else { continue }
            dbus_connection_send_if_open(self, copy)
        }
    }
}
