import Foundation

/// The XDG user directories (`xdg-user-dir DOWNLOAD`), read the way `xdg-user-dirs`
/// writes them: `XDG_DOWNLOAD_DIR="$HOME/Downloads"` in `$XDG_CONFIG_HOME/user-dirs.dirs`.
public enum XDGUserDirectories {
    /// The download directory for this user, created if missing. Falls back to
    /// `~/Downloads` when `user-dirs.dirs` is missing or does not name one.
    public static func downloadDirectory(environment: [String: String] = ProcessInfo.processInfo.environment,
                                         fileManager: FileManager = .default) -> String {
        let home = homeDirectory(environment: environment)
        var configHome = environment["XDG_CONFIG_HOME"] ?? ""
        if !configHome.hasPrefix("/") { configHome = home + "/.config" }
        let file = configHome + "/user-dirs.dirs"
        var directory = home + "/Downloads"
        if let text = try? String(contentsOfFile: file, encoding: .utf8),
           let parsed = parseDownloadDirectory(userDirs: text, home: home) {
            directory = parsed
        }
        if !fileManager.fileExists(atPath: directory) {
            // Best effort: when it cannot be created, Download reports the missing
            // directory with InvalidDestination. Its parent is synced, so that the
            // folder, and the downloads finished into it, survive a power cut.
            try? DurableFiles.createFolder(directory, mode: 0o777)
        }
        return directory
    }

    /// `XDG_DOWNLOAD_DIR` from the contents of a `user-dirs.dirs` file, with `$HOME`
    /// expanded; nil when absent or not of the two allowed forms (`"$HOME/…"`, `"/…"`).
    public static func parseDownloadDirectory(userDirs text: String, home: String) -> String? {
        var result: String?
        for rawLine in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            guard !line.hasPrefix("#"), let eq = line.firstIndex(of: "=") else { continue }
            guard line[..<eq].trimmingCharacters(in: .whitespaces) == "XDG_DOWNLOAD_DIR" else { continue }
            var value = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                value = String(value.dropFirst().dropLast())
            }
            value = unescape(value)
            if value == "$HOME" || value.hasPrefix("$HOME/") {
                value = home + value.dropFirst("$HOME".count)
            } else if !value.hasPrefix("/") {
                continue
            }
            while value.count > 1 && value.hasSuffix("/") { value.removeLast() }
            result = value  // the last assignment wins, as in a shell
        }
        return result
    }

    static func homeDirectory(environment: [String: String]) -> String {
        if let home = environment["HOME"], home.hasPrefix("/") { return home }
        return NSHomeDirectory()
    }

    /// Shell-style backslash escapes inside the double quotes.
    private static func unescape(_ s: String) -> String {
        var out = ""
        var escaped = false
        for c in s {
            if escaped { out.append(c); escaped = false } else if c == "\\" { escaped = true } else { out.append(c) }
        }
        return out
    }
}
