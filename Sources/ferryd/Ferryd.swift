import ArgumentParser
import DBus
import Dispatch
import FerryCore
import FerryDesktop
import FerryEngine
import FerryInterface
import FerryService
import FerryStore
import FerrySystem
import Foundation
import Logging

/// The transfer daemon: serves org.ferry.Ferry1 on the session bus.
@main
struct Ferryd: ParsableCommand {
    static let version = FerryInterface.releaseVersion

    static let configuration = CommandConfiguration(
        commandName: "ferryd",
        abstract: "Ferry's background transfer service on the D-Bus session bus (org.ferry.Ferry1).",
        version: version)

    @Option(name: .long, help: "Connect to this bus address instead of the session bus.")
    var address: String?

    @Flag(name: .long, help: "Log every bus call and transfer event.")
    var verbose = false

    @Option(name: .long, help: ArgumentHelp("Exit after this many seconds with nothing to do (D-Bus activation starts ferryd again).", valueName: "seconds"))
    var idleTimeout: Double = 60

    @Flag(name: .long, help: "Keep running when idle (for running ferryd by hand).")
    var noIdleExit = false

    @Option(name: .long, help: ArgumentHelp("Seconds with nothing queued, waiting or running before a batch ends (the manager's AllFinished and the notification); 0 ends it at once.", valueName: "seconds"))
    var batchSettle: Double = 1

    @Option(name: .long, help: ArgumentHelp("How long to wait for another ferryd using the same state folder to exit before giving up (exit status 1).", valueName: "seconds"))
    var stateLockWait: Double = 10

    @Option(name: .long, help: ArgumentHelp("Refuse new sessions beyond this many (LimitExceeded).", valueName: "count"))
    var maxSessionsPerClient: Int = Limits.defaultSessionsPerClient

    @Option(name: .long, help: ArgumentHelp("Refuse new transfers in a session holding this many (LimitExceeded).", valueName: "count"))
    var maxTransfersPerSession: Int = Limits.defaultTransfersPerSession

    @Option(name: .long, help: ArgumentHelp("Refuse new transfers, and resuming failed ones, in a session whose completion events not acknowledged, with those its transfers may still add, reach this many (LimitExceeded).", valueName: "count"))
    var maxPendingEventsPerSession: Int = Limits.defaultPendingEventsPerSession

    func validate() throws {
        guard idleTimeout.isFinite, idleTimeout > 0 else {
            throw ValidationError("--idle-timeout must be a positive number of seconds")
        }
        guard stateLockWait.isFinite, (0...3600).contains(stateLockWait) else {
            throw ValidationError("--state-lock-wait must be between 0 and 3600 seconds")
        }
        guard batchSettle.isFinite, (0...3600).contains(batchSettle) else {
            throw ValidationError("--batch-settle must be between 0 and 3600 seconds")
        }
        guard maxSessionsPerClient > 0, maxTransfersPerSession > 0, maxPendingEventsPerSession > 0 else {
            throw ValidationError("--max-sessions-per-client, --max-transfers-per-session and --max-pending-events-per-session must be positive")
        }
    }

    static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    func run() throws {
        // glibc gives each thread that meets contention an arena of its own (up to 8 per
        // core), and memory freed in one arena serves no other: restoring ten thousand
        // transfers on the core's queue and exporting them on the bus's left about
        // 12 MiB stranded that way. One arena serves ferryd's few busy threads (each keeps its own small cache in front of it).
        _ = mallopt(mallocArenaMax, 1)
        // A client's pipe (`destination-fd`) whose reader has gone must fail that one
        // copy with EPIPE, not end the daemon (libdbus and libcurl already write to
        // their sockets without the signal; this covers every other descriptor).
        signal(SIGPIPE, SIG_IGN)
        // Each queued upload holds its file open, and every running transfer its sockets
        // and files: the soft open-file limit (often 1,024) goes up to the hard one, as
        // far as the system lets a process go by itself (the core sizes its upload budget
        // from what this leaves).
        Ferryd.raiseOpenFileLimit()
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = verbose ? .debug : .info
            return h
        }
        let logger = Logger(label: "ferryd")
        // libnotify finds the bus through the environment: the same bus as ours.
        if let address { setenv("DBUS_SESSION_BUS_ADDRESS", address, 1) }

        let bus: BusConnection
        do {
            bus = try address.map { try BusConnection(address: $0) } ?? BusConnection.session()
        } catch {
            logger.critical("cannot connect to the session bus: \(error). Is DBUS_SESSION_BUS_ADDRESS set?")
            throw ExitCode(1)
        }

