/// How many bytes values take on the wire, to refuse a message the bus cannot carry
/// before it is built: the bus disconnects a sender whose message breaks the
/// protocol's limits, and a service that loses its bus stops serving everyone.
public enum WireLimits {
    /// The largest message the protocol allows (header and body): 128 MiB.
    public static let maximumMessageBytes = 128 * 1024 * 1024
    /// The largest array (its elements' bytes): 64 MiB.
    public static let maximumArrayBytes = 64 * 1024 * 1024
    /// Room kept for the header fields (paths, names, signature) of a message.
    static let headerAllowance = 64 * 1024

    /// Throws `LimitsExceeded` when a body of `values` would break a limit.
    static func check(_ values: [DBusValue]) throws {
        var offset = 0
        for v in values { try add(v, at: &offset) }
        guard offset <= maximumMessageBytes - headerAllowance else {
            throw BusError(name: StandardErrors.limitsExceeded,
                           message: "the message would be \(offset) bytes long; D-Bus carries at most \(maximumMessageBytes)")
        }
    }

    private static func pad(_ offset: inout Int, to alignment: Int) {
        offset = (offset + alignment - 1) / alignment * alignment
    }

    /// The alignment of a complete type by its first character.
    static func alignment(of signature: Substring) -> Int {
        switch signature.first {
        case "y", "g", "v": return 1
        case "n", "q": return 2
        case "x", "t", "d", "(", "{": return 8
        default: return 4  // b i u s o a h
        }
    }

    /// Adds the bytes of `v`, placed at `offset`, to `offset`.
    private static func add(_ v: DBusValue, at offset: inout Int) throws {
        switch v {
        case .byte: offset += 1
        case .int16, .uint16: pad(&offset, to: 2); offset += 2
        case .boolean, .int32, .uint32, .unixFD: pad(&offset, to: 4); offset += 4
        case .int64, .uint64, .double: pad(&offset, to: 8); offset += 8
        case .string(let s), .objectPath(let s): pad(&offset, to: 4); offset += 4 + s.utf8.count + 1
        case .signature(let s): offset += 1 + s.utf8.count + 1
        case .bytes(let b):
            pad(&offset, to: 4)
            offset += 4
            try checkArray(b.count)
            offset += b.count
        case .array(let element, let items):
            pad(&offset, to: 4)
            offset += 4
            pad(&offset, to: alignment(of: element[...]))
            let start = offset
            for i in items {
                try add(i, at: &offset)
                try checkArray(offset - start)
            }
        case .dictionary(_, _, let entries):
            pad(&offset, to: 4)
            offset += 4
            pad(&offset, to: 8)
            let start = offset
            for e in entries {
                pad(&offset, to: 8)
                try add(e.key, at: &offset)
                try add(e.value, at: &offset)
                try checkArray(offset - start)
            }
        case .structure(let fields):
            pad(&offset, to: 8)
            for f in fields { try add(f, at: &offset) }
        case .variant(let inner):
            offset += 1 + inner.signature.utf8.count + 1
            try add(inner, at: &offset)
        }
        // Checked as it grows: a huge reply is refused without walking all of it.
        guard offset <= maximumMessageBytes else {
            throw BusError(name: StandardErrors.limitsExceeded,
                           message: "the message would be over \(maximumMessageBytes) bytes long, the most D-Bus carries")
        }
    }

    private static func checkArray(_ bytes: Int) throws {
        guard bytes <= maximumArrayBytes else {
            throw BusError(name: StandardErrors.limitsExceeded,
                           message: "an array in the message would be over \(maximumArrayBytes) bytes long, the most D-Bus carries")
        }
    }
}
