import ArgumentParser
import Foundation

// What `get` (and `upload`) read from their arguments and files: paths made absolute,
// directories made, URL lists and checksum files, start times and piece lists.

/// Makes the directory (and its parents) as `wget -P` and `aria2c -d` do; a path
/// that is a file, or that cannot be made, is a clear error.
func makeDirectory(_ path: String) throws -> String {
    var isDir: ObjCBool = false
    if FileManager.default.fileExists(atPath: path, isDirectory: &isDir) {
        guard isDir.boolValue else { throw CLIError.refused("\(path) exists and is not a directory") }
        return path
    }
    // Folder by folder with mkdir(2), so that a failure says why in the system's words
    // ("Permission denied", "Not a directory"), as `mkdir -p` does.
    var prefix = path.hasPrefix("/") ? "" : "."
    for name in path.split(separator: "/") {
        prefix += "/" + name
        if mkdir(prefix, 0o777) == 0 { continue }
        let code = errno
        var st = stat()
        if code == EEXIST, stat(prefix, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR { continue }
        let reason = String(cString: strerror(code == EEXIST ? ENOTDIR : code))
        throw CLIError.refused("cannot make the directory \(path): \(reason) (at \(prefix))")
    }
    return path
}

func absolutePath(_ path: String) -> String {
    var p = path
    if p == "~" || p.hasPrefix("~/") {
        // As the shell does: $HOME, else the account's home folder.
        if let home = ProcessInfo.processInfo.environment["HOME"], home.hasPrefix("/") {
            p = home + p.dropFirst()
        } else {
            p = NSString(string: p).expandingTildeInPath
        }
    }
    if !p.hasPrefix("/") { p = FileManager.default.currentDirectoryPath + "/" + p }
    var standard = URL(fileURLWithPath: p).standardizedFileURL.path
    while standard.count > 1 && standard.hasSuffix("/") { standard.removeLast() }
    return standard
}

/// URL lists (`-i`) and checksum files (`--sha256-file`).
enum Checksums {
    struct Entry {
        var url: String
        var sha256: String?
    }

    static func isHex(_ s: String) -> Bool { s.count == 64 && s.allSatisfy(\.isHexDigit) }

    static func read(_ path: String) throws -> String {
        if path == "-" {
            return String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        }
        // Any readable file: a pipe, a FIFO or `<(…)` too, read to its end.
        let fd = open(absolutePath(path), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CLIError.usage("cannot read \(path): \(String(cString: strerror(errno)))") }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var st = stat()
        if fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR {
            throw CLIError.usage("cannot read \(path): \(String(cString: strerror(EISDIR)))")
        }
        do {
            guard let d = try handle.readToEnd() else { return "" }
            return String(decoding: d, as: UTF8.self)
        } catch {
            var e = error as NSError
            if let underlying = e.userInfo[NSUnderlyingErrorKey] as? NSError { e = underlying }
            let reason = e.domain == NSPOSIXErrorDomain ? String(cString: strerror(Int32(e.code))) : e.localizedDescription
            throw CLIError.usage("cannot read \(path): \(reason)")
        }
    }

    /// One URL a line, optionally with its SHA-256 before or after it; blank
    /// lines and `#` comments are skipped.
    static func readList(_ path: String) throws -> [Entry] {
        var out: [Entry] = []
        // Split on any line end: in Swift "\r\n" is one Character, which "\n" is not.
        for (n, raw) in try read(path).split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            switch words.count {
            case 1: out.append(Entry(url: words[0]))
            case 2 where isHex(words[1]): out.append(Entry(url: words[0], sha256: words[1]))
            case 2 where isHex(words[0]): out.append(Entry(url: words[1], sha256: words[0]))
            default:
                throw CLIError.usage("\(path) line \(n + 1): expected a URL, optionally with a SHA-256 (64 hex digits)")
            }
        }
        return out
    }

    /// Gives each entry the SHA-256 that `sha256sum` lists for its file name.
    static func apply(sumsFile: String, to entries: inout [Entry], output: String?) throws {
        var sums: [String: String] = [:]
        for raw in try read(sumsFile).split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            guard line.count > 66, !line.hasPrefix("#") else { continue }
            let hex = String(line.prefix(64))
            guard isHex(hex) else { continue }
            var name = line.dropFirst(64).drop(while: { $0 == " " })
            if name.hasPrefix("*") { name = name.dropFirst() }
            sums[(String(name) as NSString).lastPathComponent] = hex
        }
        for i in entries.indices where entries[i].sha256 == nil {
            let name = fileName(entries[i].url)
            guard let sum = sums[name] ?? output.flatMap({ sums[($0 as NSString).lastPathComponent] }) else {
                throw CLIError.usage("\(sumsFile) has no SHA-256 for '\(name)' (\(entries[i].url))")
            }
            entries[i].sha256 = sum
        }
    }

    static func fileName(_ url: String) -> String {
        guard let u = URL(string: url) else { return "" }
        return u.lastPathComponent.removingPercentEncoding ?? u.lastPathComponent
    }
}

