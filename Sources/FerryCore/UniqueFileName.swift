/// `name (1).ext`, `name (2).ext`… for a name that is taken.
enum UniqueFileName {
    /// Extensions kept whole when numbering (`backup (1).tar.gz`, not `backup.tar (1).gz`).
    static let compoundExtensions = [".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar.lz", ".tar.Z"]

    /// The first of `name`, `base (1)ext`, `base (2)ext`… for which `isTaken` is false.
    static func first(_ name: String, isTaken: (String) -> Bool) -> String {
        if !isTaken(name) { return name }
        let (base, ext) = split(name)
        var n = 1
        while true {
            let candidate = "\(base) (\(n))\(ext)"
            if !isTaken(candidate) { return candidate }
            n += 1
        }
    }

    /// Splits off the extension: the last `.suffix`, or a known compound one. A leading
    /// dot is not an extension (`.bashrc`).
    static func split(_ name: String) -> (base: String, ext: String) {
        let lower = name.lowercased()
        for compound in compoundExtensions where lower.hasSuffix(compound.lowercased()) && name.count > compound.count {
            return (String(name.dropLast(compound.count)), String(name.suffix(compound.count)))
        }
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        let ext = name[dot...]
        // "v1.2 notes" has no extension; extensions hold no spaces and are short.
        if ext.count > 16 || ext.contains(" ") { return (name, "") }
        return (String(name[..<dot]), String(ext))
    }
}
