/// Snap applications, confined by AppArmor: the bus daemon tells a connection's
/// security label (`GetConnectionCredentials`' `LinuxSecurityLabel`), and a snap's
/// processes run under a profile named `snap.NAME.APP` (or `snap.NAME.hook.HOOK`),
/// followed by the mode, e.g. `snap.firefox.firefox (enforce)`. Such a caller is
/// sandboxed as the application `snap:NAME` (a colon, which no Flatpak id has), whose
/// files are under `~/snap/NAME` (`SandboxArea`). Any other label (`unconfined`, a
/// plain program's profile such as `/usr/bin/evince (enforce)`) changes nothing.
enum SnapLabel {
    /// The longest label read (the kernel's are far shorter).
    static let maximumLength = 4096

    /// `snap:NAME` for a snap's label, nil for any other; `label` as the bus daemon
    /// sends it (bytes, maybe ending in NUL).
    static func appID(fromLabel label: [UInt8]) -> String? {
        guard label.count <= maximumLength else { return nil }
        let bytes = label.last == 0 ? label.dropLast() : label[...]
        guard !bytes.contains(0) else { return nil }
        var text = String(decoding: bytes, as: UTF8.self)
        // The mode after the profile's name: " (enforce)", " (complain)", " (kill)"…
        if let space = text.lastIndex(of: " "), text.hasSuffix(")"), text[text.index(after: space)...].hasPrefix("(") {
            text = String(text[..<space])
        }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, parts[0] == "snap", isSnapName(parts[1]), parts.dropFirst(2).allSatisfy({ !$0.isEmpty }) else {
            return nil
        }
        return "snap:" + parts[1]
    }

    /// snapd's rule for a snap's name: 1 to 40 of a-z, 0-9 and '-', with a letter,
    /// neither starting nor ending with '-', and no "--".
    static func isSnapName(_ name: Substring) -> Bool {
        guard (1...40).contains(name.count), name.first != "-", name.last != "-", !name.contains("--") else { return false }
        guard name.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }) else { return false }
        return name.contains { ("a"..."z").contains($0) }
    }
}
