import Crypto
import Foundation

/// The mark on the partial files a ferryd creates: the extended attribute
/// `user.ferry.part`, whose value names ferryd's state folder. At a restart a `.part`
/// no transfer owns (a power cut brought back one whose unlink had not reached the disk,
/// or ferryd was killed with an ephemeral session's downloads under way) is removed
/// only when it carries this ferryd's mark: a browser's `NAME.part`, another ferryd's,
/// or one that resume data handed to a client (the mark is taken off then) is never
/// touched. Where the file system keeps no user attributes nothing is marked, and so
/// nothing is removed.
public enum PartFileMark {
    public static let name = "user.ferry.part"

    /// A digest of the state folder: a ferryd of another user or home never matches.
    public static let value: String = {
        SHA256.hash(data: Data(StateDirectories.root.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }()

    /// Marks the new partial file open at `fd` (best effort).
    public static func set(fd: Int32) {
        guard let fsetxattr else { return }
        _ = value.utf8CString.withUnsafeBufferPointer { fsetxattr(fd, name, $0.baseAddress, $0.count - 1, 0) }
    }

    /// Whether the file at `path` (a link is not followed) carries this ferryd's mark.
    public static func isMarked(_ path: String) -> Bool {
        guard let lgetxattr else { return false }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = buffer.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, $0.count) }
        return n > 0 && String(decoding: buffer[0..<n], as: UTF8.self) == value
    }

    /// Takes the mark off (the file is the client's now, or becomes a finished download).
    static func remove(_ path: String) {
        guard let lremovexattr else { return }
        _ = lremovexattr(path, name)
    }

    /// The same for `file` in the open `folder` (not following a link).
    static func remove(folder: Int32, file: String) {
        guard let fremovexattr else { return }
        let fd = openat(folder, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        _ = fremovexattr(fd, name)
    }

    // glibc's calls, which Swift's Glibc module does not declare.
    private typealias FSetXattr = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    private static let fsetxattr: FSetXattr? = dlsym(nil, "fsetxattr").map { unsafeBitCast($0, to: FSetXattr.self) }
    private typealias LGetXattr = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private static let lgetxattr: LGetXattr? = dlsym(nil, "lgetxattr").map { unsafeBitCast($0, to: LGetXattr.self) }
    private typealias LRemoveXattr = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>) -> Int32
    private static let lremovexattr: LRemoveXattr? = dlsym(nil, "lremovexattr").map { unsafeBitCast($0, to: LRemoveXattr.self) }
    private typealias FRemoveXattr = @convention(c) (Int32, UnsafePointer<CChar>) -> Int32
    private static let fremovexattr: FRemoveXattr? = dlsym(nil, "fremovexattr").map { unsafeBitCast($0, to: FRemoveXattr.self) }
}
