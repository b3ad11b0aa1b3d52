import CDBus
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// The descriptor a watch's dispatch sources are made on: a duplicate of libdbus's,
/// closed when the last reference goes — the watch's (until libdbus lets go of it) or
/// a source's cancel handler's (until it has run, that is, until libdispatch no
/// longer uses the descriptor). See `MainLoop.arm`.
final class SourceDescriptor {
    let fd: Int32
    private let owned: Bool

    /// Out of descriptors, the sources use libdbus's own (as before: correct unless a
    /// number is reused while a cancelled source still holds it).
    init(duplicating fd: Int32) {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        self.fd = copy >= 0 ? copy : fd
        self.owned = copy >= 0
    }

    deinit { if owned { close(fd) } }
}

/// Our state for one `DBusWatch`, stored as the watch's data.
final class WatchHandle {
    let watch: OpaquePointer
    /// libdbus let go of the watch (removed or freed): `watch` must not be read.
    var released = false
    /// What the sources watch; kept until libdbus lets go of the watch.
    var descriptor: SourceDescriptor?
    var readSource: DispatchSourceRead?
    var writeSource: DispatchSourceWrite?
    /// Reading rests (`MainLoop.readRest`): the read source is made again when it ends.
    var resting = false
    /// Rests so far: which one a rest's timer belongs to.
    var restCount: UInt64 = 0
    init(watch: OpaquePointer) { self.watch = watch }
    func disarm() {
        readSource?.cancel()
        writeSource?.cancel()
        readSource = nil
        writeSource = nil
    }
}

/// Our state for one `DBusTimeout`, stored as the timeout's data.
final class TimeoutHandle {
    let timeout: OpaquePointer
    /// When it is due, while armed in its loop's `TimeoutHeap`.
    var deadline: UInt64?
    /// Moves on at each disarm, so the heap's older entries for it go stale.
    var generation: UInt64 = 0
    weak var loop: MainLoop?
    /// libdbus let go of the timeout (removed or freed): `timeout` must not be read.
    var released = false
    init(timeout: OpaquePointer, loop: MainLoop) {
        self.timeout = timeout
        self.loop = loop
    }
    func disarm() { loop?.disarm(self) }
}

// MARK: - C callbacks (they capture nothing; context comes through `data`)

private func loop(_ data: UnsafeMutableRawPointer?) -> MainLoop {
    Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue()
}

/// The functions libdbus calls for a `MainLoop` (`install`).
enum MainLoopHooks {
    static let releaseLoop: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
        guard let data else { return }
        Unmanaged<MainLoop>.fromOpaque(data).release()
    }

    fileprivate static let releaseWatchHandle: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
        guard let data else { return }
        let h = Unmanaged<WatchHandle>.fromOpaque(data)
        h.takeUnretainedValue().released = true
        h.takeUnretainedValue().disarm()
        // The cancelled sources keep the duplicate until their cancel handlers have run.
        h.takeUnretainedValue().descriptor = nil
        h.release()
    }

    fileprivate static let releaseTimeoutHandle: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
        guard let data else { return }
        let h = Unmanaged<TimeoutHandle>.fromOpaque(data)
        h.takeUnretainedValue().released = true
        h.takeUnretainedValue().disarm()
        h.release()
    }

    static let addWatch: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> dbus_bool_t = { watch, data in
        guard let watch else { return 0 }
        let handle = WatchHandle(watch: watch)
        dbus_watch_set_data(watch, Unmanaged.passRetained(handle).toOpaque(), MainLoopHooks.releaseWatchHandle)
        loop(data).arm(handle)
        return 1
    }

    static let removeWatch: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { watch, _ in
        guard let watch else { return }
        // Replacing the data runs releaseWatchHandle on the old one, which disarms it.
        dbus_watch_set_data(watch, nil, nil)
    }

    static let toggleWatch: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { watch, data in
        guard let watch, let p = dbus_watch_get_data(watch) else { return }
        loop(data).arm(Unmanaged<WatchHandle>.fromOpaque(p).takeUnretainedValue())
    }

    static let addTimeout: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> dbus_bool_t = { timeout, data in
        guard let timeout else { return 0 }
        let handle = TimeoutHandle(timeout: timeout, loop: loop(data))
        dbus_timeout_set_data(timeout, Unmanaged.passRetained(handle).toOpaque(), MainLoopHooks.releaseTimeoutHandle)
        loop(data).arm(handle)
        return 1
    }

    static let removeTimeout: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { timeout, _ in
        guard let timeout else { return }
        dbus_timeout_set_data(timeout, nil, nil)
    }

    static let toggleTimeout: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void = { timeout, data in
        guard let timeout, let p = dbus_timeout_get_data(timeout) else { return }
        loop(data).arm(Unmanaged<TimeoutHandle>.fromOpaque(p).takeUnretainedValue())
    }

    static let dispatchStatusChanged: @convention(c) (OpaquePointer?, DBusDispatchStatus, UnsafeMutableRawPointer?) -> Void = { _, status, data in
        if status == DBUS_DISPATCH_DATA_REMAINS { loop(data).scheduleDrain() }
    }

    static let wakeUp: @convention(c) (UnsafeMutableRawPointer?) -> Void = { data in
        loop(data).scheduleDrain()
    }

    static let filterMessage: @convention(c) (OpaquePointer?, OpaquePointer?, UnsafeMutableRawPointer?) -> DBusHandlerResult = { _, message, data in
        guard let message, let connection = loop(data).connection else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        return connection.route(BusMessage(borrowing: message)) ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
    }
}
