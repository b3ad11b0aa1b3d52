import Foundation

extension TransferCoordinator {
    /// Why the finished `.part` may not be moved to its final path, if anything: it is
    /// no longer the plain file the engine wrote (never move a symbolic link, or
    /// anything else planted under that name, into place), or — for a sandboxed
    /// application's session — the final path no longer lies inside the application's
    /// own directory (a folder on the way was swapped for a link since the download
    /// was queued).
    func finishingRefusal(_ t: TransferRecord) -> CoreError? {
        if let problem = PlainFileCheck.problem(t.partPath) { return .disk(problem) }
        if let owner = sessions[t.session]?.owner, !isDescriptorDownload(t) {
            let area = SandboxArea(appID: owner)
            if !area.contains(t.destination) || !area.contains(t.partPath) {
                return .disk("'\(t.destination)' is no longer inside the application's directory '\(area.root)/'; the download was not moved there")
            }
        }
        return nil
    }
}

/// Whether a path holds a plain regular file, without following a link.
enum PlainFileCheck {
    /// nil when `path` is a regular file (not followed if it is a link), else why not.
    static func problem(_ path: String) -> String? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return "the partial file '\(path)' is gone (\(String(cString: strerror(errno))))" }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return nil
        case S_IFLNK: return "the partial file '\(path)' was replaced by a symbolic link; it was not followed"
        default: return "the partial file '\(path)' was replaced by something that is not a plain file"
        }
    }
}