/// `--start-after` times, in the contract's microseconds since the epoch.
enum StartTime {
    static func parse(_ text: String, now: Date = Date()) -> UInt64? {
        func micro(_ d: Date) -> UInt64? {
            // Up to the end of the year 9999: further is a slip of the keyboard (and +1e400
            // is infinite, @1e30 past what microseconds in 64 bits hold).
            let seconds = d.timeIntervalSince1970
            guard seconds.isFinite, seconds > 0, seconds < 253_402_300_800 else { return nil }
            return UInt64(seconds * 1_000_000)
        }
        if text.hasPrefix("+") {
            var s = text.dropFirst()
            var unit = 1.0
            if let last = s.last, let u = ["s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0][last] {
                unit = u
                s = s.dropLast()
            }
            guard let v = Double(s), v >= 0 else { return nil }
            return micro(now.addingTimeInterval(v * unit))
        }
        if text.hasPrefix("@"), let v = Double(text.dropFirst()), v >= 0 { return micro(Date(timeIntervalSince1970: v)) }
        let parts = text.split(separator: ":")
        if (2...3).contains(parts.count), !text.contains("T"), let h = Int(parts[0]), let m = Int(parts[1]),
           (0..<24).contains(h), (0..<60).contains(m) {
            let s = parts.count == 3 ? Int(parts[2]) ?? -1 : 0
            guard (0..<60).contains(s) else { return nil }
            var c = Calendar.current.dateComponents([.year, .month, .day], from: now)
            c.hour = h
            c.minute = m
            c.second = s
            guard var d = Calendar.current.date(from: c) else { return nil }
            if d <= now { d = d.addingTimeInterval(86400) }
            return micro(d)
        }
        let iso = ISO8601DateFormatter()
        if let d = iso.date(from: text) { return micro(d) }
        iso.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withDashSeparatorInDate]
        iso.timeZone = .current
        if let d = iso.date(from: text) { return micro(d) }
        return nil
    }
}

/// `--pieces LEN:HEX,HEX,...` or `LEN:@FILE` (one SHA-256 a line; blank lines and
/// `#` comments skipped). The daemon checks the values (`InvalidArgument`).
enum PieceArgument {
    static func split(_ text: String) -> (UInt64, String)? {
        let halves = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2, let length = UInt64(halves[0]), !halves[1].isEmpty else { return nil }
        return (length, String(halves[1]))
    }

    static func digests(_ list: String) throws -> [String] {
        guard list.hasPrefix("@") else { return list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() } }
        let path = String(list.dropFirst())
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("--pieces: cannot read '\(path)'")
        }
        guard data.count <= 8 * 1024 * 1024 else { throw ValidationError("--pieces: '\(path)' is over 8 MiB") }
        return String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
            .map { $0.lowercased() }
    }
}
