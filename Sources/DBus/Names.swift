import CDBus

/// Checks for the names D-Bus knows. libdbus treats an invalid name passed to it
/// as a programming error and aborts, so every name that could come from outside
/// is checked here first.
public enum BusNames {
    public static func isValidObjectPath(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard b.first == UInt8(ascii: "/") else { return false }
        if b.count == 1 { return true }
        guard b.last != UInt8(ascii: "/") else { return false }
        var previousSlash = true
        for c in b.dropFirst() {
            if c == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                guard isNameChar(c) else { return false }
                previousSlash = false
            }
        }
        return true
    }

    /// Interface and error names: two or more dot-separated elements, each
    /// `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes.
    public static func isValidInterfaceName(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= 255 else { return false }
        let parts = b.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return false }
        for part in parts {
            guard let first = part.first, !isDigit(first) else { return false }
            guard part.allSatisfy(isNameChar) else { return false }
        }
        return true
    }

    public static func isValidErrorName(_ s: String) -> Bool { isValidInterfaceName(s) }

    public static func isValidMemberName(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard let first = b.first, b.count <= 255, !isDigit(first) else { return false }
        return b.allSatisfy(isNameChar)
    }

    /// Unique (`:1.42`) or well-known (`org.ferry.Ferry1`) bus names.
    public static func isValidBusName(_ s: String) -> Bool {
        var b = Array(s.utf8)
        guard !b.isEmpty, b.count <= 255 else { return false }
        let unique = b.first == UInt8(ascii: ":")
        if unique { b.removeFirst() }
        let parts = b.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return false }
        for part in parts {
            guard let first = part.first else { return false }
            if !unique && isDigit(first) { return false }
            guard part.allSatisfy({ isNameChar($0) || $0 == UInt8(ascii: "-") }) else { return false }
        }
        return true
    }

    public static func isValidSignature(_ s: String) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        let ok = dbus_signature_validate(s, &error) != 0
        if dbus_error_is_set(&error) != 0 { dbus_error_free(&error) }
        return ok
    }

    /// A signature holding exactly one complete type.
    public static func isValidSingleType(_ s: String) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        let ok = dbus_signature_validate_single(s, &error) != 0
        if dbus_error_is_set(&error) != 0 { dbus_error_free(&error) }
        return ok
    }

    /// Splits a valid signature into its complete types: `"sa{sv}i"` -> `["s", "a{sv}", "i"]`.
    public static func completeTypes(of signature: String) -> [String]? {
        guard isValidSignature(signature) else { return nil }
        var result: [String] = []
        let chars = Array(signature.utf8)
        var i = 0
        while i < chars.count {
            let start = i
            i = endOfType(chars, from: i)
            result.append(String(decoding: chars[start..<i], as: UTF8.self))
        }
        return result
    }

    private static func endOfType(_ c: [UInt8], from start: Int) -> Int {
        var i = start
        switch c[i] {
        case UInt8(ascii: "a"):
            return endOfType(c, from: i + 1)
        case UInt8(ascii: "("), UInt8(ascii: "{"):
            var depth = 0
            repeat {
                if c[i] == UInt8(ascii: "(") || c[i] == UInt8(ascii: "{") { depth += 1 }
                if c[i] == UInt8(ascii: ")") || c[i] == UInt8(ascii: "}") { depth -= 1 }
                i += 1
            } while depth > 0
            return i
        default:
            return i + 1
        }
    }

    private static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }
    private static func isNameChar(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
            || isDigit(c) || c == UInt8(ascii: "_")
    }
}
