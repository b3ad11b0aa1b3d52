import Foundation

/// Free space: checked before a download starts (when its size is known from an
/// earlier response) and when a response announces the size, unless the engine has
/// reserved the file's space then (`EngineResponse.spaceReserved`: it checked the fit
/// itself, and the free space no longer counts those bytes). A download that cannot fit
/// fails with `Disk` at once, keeping its partial file: `Resume` continues from it once
/// space is free. Where the engine cannot reserve (some FUSE and network file systems),
/// a concurrent writer can still fill the disk; the engine then reports a `Disk`
/// failure, handled the same way.
extension TransferCoordinator {
    /// The reason `t` may not start now, if any: its resource-timeout ran out, or its
    /// remaining bytes do not fit on the disk.
    func startBlocker(_ t: TransferRecord) -> CoreError? {
        if let deadline = resourceDeadline(t), deadline <= environment.now() {
            return resourceTimeoutError(t)
        }
        if t.isUpload { return uploadSourceRefusal(t) }
        let expected = t.snapshot.bytesExpected
        guard expected > 0 else { return nil }
        // Blocks still reserved past the part file's end (ferryd was killed mid-download)
        // are its own: the rest of the file needs that much less.
        let part = FileSystemChecks.sizeAndReservedPastEnd(t.partPath, within: confinement(of: t))
        return spaceShortage(t, bytesToWrite: expected - (part?.size ?? 0) - (part?.reservedPastEnd ?? 0))
    }

    /// `.disk` when fewer than `bytesToWrite` bytes are free beside the partial file.
    func spaceShortage(_ t: TransferRecord, bytesToWrite: Int64) -> CoreError? {
        guard bytesToWrite > 0 else { return nil }
        let directory = FileSystemChecks.directoryName(t.partPath)
        guard let free = environment.freeSpace(directory), free < bytesToWrite else { return nil }
        return .disk("Not enough free space in \(directory) for '\(FileSystemChecks.baseName(t.destination))': "
            + "\(ByteCount.describe(bytesToWrite)) more are needed, \(ByteCount.describe(max(free, 0))) are free. "
            + "Free some space, then resume the transfer")
    }
}

/// Byte counts for messages people read (the desktop notification, disk errors).
public enum ByteCount {
    /// In IEC units (powers of 1024), as the `ferry` CLI counts: "10 bytes",
    /// "9.8 KiB", "64.0 MiB" (one convention for the notification, the CLI and messages).
    public static func describe(_ bytes: Int64) -> String {
        if bytes < 1024 { return bytes == 1 ? "1 byte" : "\(bytes) bytes" }
        var value = Double(bytes) / 1024
        for unit in ["KiB", "MiB", "GiB", "TiB"] {
            // 1023.95 would print as "1024.0": carry it to the next unit instead.
            if value < 1023.95 { return String(format: "%.1f", value) + " " + unit }
            value /= 1024
        }
        return String(format: "%.1f", value) + " PiB"
    }
}

