/// One D-Bus value of any type, as a Swift value.
///
/// Byte arrays (`ay`) have their own case so that they are marshalled in one go;
/// `array(element: "y", …)` is accepted when sending too.
///
/// Only `variant` is boxed (`indirect`): the other cases hold their payload inline (or
/// in an array's own storage), so a value costs no allocation of its own — a daemon
/// keeps tens of thousands of them as exported properties.
public enum DBusValue: Hashable, Sendable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// `h`: a Unix file descriptor.
    ///
    /// Received (a message's `arguments()`), it is a new descriptor that libdbus
    /// duplicated for this value: the receiver owns it and must `close` it (every
    /// `arguments()` call makes new duplicates; see `closeUnixFDs(in:)`). Sent, it is
    /// only borrowed: libdbus duplicates it when the value is appended to a message,
    /// and the caller still owns (and closes) its own — but not before then:
    /// `BusMessage.append` appends at once, `MethodInvocation.reply` later on the
    /// connection's queue (close yours from `BusConnection.perform`, which runs
    /// after it). Only connections over Unix sockets can carry them
    /// (`BusConnection.canPassUnixFDs`).
    case unixFD(Int32)
    /// `ay`
    case bytes([UInt8])
    /// `a` + element signature, e.g. `array(element: "s", [.string("x")])` is `as`.
    /// Boxed, like `dictionary`: their payloads (a signature or two beside the
    /// elements) would otherwise make every value 48 bytes instead of 24, and a
    /// daemon keeps tens of thousands of property values.
    indirect case array(element: String, [DBusValue])
    /// `a{KV}`; entries keep their order.
    indirect case dictionary(key: String, value: String, [DictEntry])
    /// `(…)`; at least one field.
    case structure([DBusValue])
    indirect case variant(DBusValue)

    public struct DictEntry: Hashable, Sendable {
        public var key: DBusValue
        public var value: DBusValue
        public init(_ key: DBusValue, _ value: DBusValue) {
            self.key = key
            self.value = value
        }
    }

    /// The value's type signature.
    public var signature: String {
        switch self {
        case .byte: return "y"
        case .boolean: return "b"
        case .int16: return "n"
        case .uint16: return "q"
        case .int32: return "i"
        case .uint32: return "u"
        case .int64: return "x"
        case .uint64: return "t"
        case .double: return "d"
        case .string: return "s"
        case .objectPath: return "o"
        case .signature: return "g"
        case .unixFD: return "h"
        case .bytes: return "ay"
        case .array(let element, _): return "a" + element
        case .dictionary(let k, let v, _): return "a{" + k + v + "}"
        case .structure(let fields): return "(" + fields.map(\.signature).joined() + ")"
        case .variant: return "v"
        }
    }

    // MARK: Building

    /// An `a{sv}` dictionary, keys sorted so that output is stable.
    public static func vardict(_ d: [String: DBusValue]) -> DBusValue {
        .dictionary(key: "s", value: "v", d.keys.sorted().map { DictEntry(.string($0), .variant(d[$0]!)) })
    }

    /// An `a{ss}` dictionary, keys sorted.
    public static func stringDict(_ d: [String: String]) -> DBusValue {
        .dictionary(key: "s", value: "s", d.keys.sorted().map { DictEntry(.string($0), .string(d[$0]!)) })
    }

    public static func stringArray(_ a: [String]) -> DBusValue { .array(element: "s", a.map { .string($0) }) }
    public static func pathArray(_ a: [String]) -> DBusValue { .array(element: "o", a.map { .objectPath($0) }) }

    // MARK: Reading

    /// The value inside a variant (any depth), or the value itself.
    public var unwrapped: DBusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    public var string: String? {
        switch unwrapped {
        case .string(let s), .objectPath(let s), .signature(let s): return s
        default: return nil
        }
    }
    public var bool: Bool? { if case .boolean(let b) = unwrapped { return b }; return nil }
    public var byte: UInt8? { if case .byte(let v) = unwrapped { return v }; return nil }
    public var int32: Int32? { if case .int32(let v) = unwrapped { return v }; return nil }
    public var uint32: UInt32? { if case .uint32(let v) = unwrapped { return v }; return nil }
    public var int64: Int64? { if case .int64(let v) = unwrapped { return v }; return nil }
    public var uint64: UInt64? { if case .uint64(let v) = unwrapped { return v }; return nil }
    public var double: Double? { if case .double(let v) = unwrapped { return v }; return nil }
    /// The descriptor of an `h` (owned by whoever received it; see `unixFD`).
    public var unixFD: Int32? { if case .unixFD(let v) = unwrapped { return v }; return nil }

    public var bytes: [UInt8]? {
        switch unwrapped {
        case .bytes(let b): return b
        case .array("y", let items): return items.compactMap(\.byte)
        default: return nil
        }
    }

    /// Elements of any array (`bytes` become `.byte` values).
    public var arrayElements: [DBusValue]? {
        switch unwrapped {
        case .array(_, let items): return items
        case .bytes(let b): return b.map { .byte($0) }
        default: return nil
        }
    }

    public var structFields: [DBusValue]? { if case .structure(let f) = unwrapped { return f }; return nil }

    /// Any dictionary whose keys are strings, values as they are (variants kept).
    public var dictionaryEntries: [(String, DBusValue)]? {
        guard case .dictionary(_, _, let entries) = unwrapped else { return nil }
        var out: [(String, DBusValue)] = []
        for e in entries {
            guard let k = e.key.string else { return nil }
            out.append((k, e.value))
        }
        return out
    }

    /// `a{sv}` as a Swift dictionary with the variants unwrapped.
    public var vardict: [String: DBusValue]? {
        guard case .dictionary(_, "v", _) = unwrapped, let entries = dictionaryEntries else { return nil }
        var out: [String: DBusValue] = [:]
        for (k, v) in entries { out[k] = v.unwrapped }
        return out
    }

    /// `a{ss}` as a Swift dictionary.
    public var stringDict: [String: String]? {
        guard case .dictionary(_, "s", _) = unwrapped, let entries = dictionaryEntries else { return nil }
        var out: [String: String] = [:]
        for (k, v) in entries { out[k] = v.string }
        return out
    }
}

extension DBusValue: CustomStringConvertible {
    /// A GVariant-like text form, for logs and error messages.
    public var description: String {
        switch self {
        case .byte(let v): return "byte \(v)"
        case .boolean(let v): return v ? "true" : "false"
        case .int16(let v): return "int16 \(v)"
        case .uint16(let v): return "uint16 \(v)"
        case .int32(let v): return "\(v)"
        case .uint32(let v): return "uint32 \(v)"
        case .int64(let v): return "int64 \(v)"
        case .uint64(let v): return "uint64 \(v)"
        case .double(let v): return "\(v)"
        case .string(let s): return "'\(s)'"
        case .objectPath(let s): return "objectpath '\(s)'"
        case .signature(let s): return "signature '\(s)'"
        case .unixFD(let fd): return "handle \(fd)"
        case .bytes(let b): return "bytes [\(b.count)]"
        case .array(_, let items): return "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(_, _, let entries):
            return "{" + entries.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case .structure(let f): return "(" + f.map(\.description).joined(separator: ", ") + ")"
        case .variant(let v): return "<\(v)>"
        }
    }
}
