/// Turns a name from the network (a URL's last path component, a Content-Disposition
/// filename) into a safe single file name in the download directory.
enum FileNameSanitizer {
    /// Used when nothing usable is left.
    static let fallbackName = "download"
    /// Leaves room for " (NNN)" and ".part" within the usual 255-byte limit.
    static let maxBytes = 200

    /// nil when nothing usable is left. Keeps only the part after the last `/` or `\`
    /// (no directory traversal), drops control characters and NUL, strips leading dots
    /// (no hidden files, no `.` or `..`) and surrounding spaces, and shortens long names
    /// keeping the extension.
    static func sanitize(_ raw: String) -> String? {
        let lastComponent = raw.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
        var name = String(String.UnicodeScalarView(lastComponent.unicodeScalars.filter {
            !($0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "\u{202E}" || $0 == "\u{202D}")
        }))
        name = name.trimmingSpaces()
        while name.hasPrefix(".") { name.removeFirst(); name = name.trimmingSpaces() }
        // Trailing dots and spaces are invisible in file managers; drop them too.
        while let last = name.last, last == "." || last == " " { name.removeLast() }
        guard !name.isEmpty else { return nil }
        return shorten(name)
    }

    static func shorten(_ name: String) -> String {
        guard name.utf8.count > maxBytes else { return name }
        let (base, ext) = UniqueFileName.split(name)
        let keepExt = ext.utf8.count <= 20 ? ext : ""
        var shortBase = ""
        for c in base {
            if shortBase.utf8.count + String(c).utf8.count + keepExt.utf8.count > maxBytes { break }
            shortBase.append(c)
        }
        return shortBase + keepExt
    }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}
