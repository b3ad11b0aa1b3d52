import CDBus
import Dispatch

/// Drives one libdbus connection from one serial dispatch queue: file descriptor
/// watches and timeouts become dispatch sources on that queue, and incoming
/// messages are dispatched there. Nothing polls: an idle connection costs no
/// wake-ups.
///
/// `@unchecked Sendable`: every mutable field is only touched on `queue` (libdbus
/// calls these callbacks from inside calls we make on `queue`), except during
/// `install`, which runs before the connection is shared.
final class MainLoop: @unchecked Sendable {
    let queue: DispatchQueue
    let raw: OpaquePointer
    private var drainScheduled = false
    /// Set by the connection; the filter routes messages to it.
    weak var connection: BusConnection?

    init(raw: OpaquePointer, queue: DispatchQueue) {
        // Our own reference: a drain scheduled on the queue may run after the
        // BusConnection has closed and released the connection.
        self.raw = dbus_connection_ref(raw)
        self.queue = queue
    }

    deinit { dbus_connection_unref(raw) }

    /// Registers the watch, timeout, dispatch-status and wake-up functions. Each
    /// registration holds one retain of `self`, released by libdbus through
    /// `releaseLoop` when the registration is replaced or the connection is freed.
    func install() {
        dbus_connection_set_watch_functions(raw, addWatch, removeWatch, toggleWatch, retained(), releaseLoop)
        dbus_connection_set_timeout_functions(raw, addTimeout, removeTimeout, toggleTimeout, retained(), releaseLoop)
        dbus_connection_set_dispatch_status_function(raw, dispatchStatusChanged, retained(), releaseLoop)
        dbus_connection_set_wakeup_main_function(raw, wakeUp, retained(), releaseLoop)
        dbus_connection_add_filter(raw, filterMessage, retained(), releaseLoop)
        scheduleDrain()
    }

    /// Undoes `install` (on `queue`): disarms every source and drops libdbus's
    /// references to `self`.
    func uninstall() {
        dispatchPrecondition(condition: .onQueue(queue))
        unregister()
    }

    /// For `BusConnection.deinit` only, when no other reference to the connection
    /// exists: undoes `install` and closes the connection, from any thread.
    func uninstallFromAnyThread() {
        unregister()
        dbus_connection_close(raw)
    }

    private func unregister() {
        dbus_connection_set_watch_functions(raw, nil, nil, nil, nil, nil)
        dbus_connection_set_timeout_functions(raw, nil, nil, nil, nil, nil)
        dbus_connection_set_dispatch_status_function(raw, nil, nil, nil)
        dbus_connection_set_wakeup_main_function(raw, nil, nil, nil)
        dbus_connection_remove_filter(raw, filterMessage, Unmanaged.passUnretained(self).toOpaque())
    }

    private func retained() -> UnsafeMutableRawPointer { Unmanaged.passRetained(self).toOpaque() }

    /// Dispatches later on the queue; never from inside a libdbus callback.
    func scheduleDrain() {
        if drainScheduled { return }
        drainScheduled = true
        queue.async { [self] in
            drainScheduled = false
            drain()
        }
    }

    func drain() {
        while dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS {}
    }

    // MARK: Watches

    func arm(_ w: WatchHandle) {
        w.disarm()
        guard dbus_watch_get_enabled(w.watch) != 0 else { return }
        let fd = dbus_watch_get_unix_fd(w.watch)
        guard fd >= 0 else { return }
        let flags = dbus_watch_get_flags(w.watch)
        // libdispatch on Linux must not release a never-resumed source: each
        // source is resumed at once and later cancelled, never suspended.
        if flags & DBUS_WATCH_READABLE.rawValue != 0 {
            let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            s.setEventHandler { [weak self, weak w] in
                guard let self, let w else { return }
                dbus_watch_handle(w.watch, DBUS_WATCH_READABLE.rawValue)
                self.drain()
            }
            s.resume()
            w.sources.append(s)
        }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 {
            let s = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            s.setEventHandler { [weak self, weak w] in
                guard let self, let w else { return }
                dbus_watch_handle(w.watch, DBUS_WATCH_WRITABLE.rawValue)
                self.drain()
            }
            s.resume()
            w.sources.append(s)
        }
    }

