import FerryCore
import Foundation
import Logging

/// Desktop notifications through libnotify, from one GLib thread of its own.
///
/// Nothing of libnotify is loaded until the first notification is posted: then the
/// thread starts and loads it (`LibNotify`; not on the caller's thread, which is the
/// core's: loading fifteen libraries from a cold disk can take a while). Where it cannot
/// be loaded, that is logged once and notifications are dropped; transfers are not
/// affected.
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
/// `@unchecked Sendable`: `state` is only touched under `lock`; `loaded`, `loading` and
/// `unavailable` only under `loadLock`; every other mutable field (`glib`) is confined to
/// the GLib thread.
public final class DesktopNotifier: Notifier, @unchecked Sendable {
    /// How long a shown notification with buttons counts as pending when the server
    /// never says it was closed (servers that keep notifications in a tray until the
    /// user dismisses them).
    public let actionWindow: Double

    private let appName: String
    private let desktopEntry: String
    private let logger: Logger
    /// The library's file name (tests name one that does not exist).
    private let libraryName: String

    /// libnotify's file name (its soname, from the runtime package, not the `-dev` one).
    public static let libraryFileName = "libnotify.so.4"

    /// libnotify with its main context and loop, once the first post loaded them.
    /// (`@unchecked Sendable`: the pointers are used on the GLib thread, and by
    /// `g_main_context_invoke_full`, which GLib allows from any thread.)
    private struct Loaded: @unchecked Sendable {
        let lib: LibNotify
        let context: OpaquePointer
        let loop: OpaquePointer
    }
    private let loadLock = NSLock()
    /// Under `loadLock`.
    private var loaded: Loaded?
    /// Under `loadLock`: the GLib thread was started and is loading libnotify.
    private var loading = false
    /// Under `loadLock`: loading failed (logged); notifications are dropped.
    private var unavailable = false

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
        var notification: OpaquePointer?
        /// The server's capabilities, once it answered.
        var capabilities: Set<String>?
        /// The last show failed; the failure was logged (once).
        var serverFailing = false
        var shownActions = false
    }

    /// Loads nothing yet (see the type's comment). libnotify talks to the session bus
    /// named by `DBUS_SESSION_BUS_ADDRESS`.
    /// - Parameters:
    ///   - appName: the application name the server shows.
    ///   - desktopEntry: the `desktop-entry` hint (the desktop file's name without `.desktop`).
    ///   - actionWindow: see `actionWindow`; 5 minutes by default.
    ///   - libraryName: libnotify's file name, as `dlopen` takes it.
    public init(appName: String = "Ferry", desktopEntry: String = "org.ferry.Ferry", actionWindow: Double = 300,
                logger: Logger = Logger(label: "ferry.notify"), libraryName: String = DesktopNotifier.libraryFileName) {
        self.appName = appName
        self.desktopEntry = desktopEntry
        self.actionWindow = actionWindow
        self.logger = logger
        self.libraryName = libraryName
    }

    /// What the first post does: starts the GLib thread, which loads libnotify, makes
    /// its main loop and shows what is in the inbox then. Called with `loadLock` held.
    private func startLoading() {
        loading = true
        let thread = Thread { [self] in
            guard let made = load() else {
                loadLock.withLock {
                    loading = false
                    unavailable = true
                }
                dropPosted() // later posts are dropped at once
                return
            }
            loadLock.withLock {
                loading = false
                loaded = made
            }
            // Closed while it loaded (ferryd leaving): nothing to show, no loop to run.
            guard !lock.withLock({ state.closed }) else { return }
            made.lib.pushThreadDefault(made.context)
            showNewest()
            made.lib.mainLoopRun(made.loop)
            made.lib.popThreadDefault(made.context)
        }
        thread.name = "ferry.notify"
        thread.start()
    }

    /// On the new GLib thread: libnotify, a main context and its loop; nil (said once)
    /// when libnotify cannot be loaded.
    private func load() -> Loaded? {
        switch LibNotify.load(fileName: libraryName) {
        case .failure(let failure):
            logger.warning("no desktop notifications: libnotify could not be loaded (\(failure.message)). Transfers are not affected")
            return nil
        case .success(let lib):
            guard let context = lib.mainContextNew(), let loop = lib.mainLoopNew(context, 0) else {
                logger.warning("no desktop notifications: GLib could not make a main loop. Transfers are not affected")
                return nil
            }
            // libnotify's own warnings (a missing server) go to our log, at debug level:
            // ours already says it once.
            _ = lib.logSetHandler("libnotify", LibNotify.allLogLevels, libnotifyLog, Unmanaged.passUnretained(self).toOpaque())
            logger.debug("libnotify loaded")
            return Loaded(lib: lib, context: context, loop: loop)
        }
    }

    /// Whether libnotify has been loaded (by a post).
    public var isLoaded: Bool { loadLock.withLock { loaded != nil } }

    /// On the GLib thread, once it has loaded libnotify (it shows nothing before).
    private var lib: LibNotify { loadLock.withLock { loaded! }.lib }

    // MARK: Notifier (any thread)

    public func post(_ notification: DesktopNotification) {
        let schedule: Bool = lock.withLock {
            guard !state.closed else { return false }
            state.inbox = notification
            defer { state.showScheduled = true }
            return !state.showScheduled
        }
        guard schedule else { return }
        enum Next { case show(Loaded), drop, wait }
        let next: Next = loadLock.withLock {
            if let loaded { return .show(loaded) }
            if unavailable { return .drop }
            // The thread being started shows the inbox once libnotify is loaded.
            if !loading { startLoading() }
            return .wait
        }
        switch next {
        case .show(let loaded):
            onGLibThread(loaded) { $0.showNewest() }
        case .drop:
            dropPosted()
        case .wait:
            break
        }
    }

    /// libnotify is not there: what was posted goes nowhere, and nothing is pending.
    private func dropPosted() {
        lock.withLock {
            state.inbox = nil
            state.showScheduled = false
        }
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
            defer {
                state.closed = true
                state.inbox = nil // a thread still loading libnotify shows nothing then
            }
            return state.closed
        }
        // Not loaded (yet): nothing was shown, and there is no loop to stop.
        guard !alreadyClosed, let loaded = loadLock.withLock({ loaded }) else { return }
        let done = DispatchSemaphore(value: 0)
        onGLibThread(loaded) { notifier in
            notifier.withdraw()
            loaded.lib.mainLoopQuit(loaded.loop)
            done.signal()
        }
        if done.wait(timeout: .now() + max(0, timeout)) == .timedOut {
            logger.warning("the notification server did not answer within \(timeout) s; leaving without closing the notification")
        }
    }

    // MARK: The GLib thread

    /// Runs `body` on the GLib thread (from its main loop).
    private func onGLibThread(_ loaded: Loaded, _ body: @escaping (DesktopNotifier) -> Void) {
        let work = Unmanaged.passRetained(GLibWork { body(self) }).toOpaque()
        loaded.lib.invokeFull(loaded.context, LibNotify.priorityDefault, runGLibWork, work, releaseGLibWork)
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
        let lib = lib
        if lib.isInitialised() == 0 {
            guard lib.initialise(appName) != 0 else {
                logOnce("libnotify could not be initialised")
                return false
            }
        }
        if glib.capabilities == nil { glib.capabilities = serverCapabilities() }
        let markup = glib.capabilities?.contains("body-markup") ?? false
        let body = markup ? Self.escapeMarkup(n.body) : n.body

        let notification: OpaquePointer
        if let existing = glib.notification {
            // Same object, same id: the server replaces what it shows.
            _ = lib.update(existing, n.summary, body, n.iconName)
            notification = existing
        } else {
            guard let created = lib.newNotification(n.summary, body, n.iconName) else {
                logOnce("libnotify could not create a notification")
                return false
            }
            // g_signal_connect(created, "closed", handler, self): the handler's real
            // signature, passed as GLib's untyped GCallback.
            _ = lib.signalConnectData(UnsafeMutableRawPointer(created), "closed",
                                      unsafeBitCast(notificationClosed, to: UnsafeMutableRawPointer.self),
                                      Unmanaged.passUnretained(self).toOpaque(), nil, 0)
            glib.notification = created
            notification = created
        }
        lib.setHintString(notification, "desktop-entry", desktopEntry)
        lib.setCategory(notification, n.category)
        lib.setUrgency(notification, Int32(n.urgency.rawValue))
        lib.setTimeout(notification, LibNotify.expiresDefault)
        lib.clearActions(notification)
        for action in n.actions {
            let box = Unmanaged.passRetained(ActionContext(notifier: self, batch: n.batch, key: action.key)).toOpaque()
            lib.addAction(notification, action.key, action.label, actionInvoked, box, releaseActionContext)
        }

        var error: UnsafeMutableRawPointer?
        guard lib.show(notification, &error) != 0 else {
            let message = error.map { LibNotify.errorMessage($0) } ?? "unknown error"
            if let error { lib.errorFree(error) }
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
        guard let list = lib.serverCaps() else { return nil }
        let caps = Set(LibNotify.strings(of: list))
        lib.listFreeFull(list, lib.free)
        return caps
    }

    /// Takes a notification whose buttons can still be clicked off the screen, and
    /// lets go of libnotify.
    private func withdraw() {
        if let n = glib.notification {
            let open = lock.withLock { state.pendingUntil != nil }
            if open, glib.shownActions {
                var error: UnsafeMutableRawPointer?
                if lib.close(n, &error) == 0, let error { lib.errorFree(error) }
            }
            lib.objectUnref(UnsafeMutableRawPointer(n))
            glib.notification = nil
        }
        if lib.isInitialised() != 0 { lib.uninitialise() }
    }

    /// On the GLib thread, in an action's callback (the only time the token is valid).
    fileprivate func activationToken(of notification: OpaquePointer?) -> String {
        guard let notification, let get = lib.activationToken, let token = get(notification) else { return "" }
        return String(cString: token)
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

private let runGLibWork: LibNotify.SourceFunc = { data in
    if let data { Unmanaged<GLibWork>.fromOpaque(data).takeUnretainedValue().body() }
    return LibNotify.sourceRemove
}

private let releaseGLibWork: LibNotify.DestroyNotify = { data in
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

private let actionInvoked: LibNotify.ActionCallback = { notification, _, data in
    guard let data else { return }
    let context = Unmanaged<ActionContext>.fromOpaque(data).takeUnretainedValue()
    // The activation token is only valid during the callback.
    let token = context.notifier.activationToken(of: notification)
    context.notifier.invoked(batch: context.batch, key: context.key, token: token)
}

private let releaseActionContext: LibNotify.DestroyNotify = { data in
    if let data { Unmanaged<ActionContext>.fromOpaque(data).release() }
}

/// The "closed" signal. The user data is the notifier, unretained: it outlives the
/// notification (`withdraw` unrefs the notification on the GLib thread before the
/// loop stops, and the notifier is never released before then).
private let notificationClosed: LibNotify.ClosedCallback = { _, data in
    guard let data else { return }
    Unmanaged<DesktopNotifier>.fromOpaque(data).takeUnretainedValue().closed()
}

/// GLib log messages of the "libnotify" domain. The user data is the notifier,
/// unretained: it lives until the process exits (as with `notificationClosed`).
private let libnotifyLog: LibNotify.LogFunc = { _, _, message, data in
    guard let data else { return }
    Unmanaged<DesktopNotifier>.fromOpaque(data).takeUnretainedValue().libnotifySaid(message.map { String(cString: $0) } ?? "")
}
