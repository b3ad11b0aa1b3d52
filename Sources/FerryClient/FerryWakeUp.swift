import Foundation
internal import DBus

/// Lets Ferry wake an app: exports `org.freedesktop.Application` for a
/// DBusActivatable app (its `application-id`) and, when Ferry calls
/// `ActivateAction("ferry-events", [identifier], {})` because events are pending
/// for a session of the app and none of its clients is on the bus, hands the
/// session's identifier over — or, made with a delegate, opens the session with
/// that delegate, which then gets the pending events.
///
/// The app's sessions must name it: `configuration.applicationID = "org.example.App"`.
public final class FerryWakeUp: @unchecked Sendable {
    public let applicationID: String
    private let busAddress: String?
    private let onWake: @Sendable (String) -> Void
    private let lock = NSLock()
    private var connection: BusConnection?
    private var opened: [String: FerrySession] = [:]

    /// Calls `onWake` with the session identifier each time Ferry wakes the app.
    public init(applicationID: String, busAddress: String? = nil, onWake: @escaping @Sendable (String) -> Void) {
        self.applicationID = applicationID
        self.busAddress = busAddress
        self.onWake = onWake
    }

    /// Opens the woken session (once) with `delegate` (called on `delegateQueue`, as
    /// ``FerrySession/init(configuration:delegate:delegateQueue:)`` says), in a
    /// configuration `configure` may adjust.
    public convenience init(applicationID: String, busAddress: String? = nil, delegate: FerrySessionDelegate,
                            delegateQueue: OperationQueue? = nil,
                            configure: (@Sendable (inout FerrySession.Configuration) -> Void)? = nil) {
        let box = WeakBox()
        self.init(applicationID: applicationID, busAddress: busAddress) { identifier in
            guard let me = box.value else { return }
            me.lock.withLock {
                guard me.opened[identifier] == nil else { return }
                var c = FerrySession.Configuration.background(identifier: identifier)
                c.applicationID = applicationID
                c.busAddress = busAddress
                configure?(&c)
                // The session exists (it has events for the app): opening it must not
                // make an ephemeral one persistent unless `configure` asked for ephemeral.
                c.sendsPersistence = !c.isPersistent
                me.opened[identifier] = FerrySession(configuration: c, delegate: delegate, delegateQueue: delegateQueue)
            }
        }
        box.value = self
    }

    /// `@unchecked Sendable`: `value` is set once, in `init`, before the exported
    /// object can call back; afterwards it is only read (a weak load is atomic).
    private final class WeakBox: @unchecked Sendable { weak var value: FerryWakeUp? }

    /// The sessions opened on wake-ups.
    public var sessions: [FerrySession] { lock.withLock { Array(opened.values) } }

    /// The object path a DBusActivatable app serves: its id with dots as slashes.
    public static func objectPath(for applicationID: String) -> String {
        "/" + applicationID.replacingOccurrences(of: ".", with: "/").replacingOccurrences(of: "-", with: "_")
    }

    /// Exports the interface and takes the app's bus name.
    public func start() async throws {
        let bus: BusConnection
        do {
            bus = try busAddress.map { try BusConnection(address: $0) } ?? BusConnection.session()
        } catch {
            throw FerryError.wrap(error)
        }
        let onWake = onWake
        let spec = InterfaceSpec(name: "org.freedesktop.Application", methods: [
            MethodSpec("Activate", in: [ArgSpec("platform_data", "a{sv}")]) { $0.reply() },
            MethodSpec("Open", in: [ArgSpec("uris", "as"), ArgSpec("hint", "s"), ArgSpec("platform_data", "a{sv}")]) { $0.reply() },
            MethodSpec("ActivateAction", in: [ArgSpec("action_name", "s"), ArgSpec("parameter", "av"),
                                              ArgSpec("platform_data", "a{sv}")]) { inv in
                inv.reply()
                guard inv.arguments.first?.string == "ferry-events" else { return }
                for p in inv.arguments.dropFirst().first?.arrayElements ?? [] {
                    if let identifier = p.string { onWake(identifier) }
                }
            },
        ])
        bus.export(ExportedObject(path: Self.objectPath(for: applicationID), interfaces: [spec]))
        let reply = try await mapped { try await bus.requestName(applicationID) }
        guard reply == .primaryOwner || reply == .alreadyOwner else {
            bus.close()
            throw FerryError.invalidState("another process owns \(applicationID) on the bus")
        }
        lock.withLock { connection = bus }
    }

    /// Gives the name up.
    public func stop() {
        let c = lock.withLock { () -> BusConnection? in
            defer { connection = nil }
            return connection
        }
        c?.close()
    }
}
