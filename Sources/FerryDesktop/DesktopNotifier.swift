import CNotify
import FerryCore
import Foundation
import Logging

/// Desktop notifications through libnotify, from one GLib thread of its own.
///
/// The thread runs a `GMainLoop` on a private `GMainContext`, pushed as its
/// thread-default context before libnotify is first used, so libnotify's proxy
/// delivers `ActionInvoked` and `NotificationClosed` there. Every libnotify call is
/// made on that thread. `notify_notification_show` is a synchronous bus call: a
/// missing server fails it at once, a hung one blocks it for D-Bus's default 25 s —
/// either way only this thread waits. `post` only leaves the newest notification in
/// a one-slot inbox; batches that end while a show is stuck replace each other there
/// instead of queueing up.
///
/// Make one per process and keep it until the process exits: libnotify's callbacks
/// and GLib's log handler hold it unretained.
///
/// `@unchecked Sendable`: `state` is only touched under `lock`; every other mutable
/// field (`glib`) is confined to the GLib thread.
public final class DesktopNotifier: Notifier, @unchecked Sendable {
    /// How long a shown notification with buttons counts as pending when the server
    /// never says it was closed (servers that keep notifications in a tray until the
    /// user dismisses them).
    public let actionWindow: Double

    private let appName: String
    private let desktopEntry: String
    private let logger: Logger
    private let context: OpaquePointer
    private let loop: OpaquePointer

    private let lock = NSLock()
    private var state = SharedState()
    private var glib = GLibState()

    /// Under `lock`.
    private struct SharedState {
        var inbox: DesktopNotification?
        var showScheduled = false
        /// A show is in progress (its outcome is not known yet).
        var showing = false
        /// The shown notification has buttons that may still be clicked, until then.
        var pendingUntil: Date?
        var handler: (@Sendable (UInt64, String, String) -> Void)?
        var closed = false
    }

    /// On the GLib thread only.
    private struct GLibState {
        var notification: UnsafeMutablePointer<NotifyNotification>?
        /// The server's capabilities, once it answered.
        var capabilities: Set<String>?
        /// The last show failed; the failure was logged (once).
        var serverFailing = false
        var shownActions = false
    }

    /// Starts the GLib thread. libnotify talks to the session bus named by
    /// `DBUS_SESSION_BUS_ADDRESS`.
    /// - Parameters:
    ///   - appName: the application name the server shows.
    ///   - desktopEntry: the `desktop-entry` hint (the desktop file's name without `.desktop`).
    ///   - actionWindow: see `actionWindow`; 5 minutes by default.
    public init(appName: String = "Ferry", desktopEntry: String = "org.ferry.Ferry", actionWindow: Double = 300,
                logger: Logger = Logger(label: "ferry.notify")) {
        self.appName = appName
        self.desktopEntry = desktopEntry
        self.actionWindow = actionWindow
        self.logger = logger
        context = g_main_context_new()
        loop = g_main_loop_new(context, 0)
        // libnotify's own warnings (a missing server) go to our log, at debug level:
        // ours already says it once.
        g_log_set_handler("libnotify", ferry_g_log_all_levels(), libnotifyLog, Unmanaged.passUnretained(self).toOpaque())
        let thread = Thread { [self] in
            g_main_context_push_thread_default(context)
            g_main_loop_run(loop)
            g_main_context_pop_thread_default(context)
        }
        thread.name = "ferry.notify"
        thread.start()
    }

    // MARK: Notifier (any thread)

    public func post(_ notification: DesktopNotification) {
        let schedule: Bool = lock.withLock {
            guard !state.closed else { return false }
            state.inbox = notification
            defer { state.showScheduled = true }
            return !state.showScheduled
        }
        if schedule { onGLibThread { $0.showNewest() } }
    }

    public func setActionHandler(_ handler: @escaping @Sendable (UInt64, String, String) -> Void) {
        lock.withLock { state.handler = handler }
    }

    public var hasPendingActions: Bool {
        lock.withLock {
            if state.showScheduled || state.showing { return true }
            guard let until = state.pendingUntil else { return false }
            return Date() < until
        }
    }

