import Glibc

/// libnotify and the parts of GLib the notifier uses, loaded with `dlopen` when the
/// first notification is posted, not linked: libnotify brings GLib, GObject, GIO and
/// gdk-pixbuf (about 2 MiB of resident pages once mapped), and a ferryd that has not
/// ended a batch yet (one restoring ten thousand paused transfers, one activated for a
/// listing) has no use for them. Where libnotify is not installed, ferryd runs
/// without notifications.
///
/// The C signatures below are those of libnotify 0.7/0.8 (`libnotify.so.4`) and
/// GLib 2.x, whose ABIs are stable; the GLib functions are looked up through
/// libnotify's handle (they come with it as its dependencies).
struct LibNotify {
    typealias Pointer = OpaquePointer
    /// `gboolean` is a C `int`.
    typealias GBoolean = Int32
    /// `NotifyActionCallback`: the notification, the action's key, the user data.
    typealias ActionCallback = @convention(c) (Pointer?, UnsafeMutablePointer<CChar>?, UnsafeMutableRawPointer?) -> Void
    /// `GDestroyNotify` / `GFreeFunc`.
    typealias DestroyNotify = @convention(c) (UnsafeMutableRawPointer?) -> Void
    /// `GSourceFunc`.
    typealias SourceFunc = @convention(c) (UnsafeMutableRawPointer?) -> GBoolean
    /// `GLogFunc`: domain, level, message, user data.
    typealias LogFunc = @convention(c) (UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void
    /// The handler of a notification's "closed" signal.
    typealias ClosedCallback = @convention(c) (Pointer?, UnsafeMutableRawPointer?) -> Void

    let initialise: @convention(c) (UnsafePointer<CChar>?) -> GBoolean
    let isInitialised: @convention(c) () -> GBoolean
    let uninitialise: @convention(c) () -> Void
    /// A `GList` of `char *`, freed with `g_list_free_full(list, g_free)`.
    let serverCaps: @convention(c) () -> UnsafeMutableRawPointer?
    let newNotification: @convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Pointer?
    let update: @convention(c) (Pointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> GBoolean
    let setHintString: @convention(c) (Pointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void
    let setCategory: @convention(c) (Pointer?, UnsafePointer<CChar>?) -> Void
    /// `NotifyUrgency`: 0 low, 1 normal, 2 critical.
    let setUrgency: @convention(c) (Pointer?, Int32) -> Void
    let setTimeout: @convention(c) (Pointer?, Int32) -> Void
    let clearActions: @convention(c) (Pointer?) -> Void
    let addAction: @convention(c) (Pointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, ActionCallback?,
                                   UnsafeMutableRawPointer?, DestroyNotify?) -> Void
    /// The last two take a `GError **`.
    let show: @convention(c) (Pointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> GBoolean
    let close: @convention(c) (Pointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> GBoolean
    /// Nil before libnotify 0.7.10 (no activation tokens then).
    let activationToken: (@convention(c) (Pointer?) -> UnsafePointer<CChar>?)?

    let mainContextNew: @convention(c) () -> Pointer?
    let mainLoopNew: @convention(c) (Pointer?, GBoolean) -> Pointer?
    let mainLoopRun: @convention(c) (Pointer?) -> Void
    let mainLoopQuit: @convention(c) (Pointer?) -> Void
    let pushThreadDefault: @convention(c) (Pointer?) -> Void
    let popThreadDefault: @convention(c) (Pointer?) -> Void
    let invokeFull: @convention(c) (Pointer?, Int32, SourceFunc?, UnsafeMutableRawPointer?, DestroyNotify?) -> Void
    let logSetHandler: @convention(c) (UnsafePointer<CChar>?, Int32, LogFunc?, UnsafeMutableRawPointer?) -> UInt32
    let errorFree: @convention(c) (UnsafeMutableRawPointer?) -> Void
    let free: DestroyNotify
    let listFreeFull: @convention(c) (UnsafeMutableRawPointer?, DestroyNotify?) -> Void
    /// `g_signal_connect_data(instance, signal, handler, data, destroy, flags)`.
    let signalConnectData: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?,
                                           UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, Int32) -> UInt
    let objectUnref: @convention(c) (UnsafeMutableRawPointer?) -> Void

    /// `G_PRIORITY_DEFAULT`.
    static let priorityDefault: Int32 = 0
    /// `G_SOURCE_REMOVE`.
    static let sourceRemove: GBoolean = 0
    /// `NOTIFY_EXPIRES_DEFAULT`.
    static let expiresDefault: Int32 = -1
    /// `G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION`: every bit.
    static let allLogLevels: Int32 = -1

    /// Loads libnotify and looks every function up; the reason in words when it cannot.
    /// Loading it twice is harmless (`dlopen` counts references); the notifier loads it once.
    static func load(fileName: String) -> Result<LibNotify, LoadFailure> {
        guard let handle = dlopen(fileName, RTLD_NOW | RTLD_LOCAL) else {
            return .failure(LoadFailure(message: dlerror().map { String(cString: $0) } ?? "\(fileName) could not be loaded"))
        }
        struct Missing: Error { let name: String }
        func symbol<F>(_ name: String, as type: F.Type) throws -> F {
            guard let p = dlsym(handle, name) else { throw Missing(name: name) }
            return unsafeBitCast(p, to: type)
        }
        func optionalSymbol<F>(_ name: String, as type: F.Type) -> F? {
            dlsym(handle, name).map { unsafeBitCast($0, to: type) }
        }
        do {
            return .success(try LibNotify(
            initialise: symbol("notify_init", as: (@convention(c) (UnsafePointer<CChar>?) -> GBoolean).self),
            isInitialised: symbol("notify_is_initted", as: (@convention(c) () -> GBoolean).self),
            uninitialise: symbol("notify_uninit", as: (@convention(c) () -> Void).self),
            serverCaps: symbol("notify_get_server_caps", as: (@convention(c) () -> UnsafeMutableRawPointer?).self),
            newNotification: symbol("notify_notification_new", as: (@convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Pointer?).self),
            update: symbol("notify_notification_update", as: (@convention(c) (Pointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> GBoolean).self),
            setHintString: symbol("notify_notification_set_hint_string", as: (@convention(c) (Pointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void).self),
            setCategory: symbol("notify_notification_set_category", as: (@convention(c) (Pointer?, UnsafePointer<CChar>?) -> Void).self),
            setUrgency: symbol("notify_notification_set_urgency", as: (@convention(c) (Pointer?, Int32) -> Void).self),
            setTimeout: symbol("notify_notification_set_timeout", as: (@convention(c) (Pointer?, Int32) -> Void).self),
            clearActions: symbol("notify_notification_clear_actions", as: (@convention(c) (Pointer?) -> Void).self),
            addAction: symbol("notify_notification_add_action", as: (@convention(c) (Pointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, ActionCallback?, UnsafeMutableRawPointer?, DestroyNotify?) -> Void).self),
            show: symbol("notify_notification_show", as: (@convention(c) (Pointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> GBoolean).self),
            close: symbol("notify_notification_close", as: (@convention(c) (Pointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> GBoolean).self),
            activationToken: optionalSymbol("notify_notification_get_activation_token", as: (@convention(c) (Pointer?) -> UnsafePointer<CChar>?).self),
            mainContextNew: symbol("g_main_context_new", as: (@convention(c) () -> Pointer?).self),
            mainLoopNew: symbol("g_main_loop_new", as: (@convention(c) (Pointer?, GBoolean) -> Pointer?).self),
            mainLoopRun: symbol("g_main_loop_run", as: (@convention(c) (Pointer?) -> Void).self),
            mainLoopQuit: symbol("g_main_loop_quit", as: (@convention(c) (Pointer?) -> Void).self),
            pushThreadDefault: symbol("g_main_context_push_thread_default", as: (@convention(c) (Pointer?) -> Void).self),
            popThreadDefault: symbol("g_main_context_pop_thread_default", as: (@convention(c) (Pointer?) -> Void).self),
            invokeFull: symbol("g_main_context_invoke_full", as: (@convention(c) (Pointer?, Int32, SourceFunc?, UnsafeMutableRawPointer?, DestroyNotify?) -> Void).self),
            logSetHandler: symbol("g_log_set_handler", as: (@convention(c) (UnsafePointer<CChar>?, Int32, LogFunc?, UnsafeMutableRawPointer?) -> UInt32).self),
            errorFree: symbol("g_error_free", as: (@convention(c) (UnsafeMutableRawPointer?) -> Void).self),
            free: symbol("g_free", as: DestroyNotify.self),
            listFreeFull: symbol("g_list_free_full", as: (@convention(c) (UnsafeMutableRawPointer?, DestroyNotify?) -> Void).self),
            signalConnectData: symbol("g_signal_connect_data", as: (@convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, Int32) -> UInt).self),
            objectUnref: symbol("g_object_unref", as: (@convention(c) (UnsafeMutableRawPointer?) -> Void).self)))
        } catch {
            dlclose(handle)
            return .failure(LoadFailure(message: "\(fileName) has no \((error as? Missing)?.name ?? "function it should have")"))
        }
    }

    struct LoadFailure: Error {
        let message: String
    }

    /// `GError.message` (after the `GQuark` domain and the `gint` code: offset 8 on
    /// every ABI GLib supports).
    static func errorMessage(_ error: UnsafeMutableRawPointer) -> String {
        error.load(fromByteOffset: 8, as: UnsafePointer<CChar>?.self).map { String(cString: $0) } ?? "unknown error"
    }

    /// The strings of a `GList` of `char *` (`data`, then `next`).
    static func strings(of list: UnsafeMutableRawPointer) -> [String] {
        var out: [String] = []
        var node: UnsafeMutableRawPointer? = list
        while let n = node {
            if let data = n.load(as: UnsafePointer<CChar>?.self) { out.append(String(cString: data)) }
            node = n.load(fromByteOffset: MemoryLayout<UnsafeRawPointer>.stride, as: UnsafeMutableRawPointer?.self)
        }
        return out
    }
}
