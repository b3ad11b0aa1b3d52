import Foundation

extension TransferCoordinator {
    /// For a sandboxed application's download: moves the verified `.part` to its final
    /// name relative to the destination folder *as opened and checked* (its real path,
    /// read back from the open descriptor, must be inside the app's directory), so a
    /// folder on the way swapped for a link between the check and the move cannot put
    /// the file anywhere else. The rules are those of `moveIntoPlace`: `overwrite`
    /// replaces in one rename, otherwise an existing name is kept and a unique one
    /// chosen. nil for other sessions' downloads.
    func moveIntoSandboxArea(_ t: TransferRecord, digest: String?) throws -> String? {
        guard let owner = sessions[t.session]?.owner else { return nil }
        let area = SandboxArea(appID: owner)
        let directory = FileSystemChecks.directoryName(t.destination)
        guard FileSystemChecks.directoryName(t.partPath) == directory else { return nil }
        let folder = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { throw Self.finishFailure("opening '\(directory)'", errno) }
        defer { close(folder) }
        // The new name survives a power cut once the folder (as opened) is synced.
        func synced(_ target: String) -> String {
            DurableFiles.syncFolder(fd: folder, path: directory)
            return target
        }
        guard area.holds(folder) else {
            throw CoreError.disk("'\(directory)' is no longer inside the application's directory '\(area.root)/'; the download was not moved there")
        }
        let part = FileSystemChecks.baseName(t.partPath)
        var st = stat()
        guard fstatat(folder, part, &st, AT_SYMLINK_NOFOLLOW) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            throw CoreError.disk("the partial file '\(t.partPath)' is no longer a plain file in '\(directory)'")
        }
        OriginURLAttribute.set(folder: folder, name: part, url: t.snapshot.url)
        PartFileMark.remove(folder: folder, file: part)
        if t.options.overwrite {
            recordFinishing(t, target: t.destination, digest: digest)
            guard renameat(folder, part, folder, FileSystemChecks.baseName(t.destination)) == 0 else {
                throw Self.finishFailure("moving it to '\(t.destination)'", errno)
            }
            return synced(t.destination)
        }
        var target = t.destination
        for _ in 0..<8 {
            let name = FileSystemChecks.baseName(target)
            recordFinishing(t, target: target, digest: digest)
            if linkat(folder, part, folder, name, 0) == 0 {
                _ = unlinkat(folder, part, 0)
                return synced(target)
            }
            let code = errno
            var there = stat()
            if code == EEXIST || fstatat(folder, name, &there, AT_SYMLINK_NOFOLLOW) == 0 {
                target = resolver(except: t.id).uniquePath(directory: directory, name: FileSystemChecks.baseName(t.destination),
                                                           overwrite: false)
                continue
            }
            // No hard links on this file system: a rename after the check above.
            guard renameat(folder, part, folder, name) == 0 else { throw Self.finishFailure("moving it to '\(target)'", errno) }
            return synced(target)
        }
        throw CoreError.disk("no free file name in '\(directory)'")
    }

    private static func finishFailure(_ action: String, _ code: Int32) -> NSError {
        NSError(domain: "ferry", code: Int(code), userInfo: [NSLocalizedDescriptionKey: "\(String(cString: strerror(code))) while \(action)"])
    }
}
