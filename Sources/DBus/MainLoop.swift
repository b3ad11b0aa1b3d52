import CDBus
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

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
        dbus_connection_set_watch_functions(raw, MainLoopHooks.addWatch, MainLoopHooks.removeWatch, MainLoopHooks.toggleWatch, retained(), MainLoopHooks.releaseLoop)
        dbus_connection_set_timeout_functions(raw, MainLoopHooks.addTimeout, MainLoopHooks.removeTimeout, MainLoopHooks.toggleTimeout, retained(), MainLoopHooks.releaseLoop)
        dbus_connection_set_dispatch_status_function(raw, MainLoopHooks.dispatchStatusChanged, retained(), MainLoopHooks.releaseLoop)
        dbus_connection_set_wakeup_main_function(raw, MainLoopHooks.wakeUp, retained(), MainLoopHooks.releaseLoop)
        dbus_connection_add_filter(raw, MainLoopHooks.filterMessage, retained(), MainLoopHooks.releaseLoop)
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
        cancelTimer()
        dbus_connection_set_dispatch_status_function(raw, nil, nil, nil)
        dbus_connection_set_wakeup_main_function(raw, nil, nil, nil)
        dbus_connection_remove_filter(raw, MainLoopHooks.filterMessage, Unmanaged.passUnretained(self).toOpaque())
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

    /// Makes the watch's dispatch sources as libdbus wants them now.
    ///
    /// The sources watch a duplicate of libdbus's descriptor (`SourceDescriptor`),
    /// never libdbus's own: libdbus closes its descriptor as soon as it lets go of
    /// the watch (a close, a lost connection), while a cancelled dispatch source lets
    /// go of its descriptor later, on its queue. A descriptor number closed before
    /// libdispatch let go of it stays tied, inside libdispatch, to the old source
    /// (seen: when events were coming in at the close), and the next socket to get
    /// that number (the app's next connection) never hears it is readable: its
    /// replies wait unread until the call times out. The duplicate is closed only
    /// after the last source on it was cancelled, so its number is never reused early.
    func arm(_ w: WatchHandle) {
        w.disarm()
        guard !w.released, dbus_watch_get_enabled(w.watch) != 0 else { return }
        let fd = dbus_watch_get_unix_fd(w.watch)
        guard fd >= 0 else { return }
        // A watch's descriptor never changes: one duplicate serves all its sources.
        let descriptor = w.descriptor ?? SourceDescriptor(duplicating: fd)
        w.descriptor = descriptor
        let flags = dbus_watch_get_flags(w.watch)
        // libdispatch on Linux must not release a never-resumed source: each
        // source is resumed at once and later cancelled, never suspended.
        if flags & DBUS_WATCH_READABLE.rawValue != 0, !w.resting {
            let s = DispatchSource.makeReadSource(fileDescriptor: descriptor.fd, queue: queue)
            s.setEventHandler { [weak self, weak w] in
                guard let self, let w, !w.released else { return }
                self.read(w, fd: fd)
            }
            s.setCancelHandler { withExtendedLifetime(descriptor) {} }
            s.resume()
            w.readSource = s
        }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 {
            let s = DispatchSource.makeWriteSource(fileDescriptor: descriptor.fd, queue: queue)
            s.setEventHandler { [weak self, weak w] in
                guard let self, let w, !w.released else { return }
                dbus_watch_handle(w.watch, DBUS_WATCH_WRITABLE.rawValue)
                self.drain()
            }
            s.setCancelHandler { withExtendedLifetime(descriptor) {} }
            s.resume()
            w.writeSource = s
        }
    }

    /// Nanoseconds to wait after handling what one read brought before reading
    /// again (`BusConnection.restBetweenReads`); 0: read as soon as data comes.
    private(set) var readRest: UInt64 = 0
    /// Watches in a rest now, so that setting the rest to 0 ends theirs at once.
    private var restingWatches: [WatchHandle] = []

    /// Sets `readRest`; at 0 a rest under way ends now: what waits is read.
    func setReadRest(_ nanoseconds: UInt64) {
        readRest = nanoseconds
        guard nanoseconds == 0 else { return }
        let ending = restingWatches
        restingWatches = []
        for w in ending { endRest(w) }
    }

    /// Most reads of libdbus's (up to about 4 KiB each) in one wake-up, about 1 MiB;
    /// then what was read is dispatched and the source fires again.
    static let readsPerWakeUp = 256
    /// Reading on in one wake-up is for large messages coming in: at least this much
    /// waiting in the socket.
    static let readOnAbove: Int32 = 16 * 1024

    /// libdbus reads at most about 4 KiB per `dbus_watch_handle`. Left at that, a
    /// reply of several MiB (`GetManagedObjects` of 10,000 transfers) costs one trip
    /// through libdispatch's event loop per 4 KiB (its manager thread woken, a worker
    /// woken, the source re-armed): thousands of thread wake-ups. So while a large
    /// message is coming in (more than `readOnAbove` waiting), this reads on, up to
    /// `readsPerWakeUp`, and stops as soon as libdbus lets go of the watch or turns
    /// it off (its queue of received messages is full). Small messages are
    /// dispatched as they come, as before: reading a burst of small calls ahead of
    /// handling them made ferryd's batch benchmark no faster (about 10 % more CPU).
    /// With a rest between reads (`readRest`), all that waits is read (up to
    /// `readsPerWakeUp`) before resting: it came during the last rest.
    func read(_ w: WatchHandle, fd: Int32) {
        let readOnAbove = readRest > 0 ? 0 : Self.readOnAbove
        var waitingAtStart: Int32 = 0
        if readRest > 0, ioctl(fd, UInt(FIONREAD), &waitingAtStart) != 0 { waitingAtStart = 0 }
        for _ in 0..<Self.readsPerWakeUp {
            dbus_watch_handle(w.watch, DBUS_WATCH_READABLE.rawValue)
            guard !w.released, dbus_watch_get_enabled(w.watch) != 0 else { break }
            var waiting: Int32 = 0
            guard ioctl(fd, UInt(FIONREAD), &waiting) == 0, waiting > readOnAbove else { break }
        }
        drain()
        if readRest > 0, waitingAtStart < Self.restBelow { rest(w) }
    }

    /// A read that found this much waiting is followed by the next without a rest.
    /// The socket holds only so much (some 35 KB of small signals; dbus-daemon keeps
    /// the rest for us and writes it, about 10 KB at a time, as room is made), so a
    /// rest after each read would let one socketful through per rest, and a stream
    /// faster than that would fall behind. A read that finds this much is a batch
    /// already; reading on until one finds less keeps up with any stream.
    static let restBelow: Int32 = 8 * 1024

    /// Stops reading for `readRest`: what comes meanwhile waits in the socket and is
    /// read in one go. The read source is cancelled (never suspended, see `arm`);
    /// when the rest ends, `arm` makes the watch's sources as libdbus wants them then
    /// (it may have turned reading off, or let go of the watch, meanwhile).
    private func rest(_ w: WatchHandle) {
        guard !w.released, let source = w.readSource else { return }
        source.cancel()
        w.readSource = nil
        w.resting = true
        w.restCount &+= 1
        let thisRest = w.restCount
        restingWatches.append(w)
        let watch = ObjectIdentifier(w) // the watch is queue-confined: found again there, not captured
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(readRest))) { [weak self] in
            // Only the rest it was set for: one ended early (`setReadRest(0)`) must not
            // cut short a later one (nor one no longer in `restingWatches`).
            guard let self, let w = self.restingWatches.first(where: { ObjectIdentifier($0) == watch }),
                  w.resting, w.restCount == thisRest else { return }
            self.restingWatches.removeAll { $0 === w }
            self.endRest(w)
        }
    }

    private func endRest(_ w: WatchHandle) {
        guard w.resting else { return }
        w.resting = false
        if !w.released { arm(w) }
    }

    // MARK: Timeouts

    /// libdbus gives every pending call a timeout (25 s by default), so a client that
    /// pipelines a thousand calls has a thousand of them, nearly all removed long
    /// before they are due. They share one timer, armed at the earliest deadline in
    /// `timeouts`: adding a later one or removing one costs no timer change (a dispatch
    /// source made and cancelled per call woke libdispatch's manager thread twice).
    private var timeouts = TimeoutHeap()
    private var timer: DispatchSourceTimer?
    /// When `timer` fires, if armed.
    private var timerDeadline: UInt64?

    func arm(_ t: TimeoutHandle) {
        disarm(t)
        guard dbus_timeout_get_enabled(t.timeout) != 0 else { return }
        schedule(t, after: UInt64(max(1, dbus_timeout_get_interval(t.timeout))) * 1_000_000)
    }

    func disarm(_ t: TimeoutHandle) {
        guard t.deadline != nil else { return }
        t.deadline = nil
        t.generation &+= 1
        timeouts.live -= 1
        if timeouts.live == 0 {
            // Nothing left to wait for: no wake-up at a stale deadline.
            timeouts.removeAll()
            setTimer(nil)
        } else {
            timeouts.compactIfMostlyStale()
        }
    }

    private func schedule(_ t: TimeoutHandle, after nanoseconds: UInt64) {
        let deadline = DispatchTime.now().uptimeNanoseconds &+ nanoseconds
        t.deadline = deadline
        timeouts.live += 1
        timeouts.push(TimeoutHeap.Entry(deadline: deadline, generation: t.generation, handle: t))
        armTimer(noLaterThan: deadline)
    }

    private func armTimer(noLaterThan deadline: UInt64) {
        if timerDeadline.map({ deadline < $0 }) ?? true { setTimer(deadline) }
    }

    private func setTimer(_ deadline: UInt64?) {
        timerDeadline = deadline
        guard let deadline else {
            timer?.schedule(deadline: .distantFuture, repeating: .never)
            return
        }
        if timer == nil {
            let source = DispatchSource.makeTimerSource(queue: queue)
            source.setEventHandler { [weak self] in self?.timerFired() }
            source.resume()
            timer = source
        }
        timer?.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), repeating: .never)
    }

    /// Handles the timeouts that are due (libdbus's repeat until removed or disabled),
    /// then arms the timer for the next.
    private func timerFired() {
        timerDeadline = nil
        let now = DispatchTime.now().uptimeNanoseconds
        while let entry = timeouts.popCurrent(dueBy: now) {
            let t = entry.handle
            // Due: taken off, then armed again for its next interval unless libdbus
            // removed, re-armed or disabled it meanwhile.
            disarm(t)
            dbus_timeout_handle(t.timeout)
            if !t.released, t.deadline == nil { arm(t) }
        }
        if let next = timeouts.nextDeadline() {
            armTimer(noLaterThan: next)
        } else {
            setTimer(nil)
        }
        drain()
    }

    func cancelTimer() {
        timer?.cancel()
        timer = nil
    }
}
