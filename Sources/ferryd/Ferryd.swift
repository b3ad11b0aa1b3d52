import ArgumentParser
import DBus
import Dispatch
import FerryCore
import FerryEngine
import FerryService
import Foundation
import Logging

/// The transfer daemon: serves org.ferry.Ferry1 on the session bus.
@main
struct Ferryd: ParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "ferryd",
        abstract: "Ferry's background transfer service on the D-Bus session bus (org.ferry.Ferry1).",
        version: version)

    @Option(name: .long, help: "Connect to this bus address instead of the session bus.")
    var address: String?

    @Flag(name: .long, help: "Log every bus call and transfer event.")
    var verbose = false

    func run() throws {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = verbose ? .debug : .info
            return h
        }
        let logger = Logger(label: "ferryd")

        let bus: BusConnection
        do {
            bus = try address.map { try BusConnection(address: $0) } ?? BusConnection.session()
        } catch {
            logger.critical("cannot connect to the session bus: \(error). Is DBUS_SESSION_BUS_ADDRESS set?")
            throw ExitCode(1)
        }

        let environment = CoreEnvironment(version: Ferryd.version)
        let engine = CurlEngine()
        let core = TransferCoordinator(engine: engine, environment: environment)
        let service = FerryBusService(bus: bus, core: core, version: Ferryd.version,
                                      defaultDirectory: environment.defaultDownloadDirectory(), logger: logger)
        core.queue.sync { core.start() }

        let lifetime = Lifetime(core: core, engine: engine, logger: logger)
        lifetime.installSignalHandlers()
        bus.onDisconnect {
            logger.notice("the bus connection closed; exiting")
            lifetime.shutDown(code: 0)
        }

        Task {
            do {
                try await service.start()
            } catch {
                logger.critical("\(error)")
                lifetime.shutDown(code: 1)
            }
        }
        dispatchMain()
    }
}

/// Clean shutdown: stop the engine (running transfers keep their `.part` files),
/// then exit.
final class Lifetime: @unchecked Sendable {
    // Immutable after init; `sources` is written once, before any signal can arrive.
    let core: TransferCoordinator
    let engine: TransferEngine
    let logger: Logger
    private var sources: [DispatchSourceSignal] = []

    init(core: TransferCoordinator, engine: TransferEngine, logger: Logger) {
        self.core = core
        self.engine = engine
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
            core.shutdown()
            engine.shutdown()
            exit(code)
        }
    }
}
