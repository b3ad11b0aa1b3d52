/// One desktop notification, as the notification server is asked to show it.
/// Built by the service from a finished batch; shown by a `Notifier`.
public struct DesktopNotification: Sendable, Equatable {
    public enum Urgency: UInt8, Sendable { case low = 0, normal = 1, critical = 2 }

    /// A button: `key` comes back to the action handler, `label` is what the user reads.
    /// The key "default" is the click on the notification itself.
    public struct Action: Sendable, Equatable {
        public var key: String
        public var label: String
        public init(key: String, label: String) { self.key = key; self.label = label }
    }

    /// Which batch this is; handed back with an action so a stale click can be told apart.
    public var batch: UInt64
    public var summary: String
    /// Plain text (the notifier escapes it where the server reads markup).
    public var body: String
    /// `transfer.complete` or `transfer.error` (the specification's categories).
    public var category: String
    public var urgency: Urgency
    public var actions: [Action]
    /// An icon name from the icon theme.
    public var iconName: String

    public init(batch: UInt64, summary: String, body: String, category: String, urgency: Urgency,
                actions: [Action] = [], iconName: String = "org.ferry.Ferry") {
        self.batch = batch; self.summary = summary; self.body = body; self.category = category
        self.urgency = urgency; self.actions = actions; self.iconName = iconName
    }
}

/// Shows desktop notifications: libnotify on its own thread in ferryd, a fake in tests.
///
/// Every method returns at once and may be called from any thread: a slow, hung or
/// missing notification server must never hold up the caller.
public protocol Notifier: AnyObject, Sendable {
    /// Shows `notification`, replacing the one shown before (one notification on
    /// screen at a time, never a stack).
    func post(_ notification: DesktopNotification)
    /// Called when the user picks an action: (batch, action key, activation token or "").
    /// Runs on the notifier's thread; the receiver hops to its own queue.
    func setActionHandler(_ handler: @escaping @Sendable (_ batch: UInt64, _ action: String, _ activationToken: String) -> Void)
    /// Whether a notification with actions may still be clicked (shown, not closed, and
    /// within the notifier's bound): the daemon does not exit while it is.
    var hasPendingActions: Bool { get }
    /// Takes the notification off the screen if it is still there (its buttons would
    /// have no one to answer them once the daemon has gone), and stops. Waits at most
    /// `timeout` seconds.
    func close(timeout: Double)
}
