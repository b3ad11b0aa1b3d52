import DBus
import Dispatch
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Holds a logind `delay` inhibitor for sleep while transfers run: the system may
/// still suspend, but logind waits (up to its `InhibitDelayMaxSec`) so that running
/// transfers reach a resumable point first.
///
/// `setActive(true)` takes the inhibitor (`org.freedesktop.login1.Manager.Inhibit
/// ("sleep", who, why, "delay")`, which returns a file descriptor: the inhibitor lasts
/// as long as that descriptor is open); `setActive(false)` closes the descriptor,
/// which releases it. Without a system bus or without logind it logs once and
/// carries on.
///
/// When logind announces the sleep (`PrepareForSleep(true)`) the inhibitor is let go
/// at once, so the system does not wait out logind's `InhibitDelayMaxSec`: ferryd
/// needs no time of its own (it is frozen with its state; what was written is in the
/// `.part` files, and the transfers start over from there after the wake-up, their
/// connections most likely dead: `onWake`). After the wake-up (`PrepareForSleep(false)`)
/// it is taken again if transfers still run.
///
/// It has its own system-bus connection (opened at the first need) on its own queue
/// and never blocks a caller.
///
/// `@unchecked Sendable`: the mutable state is confined to `queue`.
public final class SleepInhibitor: @unchecked Sendable {
    public static let busName = "org.freedesktop.login1"
    public static let path = "/org/freedesktop/login1"
    public static let interface = "org.freedesktop.login1.Manager"

    private let queue = DispatchQueue(label: "ferry.inhibitor")
    private let busQueue = DispatchQueue(label: "ferry.inhibitor.bus")
    private let connect: @Sendable (DispatchQueue) throws -> BusConnection
    private let logger: Logger
    private let who: String
    private let why: String

    private var bus: BusConnection?
    /// Whether an inhibitor is wanted (something runs).
    private var wanted = false
    /// The inhibitor's descriptor while it is held.
    private var fd: Int32?
    private var requestInFlight = false
    /// Between PrepareForSleep(true) and PrepareForSleep(false).
    private var sleeping = false
    /// The PrepareForSleep subscription of a new connection is being set up; no
    /// inhibitor is taken before it is (one would outlive a missed announcement).
    private var subscribing = false
    private var warned = false
    private var stopped = false
    private let onWake: @Sendable () -> Void

    /// - Parameters:
    ///   - connect: opens the system bus on the queue given (tests pass an address).
    ///   - who, why: what `systemd-inhibit --list` shows.
    ///   - onWake: called (on the inhibitor's queue) when logind says the system woke
    ///     up from a sleep it announced; logind is followed once something has run.
    public init(logger: Logger = Logger(label: "ferry.inhibitor"), who: String = "Ferry",
                why: String = "Downloads are in progress",
                connect: @escaping @Sendable (DispatchQueue) throws -> BusConnection = { try BusConnection.system(queue: $0) },
                onWake: @escaping @Sendable () -> Void = {}) {
        self.logger = logger
        self.who = who
        self.why = why
        self.connect = connect
        self.onWake = onWake
    }

    /// Takes (true) or releases (false) the inhibitor; returns at once.
    public func setActive(_ active: Bool) {
        queue.async { [self] in
            guard !stopped, active != wanted else { return }
            wanted = active
            if active {
                requestIfNeeded()
            } else {
                release()
            }
        }
    }

    /// Whether the inhibitor is held now (for diagnostics and tests).
    public var isHeld: Bool { queue.sync { fd != nil } }

    /// Releases the inhibitor and closes the connection. Not from the bus queue.
    public func stop() {
        let bus: BusConnection? = queue.sync {
            stopped = true
            wanted = false
            release()
            defer { self.bus = nil }
            return self.bus
        }
        bus?.close()
    }

    private func requestIfNeeded() {
        guard wanted, fd == nil, !requestInFlight, !sleeping, !subscribing else { return }
        if bus == nil {
            do {
                let b = try connect(busQueue)
                b.onDisconnect { [weak self] in
                    guard let self else { return }
                    self.queue.async { self.bus = nil }
                }
                bus = b
                subscribing = true
                Task.onQueue {
                    await self.followSleep(b)
                    self.queue.async {
                        self.subscribing = false
                        self.requestIfNeeded()
                    }
                }
            } catch {
                warnOnce("no system bus (\(error)); cannot hold off sleep while transfers run")
            }
            return
        }
        guard let bus,
              let call = try? BusMessage.methodCall(destination: Self.busName, path: Self.path,
                                                    interface: Self.interface, member: "Inhibit") else { return }
        do {
            try call.append(.string("sleep"), .string(who), .string(why), .string("delay"))
        } catch {
            logger.error("cannot build the Inhibit call: \(error)")
            return
        }
        requestInFlight = true
        bus.send(call, timeout: 10) { [weak self] result in
            // Take the descriptor out of the reply here, so that it is closed even
            // when the inhibitor is gone by the time the queue gets to it.
            let outcome = result.map { (try? $0.arguments()) ?? [] }
            guard let self else {
                if case .success(let values) = outcome { DBusValue.closeUnixFDs(in: values) }
                return
            }
            self.queue.async { self.inhibitFinished(outcome) }
        }
    }

    private func inhibitFinished(_ outcome: Result<[DBusValue], BusError>) {
        requestInFlight = false
        switch outcome {
        case .success(let values):
            guard let received = values.first?.unixFD else {
                DBusValue.closeUnixFDs(in: values)
                warnOnce("logind's Inhibit answered without a file descriptor (\(values)); cannot hold off sleep")
                return
            }
            guard wanted, !stopped, !sleeping else {
                // Nothing runs any more, or the system is going to sleep: let it go at once.
                close(received)
                logger.debug("sleep inhibitor released (\(sleeping ? "the system is going to sleep" : "nothing runs any more"))")
                return
            }
            fd = received
            warned = false
            logger.debug("sleep inhibitor taken (delay, fd \(received))")
        case .failure(let error):
            if error.name == StandardErrors.serviceUnknown || error.name == StandardErrors.nameHasNoOwner {
                warnOnce("logind is not on the system bus; cannot hold off sleep while transfers run")
            } else {
                warnOnce("logind refused the sleep inhibitor (\(error.name): \(error.message)); transfers go on without it")
            }
        }
    }

    /// Follows logind's PrepareForSleep on `bus`.
    private func followSleep(_ bus: BusConnection) async {
        do {
            _ = try await bus.subscribe(MatchRule(sender: Self.busName, path: Self.path, interface: Self.interface,
                                                  member: "PrepareForSleep")) { [weak self] m in
                guard let going = (try? m.arguments())?.first?.bool, let self else { return }
                self.queue.async { self.prepareForSleep(going) }
            }
        } catch {
            logger.debug("cannot follow logind's PrepareForSleep: \(error)")
        }
    }

    private func prepareForSleep(_ going: Bool) {
        guard !stopped, going != sleeping else { return }
        sleeping = going
        if going {
            logger.info("the system is going to sleep; transfers continue from their partial files after it wakes")
            release()
        } else {
            logger.info("the system woke up")
            onWake()
            requestIfNeeded()
        }
    }

    private func release() {
        guard let held = fd else { return }
        fd = nil
        close(held)
        logger.debug("sleep inhibitor released (fd \(held) closed)")
    }

    private func warnOnce(_ message: String) {
        guard !warned else { return }
        warned = true
        logger.notice("\(message)")
    }
}
