import Foundation

/// Where a download goes: checks the requested destination and picks a free name.
struct DestinationResolver {
    /// The chosen final path and how it was chosen.
    struct Resolved: Equatable {
        /// The final path (its `.part` file is beside it).
        var path: String
        /// The directory it is in.
        var directory: String
        /// The client gave a directory (or nothing): the server's Content-Disposition
        /// name may replace the URL's name.
        var serverMayName: Bool
    }

    var fileManager: FileManager = .default
    /// Whether a live transfer already owns this path (as its final path or `.part`).
    var isClaimed: (String) -> Bool
    /// Folders (normalised) found to exist and to be writable moments ago, in the same
    /// batch of preparations (`PreparedDownloads.writableDirectories`): not checked again.
    var knownWritable: Set<String> = []

    /// `requireWritableDirectory`, unless `knownWritable` holds the folder.
    private func requireWritable(_ directory: String, role: String) throws {
        if knownWritable.contains(directory) { return }
        try FileSystemChecks.requireWritableDirectory(directory, role: role)
    }

    /// - Parameters:
    ///   - requested: the `destination` option, nil when absent.
    ///   - defaultDirectory: the session's directory or the XDG download directory
    ///     (asked only when there is no `requested`: finding the XDG one reads a file).
    ///   - suggestedName: the sanitised name from the URL.
    func resolve(requested: String?, defaultDirectory: () -> String, suggestedName: String, overwrite: Bool) throws -> Resolved {
        guard let requested = requested else {
            let defaultDirectory = defaultDirectory()
            // The folder checked is the one the file goes to (a relative one is refused as it is).
            let directory = defaultDirectory.hasPrefix("/") ? FileSystemChecks.normalize(defaultDirectory) : defaultDirectory
            try requireWritable(directory, role: "download directory")
            return Resolved(path: uniquePath(directory: directory, name: suggestedName, overwrite: overwrite),
                            directory: directory, serverMayName: true)
        }
        guard requested.hasPrefix("/") else {
            throw CoreError.invalidDestination("destination '\(requested)' is a relative path; give an absolute path")
        }
        guard !requested.utf8.contains(0) else {
            throw CoreError.invalidDestination("destination \(requested.debugDescription) contains a NUL character")
        }
        let path = FileSystemChecks.normalize(requested)
        if knownWritable.contains(path) || FileSystemChecks.isDirectory(path) {
            try requireWritable(path, role: "destination directory")
            return Resolved(path: uniquePath(directory: path, name: suggestedName, overwrite: overwrite),
                            directory: path, serverMayName: true)
        }
        if requested.hasSuffix("/") || path == "/" {
            throw CoreError.invalidDestination("destination directory '\(requested)' does not exist")
        }
        let directory = FileSystemChecks.directoryName(path)
        try requireWritable(directory, role: "directory")
        let name = FileSystemChecks.baseName(path)
        return Resolved(path: uniquePath(directory: directory, name: name, overwrite: overwrite),
                        directory: directory, serverMayName: false)
    }

    /// `directory/name` unless taken, else `name (1).ext`, `name (2).ext`… A name is
    /// taken when a live transfer owns it or its `.part`, or when it or its `.part`
    /// exists on disk, except that `overwrite` lets the name asked for replace its file
    /// (never a `name (N).ext` that happens to exist: that is someone else's file).
    /// `own`, the asker's present path, is free to it (its `.part` there is its own).
    func uniquePath(directory: String, name: String, overwrite: Bool, own: String? = nil) -> String {
        let chosen = UniqueFileName.first(name) { candidate in
            let path = FileSystemChecks.join(directory, candidate)
            if path == own { return false }
            let part = path + ".part"
            if isClaimed(path) || isClaimed(part) { return true }
            if overwrite && candidate == name { return false }
            return FileSystemChecks.exists(path) || FileSystemChecks.exists(part)
        }
        return FileSystemChecks.join(directory, chosen)
    }
}
