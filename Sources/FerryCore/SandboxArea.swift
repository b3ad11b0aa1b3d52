import Foundation

/// The files a sandboxed application may have Ferry read or write by path: those in
/// its own app directory, `~/.var/app/APPID/` (what Flatpak gives every app). A path
/// counts as inside only when it is absolute, has no `..`, and its real location —
/// every symbolic link resolved, the file's own included when it exists — is inside
/// the real location of that directory. Anything else must come as a file descriptor.
public struct SandboxArea: Sendable, Equatable {
    public let appID: String
    /// `~/.var/app/APPID` for a Flatpak; `~/snap/NAME` for a snap (`snap:NAME`).
    public let root: String

    public init(appID: String, home: String = SandboxArea.home) {
        self.appID = appID
        if appID.hasPrefix("snap:") {
            self.root = FileSystemChecks.join(home, "snap/\(appID.dropFirst(5))")
        } else {
            self.root = FileSystemChecks.join(home, ".var/app/\(appID)")
        }
    }

    /// ferryd's (the user's) home directory.
    public static var home: String { ProcessInfo.processInfo.environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory() }

    /// nil when `path` is inside the area, else the refusal (`role` names it: "destination").
    public func refusal(_ path: String, role: String) -> CoreError? {
        guard contains(path) else {
            return .invalidDestination("a sandboxed application may name only files inside its own directory '\(root)/' "
                + "(the \(role) '\(path)' is not; pass a file descriptor instead)")
        }
        return nil
    }

    /// Whether `path` resolves to a place inside the area.
    public func contains(_ path: String) -> Bool {
        guard path.hasPrefix("/"), !path.split(separator: "/").contains(where: { $0 == ".." }),
              let realRoot = Self.realPath(root) else { return false }
        // The deepest part of the path that exists, resolved; what follows it does not
        // exist yet, so holds no link.
        var existing = path
        while Self.lexists(existing) == false {
            let parent = FileSystemChecks.directoryName(existing)
            if parent == existing { return false }
            existing = parent
        }
        guard let real = Self.realPath(existing) else { return false }
        return real == realRoot || real.hasPrefix(realRoot + "/")
    }

    /// Whether an already resolved path (no links left in it) is inside the area.
    public func containsResolved(_ real: String) -> Bool {
        guard let realRoot = Self.realPath(root) else { return false }
        return real == realRoot || real.hasPrefix(realRoot + "/")
    }

    /// Opens the folder of `path` (following links) and keeps it only if its real path,
    /// read back from the descriptor, is inside the area: what is then done relative to
    /// it (`openat`, `unlinkat` with the returned name) stays inside, whatever is swapped
    /// on the way afterwards. nil when it is not inside or cannot be opened. The caller
    /// closes the descriptor.
    public func openFolder(of path: String) -> (folder: Int32, name: String)? {
        let name = FileSystemChecks.baseName(path)
        guard !name.isEmpty, name != ".", name != ".." else { return nil }
        let folder = open(FileSystemChecks.directoryName(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { return nil }
        guard holds(folder) else {
            close(folder)
            return nil
        }
        return (folder, name)
    }

    /// Where to open, create or remove `path`: for a confined caller (`area`), its folder
    /// as opened and checked (`openFolder`) and its last name; else the path itself, from
    /// the working directory (`AT_FDCWD`). nil when the folder is not inside the area.
    /// The caller gives `folder` back with `release`.
    public static func place(of path: String, within area: SandboxArea?) -> (folder: Int32, name: String)? {
        guard let area else { return (AT_FDCWD, path) }
        return area.openFolder(of: path)
    }

    /// Closes a folder `place(of:within:)` opened (`AT_FDCWD` is not open: nothing to do).
    public static func release(_ folder: Int32) {
        if folder != AT_FDCWD { close(folder) }
    }

    /// Removes `path` (never through a link, never outside the area: relative to its
    /// folder as opened and checked). True when it is gone or was not there.
    public func removeIfPresent(_ path: String) -> Bool {
        guard let (folder, name) = openFolder(of: path) else { return false }
        defer { close(folder) }
        return unlinkat(folder, name, 0) == 0 || errno == ENOENT
    }

    /// Whether the open file or folder `fd` really is inside the area (its path read
    /// back from `/proc/self/fd`).
    public func holds(_ fd: Int32) -> Bool {
        guard let real = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)") else { return false }
        return containsResolved(real)
    }

    private static func lexists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