    public func close(timeout: Double) {
        let alreadyClosed: Bool = lock.withLock {
            defer { state.closed = true }
            return state.closed
        }
        guard !alreadyClosed else { return }
        let done = DispatchSemaphore(value: 0)
        onGLibThread { notifier in
            notifier.withdraw()
            g_main_loop_quit(notifier.loop)
            done.signal()
        }
        if done.wait(timeout: .now() + max(0, timeout)) == .timedOut {
            logger.warning("the notification server did not answer within \(timeout) s; leaving without closing the notification")
        }
    }

    // MARK: The GLib thread

    /// Runs `body` on the GLib thread (from its main loop).
    private func onGLibThread(_ body: @escaping (DesktopNotifier) -> Void) {
        let work = Unmanaged.passRetained(GLibWork { body(self) }).toOpaque()
        g_main_context_invoke_full(context, ferry_g_priority_default(), runGLibWork, work, releaseGLibWork)
    }

    private func showNewest() {
        let next: DesktopNotification? = lock.withLock {
            defer {
                state.inbox = nil
                state.showScheduled = false
            }
            if state.inbox != nil { state.showing = true }
            return state.inbox
        }
        guard let next else { return }
        let shown = show(next)
        lock.withLock {
            state.showing = false
            // A failed show: the server is gone, and any buttons of ours with it.
            state.pendingUntil = shown && !next.actions.isEmpty ? Date().addingTimeInterval(actionWindow) : nil
        }
    }

    /// Shows (or replaces) the one notification; false when the server is missing or failed.
    private func show(_ n: DesktopNotification) -> Bool {
        if notify_is_initted() == 0 {
            guard notify_init(appName) != 0 else {
                logOnce("libnotify could not be initialised")
                return false
            }
        }
        if glib.capabilities == nil { glib.capabilities = serverCapabilities() }
        let markup = glib.capabilities?.contains("body-markup") ?? false
        let body = markup ? Self.escapeMarkup(n.body) : n.body

        let notification: UnsafeMutablePointer<NotifyNotification>
        if let existing = glib.notification {
            // Same object, same id: the server replaces what it shows.
            notify_notification_update(existing, n.summary, body, n.iconName)
            notification = existing
        } else {
            guard let created = notify_notification_new(n.summary, body, n.iconName) else {
                logOnce("libnotify could not create a notification")
                return false
            }
            _ = ferry_notification_connect_closed(created, notificationClosed, Unmanaged.passUnretained(self).toOpaque())
            glib.notification = created
            notification = created
        }
        notify_notification_set_hint_string(notification, "desktop-entry", desktopEntry)
        notify_notification_set_category(notification, n.category)
        notify_notification_set_urgency(notification, NotifyUrgency(rawValue: UInt32(n.urgency.rawValue)))
        notify_notification_set_timeout(notification, NOTIFY_EXPIRES_DEFAULT)
        notify_notification_clear_actions(notification)
        for action in n.actions {
            let box = Unmanaged.passRetained(ActionContext(notifier: self, batch: n.batch, key: action.key)).toOpaque()
            notify_notification_add_action(notification, action.key, action.label, actionInvoked, box, releaseActionContext)
        }

        var error: UnsafeMutablePointer<GError>?
        guard notify_notification_show(notification, &error) != 0 else {
            let message = error.map { String(cString: $0.pointee.message) } ?? "unknown error"
            if let error { g_error_free(error) }
            // The server may come back as another program with other capabilities.
            glib.capabilities = nil
            logOnce("no desktop notification could be shown: \(message). Transfers are not affected; further failures are not logged until a notification gets through")
            return false
        }
        if glib.serverFailing {
            glib.serverFailing = false
            logger.notice("desktop notifications work again")
        }
        glib.shownActions = !n.actions.isEmpty
        logger.debug("notification shown: \(n.summary) — \(n.body.replacingOccurrences(of: "\n", with: " / "))")
        return true
    }

    /// Logs the first failure of an outage, at warning level; the rest at debug.
    private func logOnce(_ message: String) {
        if glib.serverFailing {
            logger.debug("\(message)")
        } else {
            glib.serverFailing = true
            logger.warning("\(message)")
        }
    }

