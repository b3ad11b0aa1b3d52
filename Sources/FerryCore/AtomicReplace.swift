import Foundation

/// Puts a finished file in place of an existing one in one step. `rename(2)` replaces
/// the target atomically, so at every moment the final name holds either the old file
/// or the new one, and a crash at any point leaves no hidden copy of the old file
/// behind (the old way moved it aside first; a `kill -9` between the two moves left
/// `.NAME.ferry-replaced-XXXXXXXX` forever). A symbolic link at the target is itself
/// replaced, never followed.
enum AtomicReplace {
    static func replace(_ target: String, with source: String) throws {
        guard rename(source, target) != 0 else { return }
        let code = errno
        throw CoreError.disk("could not move '\(source)' to '\(target)': \(String(cString: strerror(code)))")
    }

    enum NoReplaceOutcome { case moved, targetExists, unsupported }

    /// Moves `source` to `target` in one step unless something is at `target`
    /// (`renameat2` with `RENAME_NOREPLACE`): one directory operation where a hard link
    /// and an unlink take two. `.unsupported` when the kernel or the file system cannot
    /// (the caller then falls back to link-then-unlink).
    static func moveNoReplace(_ source: String, to target: String) throws -> NoReplaceOutcome {
        try moveNoReplace((AT_FDCWD, source), to: (AT_FDCWD, target))
    }

    /// `moveNoReplace` for names relative to open folders (`AT_FDCWD` for the working
    /// directory).
    static func moveNoReplace(_ source: Place, to target: Place) throws -> NoReplaceOutcome {
        guard let renameat2 = renameat2 else { return .unsupported }
        guard renameat2(source.folder, source.name, target.folder, target.name, renameNoReplace) != 0 else { return .moved }
        let code = errno
        switch code {
        case EEXIST: return .targetExists
        case EINVAL, ENOSYS, EOPNOTSUPP: return .unsupported
        default:
            throw failure(source.name, target.name, code)
        }
    }

    /// The same for file systems without `RENAME_NOREPLACE`: a hard link at `target`
    /// (which never replaces anything), then `source` unlinked. `.unsupported` where
    /// there are no hard links either (FAT: the caller then renames after a check).
    static func moveByLink(_ source: String, to target: String) throws -> NoReplaceOutcome {
        try moveByLink((AT_FDCWD, source), to: (AT_FDCWD, target))
    }

    /// `moveByLink` for names relative to open folders.
    static func moveByLink(_ source: Place, to target: Place) throws -> NoReplaceOutcome {
        if linkat(source.folder, source.name, target.folder, target.name, 0) == 0 {
            _ = unlinkat(source.folder, source.name, 0)
            return .moved
        }
        let code = errno
        switch code {
        case EEXIST: return .targetExists
        case EPERM, EOPNOTSUPP, ENOSYS, EMLINK: return .unsupported
        default:
            throw failure(source.name, target.name, code)
        }
    }

    /// Moves `source` to `target` without ever replacing what is there, by whichever of
    /// the ways above the file system allows; where it has neither (FAT), a rename once
    /// nothing is found at `target`.
    static func move(_ source: Place, to target: Place) throws -> NoReplaceOutcome {
        var outcome = try moveNoReplace(source, to: target)
        if outcome == .unsupported { outcome = try moveByLink(source, to: target) }
        guard outcome == .unsupported else { return outcome }
        var st = stat()
        if fstatat(target.folder, target.name, &st, AT_SYMLINK_NOFOLLOW) == 0 { return .targetExists }
        guard renameat(source.folder, source.name, target.folder, target.name) == 0 else {
            throw failure(source.name, target.name, errno)
        }
        return .moved
    }

    /// A name relative to an open folder.
    typealias Place = (folder: Int32, name: String)

    private static func failure(_ source: String, _ target: String, _ code: Int32) -> CoreError {
        .disk("could not move '\(source)' to '\(target)': \(String(cString: strerror(code)))")
    }

    private typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
    private static let renameNoReplace: UInt32 = 1 // RENAME_NOREPLACE in <linux/fs.h>
    /// glibc has had `renameat2` since 2.28, but Swift's Glibc module does not declare it.
    private static let renameat2: RenameAt2? = dlsym(nil, "renameat2").map { unsafeBitCast($0, to: RenameAt2.self) }
}
