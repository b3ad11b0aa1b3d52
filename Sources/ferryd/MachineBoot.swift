import FerryCore
import Foundation
import Logging

/// Which boot of the machine the state directory's part files were written in. A
/// daemon killed and started again runs in the same boot: the page cache kept every
/// byte its part files were given. After a power cut or a kernel crash the boot is a
/// new one, and a part file may hold holes (zeros) under its length where its last
/// writes were lost: `CoreEnvironment.machineRestarted` then makes the core trust only
/// what was synced.
enum MachineBoot {
    /// The file in the state directory that names the boot of the last daemon.
    static let fileName = "boot-id"

    /// The kernel's id of this boot (`/proc/sys/kernel/random/boot_id`). The
    /// environment variable `FERRY_BOOT_ID` stands in for it: the power-cut tests play
    /// a restart of the machine with it.
    static func currentID() -> String? {
        if let id = ProcessInfo.processInfo.environment["FERRY_BOOT_ID"], !id.isEmpty { return id }
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }

    /// Whether the boot named in `directory` is not this one. Unknown (no file, as on
    /// the first start, or no boot id): false.
    static func changed(since directory: String, current: String?) -> Bool {
        guard let current,
              let recorded = try? String(contentsOfFile: directory + "/" + fileName, encoding: .utf8) else { return false }
        return recorded.trimmingCharacters(in: .whitespacesAndNewlines) != current
    }

    /// Names this boot in `directory`, durably, once the core has stored what it made
    /// of the restart (the next daemon of this boot trusts the part files again).
    static func record(_ current: String?, in directory: String, logger: Logger) {
        guard let current else { return }
        do {
            try DurableFiles.write(Array((current + "\n").utf8), to: directory + "/" + fileName)
        } catch {
            logger.warning("could not record the machine's boot id in \(directory): \(error)")
        }
    }
}