    // MARK: Timeouts

    func arm(_ t: TimeoutHandle) {
        t.disarm()
        guard dbus_timeout_get_enabled(t.timeout) != 0 else { return }
        let interval = max(1, Int(dbus_timeout_get_interval(t.timeout)))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        // libdbus timeouts repeat until removed or disabled.
        timer.schedule(deadline: .now() + .milliseconds(interval), repeating: .milliseconds(interval))
        timer.setEventHandler { [weak self, weak t] in
            guard let self, let t else { return }
            dbus_timeout_handle(t.timeout)
            self.drain()
        }
        timer.resume()
        t.timer = timer
    }
}

/// Our state for one `DBusWatch`, stored as the watch's data.
final class WatchHandle {
    let watch: OpaquePointer
    var sources: [DispatchSourceProtocol] = []
    init(watch: OpaquePointer) { self.watch = watch }
    func disarm() {
        for s in sources { s.cancel() }
        sources.removeAll()
    }
}

/// Our state for one `DBusTimeout`, stored as the timeout's data.
final class TimeoutHandle {
    let timeout: OpaquePointer
    var timer: DispatchSourceTimer?
    init(timeout: OpaquePointer) { self.timeout = timeout }
    func disarm() {
        timer?.cancel()
        timer = nil
    }
}

// MARK: - C callbacks (they capture nothing; context comes through `data`)

private func loop(_ data: UnsafeMutableRawPointer?) -> MainLoop {
    Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue()
}

private let releaseLoop: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
    guard let data else { return }
    Unmanaged<MainLoop>.fromOpaque(data).release()
}

private let releaseWatchHandle: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
    guard let data else { return }
    let h = Unmanaged<WatchHandle>.fromOpaque(data)
    h.takeUnretainedValue().disarm()
    h.release()
}

private let releaseTimeoutHandle: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
    guard let data else { return }
    let h = Unmanaged<TimeoutHandle>.fromOpaque(data)
    h.takeUnretainedValue().disarm()
    h.release()
}

private let addWatch: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> dbus_bool_t = { watch, data in
    guard let watch else { return 0 }
    let handle = WatchHandle(watch: watch)
    dbus_watch_set_data(watch, Unmanaged.passRetained(handle).toOpaque(), releaseWatchHandle)
    loop(data).arm(handle)
    return 1
}

private let removeWatch: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { watch, _ in
    guard let watch else { return }
    // Replacing the data runs releaseWatchHandle on the old one, which disarms it.
    dbus_watch_set_data(watch, nil, nil)
}

private let toggleWatch: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { watch, data in
    guard let watch, let p = dbus_watch_get_data(watch) else { return }
    loop(data).arm(Unmanaged<WatchHandle>.fromOpaque(p).takeUnretainedValue())
}

private let addTimeout: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> dbus_bool_t = { timeout, data in
    guard let timeout else { return 0 }
    let handle = TimeoutHandle(timeout: timeout)
    dbus_timeout_set_data(timeout, Unmanaged.passRetained(handle).toOpaque(), releaseTimeoutHandle)
    loop(data).arm(handle)
    return 1
}

private let removeTimeout: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { timeout, _ in
    guard let timeout else { return }
    dbus_timeout_set_data(timeout, nil, nil)
}

private let toggleTimeout: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { timeout, data in
    guard let timeout, let p = dbus_timeout_get_data(timeout) else { return }
    loop(data).arm(Unmanaged<TimeoutHandle>.fromOpaque(p).takeUnretainedValue())
}

private let dispatchStatusChanged: @convention(c) (OpaquePointer?, DBusDispatchStatus, UnsafeMutableRawPointer?) -> Void = { _, status, data in
    if status == DBUS_DISPATCH_DATA_REMAINS { loop(data).scheduleDrain() }
}

private let wakeUp: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
    loop(data).scheduleDrain()
}

private let filterMessage: @convention(c) (OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?) -> DBusHandlerResult = { _, message, data in
    guard let message, let connection = loop(data).connection else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    return connection.route(BusMessage(borrowing: message)) ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
}
