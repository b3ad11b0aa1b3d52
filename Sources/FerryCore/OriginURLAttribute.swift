import Foundation

/// The `user.xdg.origin.url` extended attribute that browsers put on downloads (the
/// freedesktop "Common Extended Attributes"): where a file came from.
public enum OriginURLAttribute {
    public static let name = "user.xdg.origin.url"

    /// Foundation's key for a file's extended attributes (`[String: Data]`), which it
    /// reads and writes with getxattr/setxattr.
    static let extendedAttributes = FileAttributeKey("NSFileExtendedAttributes")

    /// Sets it on `path`, without any user name or password the URL carries. Best
    /// effort: file systems without user attributes (ENOTSUP: some FUSE and network
    /// mounts) are skipped quietly, and so is a symbolic link (it is not followed). One
    /// lsetxattr(2), not FileManager's attribute dictionaries: this runs for every
    /// finished download.
    /// - Returns: whether the attribute was written.
    @discardableResult
    public static func set(path: String, url: String) -> Bool {
        guard let lsetxattr else { return false }
        var value = withoutCredentials(url)
        return value.withUTF8 { bytes in lsetxattr(path, name, bytes.baseAddress, bytes.count, 0) == 0 }
    }

    /// The same for the file `name` in the open `folder` (a sandboxed application's:
    /// opened without following a link, so the attribute lands on that very file).
    @discardableResult
    public static func set(folder: Int32, name: String, url: String) -> Bool {
        guard let fsetxattr else { return false }
        let fd = openat(folder, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var value = withoutCredentials(url)
        return value.withUTF8 { bytes in fsetxattr(fd, Self.name, bytes.baseAddress, bytes.count, 0) == 0 }
    }

    private typealias FSetXattr = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    /// glibc's `fsetxattr(2)`, which Swift's Glibc module does not declare.
    private static let fsetxattr: FSetXattr? = dlsym(nil, "fsetxattr").map { unsafeBitCast($0, to: FSetXattr.self) }

    private typealias SetXattr = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    /// glibc's `lsetxattr(2)`, which Swift's Glibc module does not declare.
    private static let lsetxattr: SetXattr? = dlsym(nil, "lsetxattr").map { unsafeBitCast($0, to: SetXattr.self) }

    /// The attribute's value, nil when absent or unsupported.
    public static func get(path: String, fileManager: FileManager = .default) -> String? {
        guard let attributes = try? fileManager.attributesOfItem(atPath: path),
              let xattrs = attributes[extendedAttributes] as? [String: Data],
              let value = xattrs[name] else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    /// `url` with its `user:password@` part removed.
    static func withoutCredentials(_ url: String) -> String { Redaction.urlWithoutCredentials(url) }
}