        // Testing knob: the power-cut tests sync part files often, to cut between syncs.
        if let text = ProcessInfo.processInfo.environment["FERRY_PART_SYNC_MS"], let ms = UInt64(text) {
            CurlEngine.setPartSyncInterval(milliseconds: ms)
        }
        let engine = CurlEngine(desktopProxies: Ferryd.desktopProxies(bus: bus, logger: logger))
        guard StateLock.acquire(in: StateDatabase.directory(), timeout: stateLockWait, logger: logger) else {
            throw ExitCode(1)
        }
        // Under the state lock, so two daemons starting at once never make two keys.
        let seal = ResumeDataSeal.persistent(in: StateDatabase.directory(), logger: logger)
        let zone = Ferryd.timeZone(logger: logger)
        var environment = CoreEnvironment(version: Ferryd.version, retryPolicy: Ferryd.retryPolicy(logger: logger),
                                          batchSettleTime: batchSettle, resumeDataSeal: seal,
                                          pendingEventsPerSession: maxPendingEventsPerSession,
                                          timeZone: zone.map { z in { z } } ?? { TimeZone.current })
        // A burst of small downloads finishing is stored in one write every 5 ms, not one
        // or two per engine round (`CommitHold`); what a client sees waits at most that.
        environment.commitWindow = 0.005
        if let reads = environment.metalinkReader as? MetalinkReadQueue, reads.reader == nil {
            logger.warning("\(MetalinkReadQueue.readerName) is neither beside ferryd nor in ../libexec/ferry: downloads with the metalink option will fail (InvalidMetalink)")
        }
        let boot = MachineBoot.currentID()
        environment.machineRestarted = MachineBoot.changed(since: StateDatabase.directory(), current: boot)
        if environment.machineRestarted {
            logger.info("the machine restarted since the last run: part files are trusted only as far as they were synced")
        }
        let store = try Ferryd.openStore(logger: logger)
        let core = TransferCoordinator(engine: engine, environment: environment, store: store)
        // NetworkManager and logind (system bus); the network state is known before start().
        let system = SystemIntegration.start(core: core, logger: logger)
        // Restored before the service exports objects, so every session and transfer
        // comes back under its old object path before the bus name is taken. Started
        // (restored transfers carry on) only once the name is ours: their first
        // signals reach the bus, and a second ferryd that cannot have the name starts
        // nothing.
        core.queue.sync {
            do {
                try core.restore()
                MachineBoot.record(boot, in: StateDatabase.directory(), logger: logger)
            } catch {
                logger.error("could not restore the saved sessions and transfers: \(error); starting without them")
            }
        }
        let notifier = DesktopNotifier(logger: Logger(label: "ferry.notify"))
        let service = FerryBusService(bus: bus, core: core, version: Ferryd.version,
                                      defaultDirectory: environment.defaultDownloadDirectory(),
                                      notifier: notifier, logger: logger)
        if let text = ProcessInfo.processInfo.environment["FERRY_PENDING_PAGE_BYTES"], let bytes = Int(text), bytes > 0 {
            service.pendingEventsPageBytes = bytes // a testing knob: pages of a few events
        }
        service.limits = ClientLimits(sessionsPerClient: maxSessionsPerClient, transfersPerSession: maxTransfersPerSession)

        let lifetime = Lifetime(core: core, notifier: notifier, logger: logger)
        let idleExit = noIdleExit ? nil : IdleExit(timeout: idleTimeout, core: core, bus: bus, notifier: notifier,
                                                    lifetime: lifetime, logger: logger)
        lifetime.installSignalHandlers()
        bus.onDisconnect {
            // Not a clean exit: the service is gone from the bus. A failure status lets
            // systemd restart it (and activation starts it on the next call anyway).
            logger.critical("lost the connection to the bus; exiting with status 1")
            lifetime.shutDown(code: 1)
        }

        Task.onQueue {
            do {
                try await service.start()
                core.queue.async { core.start() }
                system.followRunningTransfers()
                idleExit?.start()
                // Restoring and exporting every transfer leaves freed heap behind (the
                // store's rows, the first copies): give it back to the system.
                bus.perform { _ = malloc_trim(0) }
            } catch {
                logger.critical("\(error)")
                lifetime.shutDown(code: 1)
            }
        }
        dispatchMain()
    }
}

