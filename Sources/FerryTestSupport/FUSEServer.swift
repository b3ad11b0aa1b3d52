import Foundation

/// What the test support's FUSE file systems (`StallingMount`, `PowerCutMount`: fusepy
/// scripts run by Debian's python3) share: whether one can run here, and waiting for its
/// mount to come up.
enum FUSEServer {
    /// Why no FUSE file system can be served here, or nil when one can: Debian's python3
    /// with python3-fusepy, and a usable /dev/fuse.
    static func unavailableReason() -> String? {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), hasFusepy() else {
            return "python3-fusepy is not installed"
        }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else { return "no usable /dev/fuse" }
        return nil
    }

    private static func hasFusepy() -> Bool {
        let check = Process()
        check.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        check.arguments = ["-c", "import fusepy"]
        check.standardError = FileHandle.nullDevice
        guard (try? check.run()) != nil else { return false }
        check.waitUntilExit()
        return check.terminationStatus == 0
    }

    /// Waits (20 s at most) until `mounted()` holds for the server `process` started;
    /// returns why it did not come up, or nil. A mount refused ends the process, and its
    /// `errors` say why.
    static func waitUntilMounted(_ process: Process, errors: Pipe, _ mounted: () -> Bool) -> String? {
        let deadline = Date().addingTimeInterval(20)
        while !mounted() {
            if !process.isRunning {
                let why = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                return "FUSE cannot be mounted here: \(why.suffix(300))"
            }
            guard Date() < deadline else { return "the FUSE mount did not come up within 20 s" }
            usleep(20_000)
        }
        return nil
    }
}
