import Foundation

/// Whether reading a file may wait on another process or a network: a FUSE file system
/// (a document portal, sshfs, any user-space server) or a network one. Such a file is
/// read off the engine's network thread; a file on a local disk file system is read
/// in place, as libcurl would.
enum SourceFileSystem {
    /// Local file systems whose reads the kernel answers itself.
    static let local: Set<String> = [
        "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "ramfs", "vfat", "msdos", "exfat",
        "ntfs3", "jfs", "reiserfs", "nilfs2", "bcachefs", "zfs", "iso9660", "udf", "squashfs", "erofs",
        "overlay", "hfsplus",
    ]

    /// True unless the device is found in this process's mount table with a local
    /// type (an unknown device counts as one that may stall). Reads /proc only: no
    /// request reaches the file's own file system.
    static func readsMayStall(device: UInt64) -> Bool {
        guard device != 0, let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return true }
        // glibc's major() and minor() (macros Swift does not import).
        let major = ((device & 0x0000_0000_000f_ff00) >> 8) | ((device & 0xffff_f000_0000_0000) >> 32)
        let minor = (device & 0xff) | ((device & 0x0000_0fff_fff0_0000) >> 12)
        let wanted = "\(major):\(minor)"
        for line in table.split(separator: "\n") {
            // "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [TAGS…] - TYPE SOURCE SUPER"
            let fields = line.split(separator: " ", maxSplits: 3)
            guard fields.count > 2, fields[2] == wanted, let dash = line.range(of: " - ") else { continue }
            let type = line[dash.upperBound...].split(separator: " ", maxSplits: 1).first.map(String.init) ?? ""
            return !local.contains(type)
        }
        return true
    }
}