extension Ferryd {
    /// The state database, or (logged loudly) memory only when it cannot be had: the
    /// daemon still serves, but nothing survives its restart.
    static func openStore(logger: Logger) throws -> TransferStore {
        let directory = StateDatabase.directory()
        do {
            let store = try StateDatabase.open(directory: directory, logger: logger)
            logger.info("state database: \(store.path)")
            return store
        } catch let busy as StateDatabaseBusy {
            // Only when the folder's lock could not guard it: what this daemon would
            // acknowledge could not be kept, so it does not start.
            logger.critical("\(busy); not starting")
            throw ExitCode(1)
        } catch {
            logger.error("\(error). Running without a state database: transfers and events will be lost when ferryd stops.")
            return InMemoryTransferStore()
        }
    }

    /// The time zone of the schedule's windows: nil for `TZ` (a zone name), else the
    /// system's. Testing knob: `FERRY_UTC_OFFSET_SECONDS` fixes a
    /// zone that many seconds east of UTC, so a test can put a window's edge a few
    /// seconds ahead (windows are whole minutes).
    static func timeZone(logger: Logger) -> TimeZone? {
        guard let text = ProcessInfo.processInfo.environment["FERRY_UTC_OFFSET_SECONDS"], !text.isEmpty else { return nil }
        guard let seconds = Int(text), let zone = TimeZone(secondsFromGMT: seconds) else {
            logger.warning("ignoring FERRY_UTC_OFFSET_SECONDS='\(text)': not a whole number of seconds within 18 hours")
            return nil
        }
        logger.notice("the schedule's local time is UTC\(seconds >= 0 ? "+" : "")\(seconds) s (FERRY_UTC_OFFSET_SECONDS)")
        return zone
    }

    /// Where a request without a proxy of its session's finds one: ferryd's environment
    /// when it names one (libcurl reads it itself: `EnvironmentProxy`), else the
    /// desktop's settings through the portal (`PortalProxyResolver`) on ferryd's own bus.
    static func desktopProxies(bus: BusConnection, logger: Logger) -> DesktopProxyLookup? {
        if let name = EnvironmentProxy.named() {
            logger.info("proxy: from the environment (\(name)); the desktop's proxy settings are not asked")
            return nil
        }
        if EnvironmentProxy.noProxy() == "*" {
            logger.info("proxy: none (no_proxy=*); the desktop's proxy settings are not asked")
            return nil
        }
        return PortalProxyResolver(bus: bus)
    }

    /// Exponential backoff with jitter from 2 s. Testing knob: `FERRY_RETRY_BASE_MS`
    /// sets the first wait in milliseconds (integration tests make it tiny).
    static func retryPolicy(logger: Logger) -> RetryPolicy {
        guard let text = ProcessInfo.processInfo.environment["FERRY_RETRY_BASE_MS"], !text.isEmpty else {
            return .standard()
        }
        guard let ms = Double(text), ms.isFinite, ms >= 0 else {
            logger.warning("ignoring FERRY_RETRY_BASE_MS='\(text)': not a number of milliseconds")
            return .standard()
        }
        logger.notice("retry backoff starts at \(ms) ms (FERRY_RETRY_BASE_MS)")
        return .standard(base: ms / 1000)
    }
}

/// Clean shutdown: the core stops, and with it the engine (running transfers keep
/// their `.part` files), then exit.
final class Lifetime: @unchecked Sendable {
    // Immutable after init; `sources` is written once, before any signal can arrive.
    let core: TransferCoordinator
    let notifier: Notifier?
    let logger: Logger
    private var sources: [DispatchSourceSignal] = []

    init(core: TransferCoordinator, notifier: Notifier? = nil, logger: Logger) {
        self.core = core
        self.notifier = notifier
        self.logger = logger
    }

    func installSignalHandlers() {
        for sig in [SIGTERM, SIGINT] {
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .main)
            s.setEventHandler { [self] in
                logger.notice("signal \(sig): stopping")
                shutDown(code: 0)
            }
            s.resume()
            sources.append(s)
        }
    }

    func shutDown(code: Int32) {
        core.queue.async { [self] in
            core.shutdown() // shuts the engine down too
            // A notification whose buttons nobody would answer any more goes too.
            notifier?.close(timeout: 2)
            exit(code)
        }
    }
}

/// glibc's `malloc_trim` (malloc.h is not in Swift's Glibc module): returns freed heap
/// pages to the system.
@_silgen_name("malloc_trim")
private func malloc_trim(_ pad: Int) -> Int32

/// glibc's `mallopt` and its `M_ARENA_MAX` (malloc.h, not in Swift's Glibc module).
@_silgen_name("mallopt")
private func mallopt(_ parameter: Int32, _ value: Int32) -> Int32
private let mallocArenaMax: Int32 = -8
