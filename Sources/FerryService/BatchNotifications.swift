import DBus
import FerryCore
import Foundation
import Logging

/// The desktop notification of a batch: collects what each transfer ended with
/// (from the core's events), posts one notification when the manager's
/// `AllFinished` fires, and carries out its actions.
///
/// Honours `Manager.NotificationsEnabled` and each session's `notify`. The notifier
/// never blocks: a missing or hung notification server cannot hold up the core.
///
/// `@unchecked Sendable`: the mutable fields are only touched on the core's queue
/// (core events arrive there; the action handler hops there).
final class BatchNotifications: @unchecked Sendable {
    let core: TransferCoordinator
    let bus: BusConnection
    let notifier: Notifier
    let logger: Logger
    let home: String

    private var current = BatchSummary()
    private var lastBatch: UInt64 = 0
    /// The batch whose notification is on screen (its actions refer to it).
    private var posted: (batch: UInt64, summary: BatchSummary)?

    init(core: TransferCoordinator, bus: BusConnection, notifier: Notifier, logger: Logger,
         home: String = ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()) {
        self.core = core
        self.bus = bus
        self.notifier = notifier
        self.logger = logger
        self.home = home
        notifier.setActionHandler { [weak self] batch, key, token in
            guard let self else { return }
            self.core.queue.async { self.perform(key, batch: batch, activationToken: token) }
        }
    }

    /// On the core's queue: a transfer reached its final state.
    func transferCompleted(_ completion: TransferCompletion) {
        guard completion.notify else { return }
        current.add(completion.transfer)
    }

    /// On the core's queue: the manager's AllFinished.
    func allFinished(_ end: BatchEnd) {
        let summary = current
        current = BatchSummary()
        guard !summary.isEmpty else { return }
        guard end.notificationsEnabled else {
            logger.debug("batch finished; NotificationsEnabled is false, so no notification")
            return
        }
        lastBatch += 1
        posted = (lastBatch, summary)
        notifier.post(summary.notification(batch: lastBatch, home: home))
    }

    // MARK: Actions (on the core's queue)

    private func perform(_ key: String, batch: UInt64, activationToken: String) {
        guard let posted, posted.batch == batch else {
            logger.info("ignoring action '\(key)' of an earlier notification")
            return
        }
        switch key {
        case "default", "show":
            showFiles(posted.summary, activationToken: activationToken)
        case "retry":
            var retried = 0
            for f in posted.summary.failed where core.transfer(f.id)?.state == .failed {
                do {
                    try core.resume(f.id)
                    retried += 1
                } catch {
                    logger.warning("could not retry transfer \(f.id): \(error)")
                }
            }
            logger.info("retrying \(retried) failed transfer(s) from the notification")
        default:
            logger.warning("unknown notification action '\(key)'")
        }
    }

    /// Asks the file manager to show the files (`org.freedesktop.FileManager1.ShowItems`);
    /// without one, opens their folder with `xdg-open`.
    private func showFiles(_ summary: BatchSummary, activationToken: String) {
        let paths = summary.finished.map(\.path).filter { FileManager.default.fileExists(atPath: $0) }
        guard !paths.isEmpty, let folder = summary.folders.first else {
            logger.info("the downloaded files are no longer there; nothing to show")
            return
        }
        let uris = paths.map { URL(fileURLWithPath: $0).absoluteString }
        let logger = self.logger
        do {
            let call = try BusMessage.methodCall(destination: "org.freedesktop.FileManager1", path: "/org/freedesktop/FileManager1",
                                                 interface: "org.freedesktop.FileManager1", member: "ShowItems")
            try call.append([.array(element: "s", uris.map { .string($0) }), .string(activationToken)])
            bus.send(call) { result in
                if case .failure(let error) = result {
                    logger.info("no file manager answered ShowItems (\(error.name)); opening the folder with xdg-open")
                    Self.xdgOpen(folder, logger: logger)
                }
            }
        } catch {
            Self.xdgOpen(folder, logger: logger)
        }
    }

    private static func xdgOpen(_ folder: String, logger: Logger) {
        DispatchQueue(label: "org.ferry.xdg-open").async {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = ["xdg-open", folder]
            p.standardInput = FileHandle.nullDevice
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            do {
                try p.run()
                p.waitUntilExit()
            } catch {
                logger.warning("could not run xdg-open '\(folder)': \(error)")
            }
        }
    }
}