    private func serverCapabilities() -> Set<String>? {
        guard let list = notify_get_server_caps() else { return nil }
        var caps = Set<String>()
        var node: UnsafeMutablePointer<GList>? = list
        while let n = node {
            if let data = n.pointee.data { caps.insert(String(cString: data.assumingMemoryBound(to: CChar.self))) }
            node = n.pointee.next
        }
        g_list_free_full(list, g_free)
        return caps
    }

    /// Takes a notification whose buttons can still be clicked off the screen, and
    /// lets go of libnotify.
    private func withdraw() {
        if let n = glib.notification {
            let open = lock.withLock { state.pendingUntil != nil }
            if open, glib.shownActions {
                var error: UnsafeMutablePointer<GError>?
                if notify_notification_close(n, &error) == 0, let error { g_error_free(error) }
            }
            ferry_notification_unref(n)
            glib.notification = nil
        }
        if notify_is_initted() != 0 { notify_uninit() }
    }

    fileprivate func libnotifySaid(_ message: String) {
        logger.debug("libnotify: \(message)")
    }

    fileprivate func closed() {
        lock.withLock { state.pendingUntil = nil }
    }

    fileprivate func invoked(batch: UInt64, key: String, token: String) {
        let handler: (@Sendable (UInt64, String, String) -> Void)? = lock.withLock {
            // Servers close a notification once one of its actions is picked.
            state.pendingUntil = nil
            return state.handler
        }
        logger.info("notification action '\(key)' picked")
        handler?(batch, key, token)
    }

    /// `<`, `>` and `&` are markup for servers with `body-markup`.
    static func escapeMarkup(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}

/// A closure on its way to the GLib thread; owned by the GLib source (released by
/// `releaseGLibWork`).
private final class GLibWork {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}

private let runGLibWork: @convention(c) (gpointer?) -> gboolean = { data in
    if let data { Unmanaged<GLibWork>.fromOpaque(data).takeUnretainedValue().body() }
    return ferry_g_source_remove()
}

private let releaseGLibWork: @convention(c) (gpointer?) -> Void = { data in
    if let data { Unmanaged<GLibWork>.fromOpaque(data).release() }
}

/// What an action button stands for; owned by libnotify (freed with
/// `releaseActionContext` when the actions are cleared or the notification goes).
/// The notifier lives until the process exits, so the unowned reference holds.
private final class ActionContext {
    unowned let notifier: DesktopNotifier
    let batch: UInt64
    let key: String
    init(notifier: DesktopNotifier, batch: UInt64, key: String) {
        self.notifier = notifier; self.batch = batch; self.key = key
    }
}

private let actionInvoked: @convention(c) (UnsafeMutablePointer<NotifyNotification>?, UnsafeMutablePointer<CChar>?, gpointer?) -> Void = { notification, _, data in
    guard let data else { return }
    let context = Unmanaged<ActionContext>.fromOpaque(data).takeUnretainedValue()
    // The activation token is only valid during the callback.
    let token = notification.flatMap { notify_notification_get_activation_token($0) }.map { String(cString: $0) } ?? ""
    context.notifier.invoked(batch: context.batch, key: context.key, token: token)
}

private let releaseActionContext: @convention(c) (gpointer?) -> Void = { data in
    if let data { Unmanaged<ActionContext>.fromOpaque(data).release() }
}

/// The "closed" signal. The user data is the notifier, unretained: it outlives the
/// notification (`withdraw` unrefs the notification on the GLib thread before the
/// loop stops, and the notifier is never released before then).
private let notificationClosed: ferry_notification_closed_cb = { _, data in
    guard let data else { return }
    Unmanaged<DesktopNotifier>.fromOpaque(data).takeUnretainedValue().closed()
}

/// GLib log messages of the "libnotify" domain. The user data is the notifier,
/// unretained: it lives until the process exits (as with `notificationClosed`).
private let libnotifyLog: GLogFunc = { _, _, message, data in
    guard let data else { return }
    Unmanaged<DesktopNotifier>.fromOpaque(data).takeUnretainedValue().libnotifySaid(message.map { String(cString: $0) } ?? "")
}
