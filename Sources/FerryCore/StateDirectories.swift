import Foundation

/// ferryd's own folders under `$XDG_STATE_HOME/ferry` (cookie jars, partial files of
/// descriptor downloads). Their paths are worked out once — the environment of a
/// running daemon does not change — and a folder is made (0700) when needed; after
/// that, checking that it is still there is one mkdir(2) call, not a walk through
/// FileManager for every transfer. The state database lives in `root` too.
public enum StateDirectories {
    /// `$XDG_STATE_HOME/ferry`, else `$HOME/.local/state/ferry`. A relative
    /// `XDG_STATE_HOME` is ignored, as the XDG base directory spec says.
    public static func root(in environment: [String: String]) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return (state.hasSuffix("/") ? state : state + "/") + "ferry"
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/ferry"
    }

    /// `root(in:)` of this process's environment.
    public static let root = root(in: ProcessInfo.processInfo.environment)

    static let cookies = root + "/cookies"
    static let descriptorDownloads = root + "/fd-downloads"
    static let descriptorDownloadsPrefix = descriptorDownloads + "/"

    /// Makes `path` (and what is missing above it) if it is not there.
    /// - Throws: FileManager's error when it cannot be made, or when something other
    ///   than a folder has the name.
    /// A folder it makes has its parent synced (`DurableFiles.createFolder`), so that
    /// its name, and the files synced into it, survive a power cut.
    static func make(_ path: String) throws {
        if mkdir(path, 0o700) == 0 {
            DurableFiles.syncFolder(containing: path)
            return
        }
        if errno == EEXIST {
            var st = stat()
            if stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR { return }
        }
        try DurableFiles.createFolder(path)
    }
}
