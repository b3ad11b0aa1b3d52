import CDBus
import Glibc

/// Reads a message's values straight from its bytes (`dbus_message_marshal`), the
/// reverse of `WireWriter`: libdbus's iterators cost several times more for a reply
/// of tens of thousands of values (`GetManagedObjects` of 10,000 transfers).
///
/// The bytes come from a message libdbus has loaded, so it has already validated
/// them; every read is still bounds-checked and a malformed body throws.
struct WireReader {
    /// A complete type, parsed once per signature (and once per distinct variant type).
    indirect enum WireType {
        case basic(UInt8)
        case bytes
        case array(element: WireType, signature: String)
        case dictionary(key: WireType, value: WireType, keySignature: String, valueSignature: String)
        case structure([WireType])
        case variant
    }

    private let base: UnsafeRawBufferPointer
    private let bigEndian: Bool
    private var offset: Int
    /// Offsets are aligned relative to the message start (`base`).
    private let end: Int
    private var variantTypes: [String: WireType] = [:]

    struct Malformed: Error, CustomStringConvertible {
        let description: String
    }

    /// Reads the values of a whole marshalled message (header and body).
    static func values(ofMessage bytes: UnsafeRawBufferPointer, signature: String) throws -> [DBusValue] {
        guard bytes.count >= 16 else { throw Malformed(description: "message shorter than its header") }
        let big = bytes[0] == UInt8(ascii: "B")
        let (bodyStart, bodyLength) = try bodyRange(ofMessage: bytes)
        var reader = WireReader(base: bytes, bigEndian: big, offset: bodyStart, end: bodyStart + bodyLength)
        let types = try parse(signature)
        var values: [DBusValue] = []
        values.reserveCapacity(types.count)
        for t in types { values.append(try reader.read(t, depth: 0)) }
        guard reader.offset == reader.end else { throw Malformed(description: "bytes left after the last value") }
        return values
    }

    /// Where a marshalled message's body starts, and its length.
    static func bodyRange(ofMessage bytes: UnsafeRawBufferPointer) throws -> (start: Int, length: Int) {
        guard bytes.count >= 16, bytes[0] == UInt8(ascii: "l") || bytes[0] == UInt8(ascii: "B") else {
            throw Malformed(description: "not a message")
        }
        func u32(_ at: Int) -> Int {
            let x = bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)
            return Int(bytes[0] == UInt8(ascii: "B") ? UInt32(bigEndian: x) : UInt32(littleEndian: x))
        }
        let start = (16 + u32(12) + 7) & ~7
        let length = u32(4)
        guard start + length <= bytes.count else { throw Malformed(description: "body past the end of the message") }
        return (start, length)
    }

    private init(base: UnsafeRawBufferPointer, bigEndian: Bool, offset: Int, end: Int) {
        self.base = base
        self.bigEndian = bigEndian
        self.offset = offset
        self.end = end
    }

    // MARK: Signatures

    static func parse(_ signature: String) throws -> [WireType] {
        let utf8 = Array(signature.utf8)
        var i = 0
        var types: [WireType] = []
        while i < utf8.count { types.append(try parseOne(utf8, &i)) }
        return types
    }

    private static func parseOne(_ s: [UInt8], _ i: inout Int) throws -> WireType {
        guard i < s.count else { throw Malformed(description: "signature ends inside a type") }
        let c = s[i]
        i += 1
        switch c {
        case UInt8(ascii: "a"):
            guard i < s.count else { throw Malformed(description: "array without an element type") }
            if s[i] == UInt8(ascii: "y") {
                i += 1
                return .bytes
            }
            if s[i] == UInt8(ascii: "{") {
                i += 1
                let keyStart = i
                let key = try parseOne(s, &i)
                let valueStart = i
                let value = try parseOne(s, &i)
                guard i < s.count, s[i] == UInt8(ascii: "}") else { throw Malformed(description: "dictionary entry not closed") }
                i += 1
                return .dictionary(key: key, value: value,
                                   keySignature: String(decoding: s[keyStart..<valueStart], as: UTF8.self),
                                   valueSignature: String(decoding: s[valueStart..<(i - 1)], as: UTF8.self))
            }
            let elementStart = i
            let element = try parseOne(s, &i)
            return .array(element: element, signature: String(decoding: s[elementStart..<i], as: UTF8.self))
        case UInt8(ascii: "("):
            var fields: [WireType] = []
            while i < s.count, s[i] != UInt8(ascii: ")") { fields.append(try parseOne(s, &i)) }
            guard i < s.count, !fields.isEmpty else { throw Malformed(description: "structure not closed or empty") }
            i += 1
            return .structure(fields)
        case UInt8(ascii: "v"):
            return .variant
        default:
            guard WireLimits.isBasicTypeCode(c) else { throw Malformed(description: "unknown type code \(c)") }
            return .basic(c)
        }
    }

    // MARK: Values

    private mutating func align(_ n: Int) throws {
        offset = (offset + n - 1) & ~(n - 1)
        guard offset <= end else { throw Malformed(description: "padding past the end of the body") }
    }

    private mutating func load<T: FixedWidthInteger>(_: T.Type) throws -> T {
        try align(MemoryLayout<T>.size)
        guard offset + MemoryLayout<T>.size <= end else { throw Malformed(description: "value past the end of the body") }
        let x = base.loadUnaligned(fromByteOffset: offset, as: T.self)
        offset += MemoryLayout<T>.size
        return bigEndian ? T(bigEndian: x) : T(littleEndian: x)
    }

    private mutating func text(lengthBytes: Int) throws -> String {
        let n = lengthBytes == 1 ? Int(try load(UInt8.self)) : Int(try load(UInt32.self))
        guard offset + n + 1 <= end else { throw Malformed(description: "string past the end of the body") }
        let s = String(decoding: UnsafeRawBufferPointer(rebasing: base[offset..<(offset + n)]), as: UTF8.self)
        offset += n + 1
        return s
    }

    private static func alignment(_ t: WireType) -> Int {
        switch t {
        case .basic(let c): return WireLimits.alignment(ofTypeCode: c)
        case .variant: return WireLimits.alignment(ofTypeCode: UInt8(ascii: "v"))
        // Arrays (a dictionary's entries are 8-aligned within).
        case .bytes, .array, .dictionary: return WireLimits.alignment(ofTypeCode: UInt8(ascii: "a"))
        case .structure: return WireLimits.alignment(ofTypeCode: UInt8(ascii: "("))
        }
    }

    private mutating func read(_ t: WireType, depth: Int) throws -> DBusValue {
        guard depth <= Marshal.maximumDepth else { throw Malformed(description: "values nested too deeply") }
        switch t {
        case .basic(let c):
            switch c {
            case UInt8(ascii: "y"): return .byte(try load(UInt8.self))
            case UInt8(ascii: "b"): return .boolean(try load(UInt32.self) != 0)
            case UInt8(ascii: "n"): return .int16(try load(Int16.self))
            case UInt8(ascii: "q"): return .uint16(try load(UInt16.self))
            case UInt8(ascii: "i"): return .int32(try load(Int32.self))
            case UInt8(ascii: "u"): return .uint32(try load(UInt32.self))
            case UInt8(ascii: "x"): return .int64(try load(Int64.self))
            case UInt8(ascii: "t"): return .uint64(try load(UInt64.self))
            case UInt8(ascii: "d"): return .double(Double(bitPattern: try load(UInt64.self)))
            case UInt8(ascii: "s"): return .string(try text(lengthBytes: 4))
            case UInt8(ascii: "o"): return .objectPath(try text(lengthBytes: 4))
            case UInt8(ascii: "g"): return .signature(try text(lengthBytes: 1))
            default: throw Malformed(description: "a descriptor in a message read without its descriptors")
            }
        case .bytes:
            let n = Int(try load(UInt32.self))
            guard offset + n <= end else { throw Malformed(description: "array past the end of the body") }
            let bytes = Array(UnsafeRawBufferPointer(rebasing: base[offset..<(offset + n)]))
            offset += n
            return .bytes(bytes)
        case .array(let element, let signature):
            let stop = try arrayEnd(alignment: Self.alignment(element))
            var items: [DBusValue] = []
            while offset < stop { items.append(try read(element, depth: depth + 1)) }
            guard offset == stop else { throw Malformed(description: "array items overrun its length") }
            return .array(element: signature, items)
        case .dictionary(let key, let value, let keySignature, let valueSignature):
            let stop = try arrayEnd(alignment: 8)
            var entries: [DBusValue.DictEntry] = []
            while offset < stop {
                try align(8)
                let k = try read(key, depth: depth + 2)
                entries.append(DBusValue.DictEntry(k, try read(value, depth: depth + 2)))
            }
            guard offset == stop else { throw Malformed(description: "dictionary entries overrun its length") }
            return .dictionary(key: keySignature, value: valueSignature, entries)
        case .structure(let fields):
            try align(8)
            var values: [DBusValue] = []
            values.reserveCapacity(fields.count)
            for f in fields { values.append(try read(f, depth: depth + 1)) }
            return .structure(values)
        case .variant:
            let signature = try text(lengthBytes: 1)
            let type: WireType
            if signature.utf8.count == 1, let c = signature.utf8.first, WireLimits.isBasicTypeCode(c) {
                type = .basic(c)
            } else if let known = variantTypes[signature] {
                type = known
            } else {
                let parsed = try Self.parse(signature)
                guard parsed.count == 1 else { throw Malformed(description: "a variant of type '\(signature)'") }
                type = parsed[0]
                variantTypes[signature] = type
            }
            return .variant(try read(type, depth: depth + 1))
        }
    }

    /// Reads an array's length and moves to its first element; returns where it ends.
    private mutating func arrayEnd(alignment: Int) throws -> Int {
        let n = Int(try load(UInt32.self))
        try align(alignment)
        let stop = offset + n
        guard stop <= end else { throw Malformed(description: "array past the end of the body") }
        return stop
    }
}

extension WireReader {
    /// Reads an `a{oa{sa{sv}}}` body (a `GetManagedObjects` reply) as a stream: `object`
    /// with each object's path, then `property` with the index in `interfaces` and the
    /// name and value (the variant's content) of each property of those interfaces.
    /// Interfaces not named are skipped by their length, unread; no tree of values is built.
    static func forEachManagedProperty(ofMessage bytes: UnsafeRawBufferPointer, interfaces: [String],
                                       object: (String) throws -> Void,
                                       property: (Int, String, DBusValue) throws -> Void) throws {
        let (bodyStart, bodyLength) = try bodyRange(ofMessage: bytes)
        var r = WireReader(base: bytes, bigEndian: bytes[0] == UInt8(ascii: "B"), offset: bodyStart, end: bodyStart + bodyLength)
        let wanted = interfaces.map { Array($0.utf8) }
        let objectsEnd = try r.arrayEnd(alignment: 8)
        while r.offset < objectsEnd {
            try r.align(8)
            try object(try r.text(lengthBytes: 4))
            let interfacesEnd = try r.arrayEnd(alignment: 8)
            while r.offset < interfacesEnd {
                try r.align(8)
                let index = try r.matchText(wanted)
                let propertiesEnd = try r.arrayEnd(alignment: 8)
                if let index {
                    while r.offset < propertiesEnd {
                        try r.align(8)
                        let name = try r.text(lengthBytes: 4)
                        guard case .variant(let value) = try r.read(.variant, depth: 3) else { continue }
                        try property(index, name, value)
                    }
                } else {
                    r.offset = propertiesEnd
                }
                guard r.offset == propertiesEnd else { throw Malformed(description: "properties overrun their length") }
            }
            guard r.offset == interfacesEnd else { throw Malformed(description: "interfaces overrun their length") }
        }
        guard r.offset == objectsEnd, objectsEnd == r.end else { throw Malformed(description: "bytes left after the objects") }
    }

    /// Reads a string and returns the index of the first of `candidates` (UTF-8) equal to
    /// it, or nil: no `String` is made.
    private mutating func matchText(_ candidates: [[UInt8]]) throws -> Int? {
        let n = Int(try load(UInt32.self))
        guard offset + n + 1 <= end else { throw Malformed(description: "string past the end of the body") }
        let text = UnsafeRawBufferPointer(rebasing: base[offset..<(offset + n)])
        offset += n + 1
        return candidates.firstIndex { $0.count == n && $0.withUnsafeBytes { memcmp($0.baseAddress!, text.baseAddress!, n) == 0 } }
    }
}

extension BusMessage {
    /// Reads a `GetManagedObjects` reply (`a{oa{sa{sv}}}`) without building its values
    /// as one tree: `object` gets each object's path, in the reply's order, then
    /// `property` each property of that object's interfaces that are named in
    /// `interfaces` (by index into it), with the variant's content. For replies of
    /// tens of thousands of objects, where the tree would cost more than the listing.
    public func forEachManagedProperty(interfaces: [String], object: (String) throws -> Void,
                                       property: (_ interface: Int, _ name: String, _ value: DBusValue) throws -> Void) throws {
        guard signature == "a{oa{sa{sv}}}" else { throw BusError.invalidArgs("expected a{oa{sa{sv}}}, got '\(signature)'") }
        do {
            try withMarshalledBytes {
                try WireReader.forEachManagedProperty(ofMessage: $0, interfaces: interfaces, object: object, property: property)
            }
        } catch let e as WireReader.Malformed {
            throw BusError.invalidArgs(e.description)
        }
    }

    /// The body's values read from the message's bytes (`WireReader`); nil when the
    /// message carries descriptors (those only libdbus's iterators hand out).
    func argumentsFromBytes() throws -> [DBusValue]? {
        guard dbus_message_contains_unix_fds(raw) == 0 else { return nil }
        let signature = self.signature
        return try withMarshalledBytes { try WireReader.values(ofMessage: $0, signature: signature) }
    }

    /// Calls `body` with the whole message as it goes on the wire.
    func withMarshalledBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        var buffer: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(raw, &buffer, &length) != 0, let buffer else { throw BusError.outOfMemory }
        defer { dbus_free(buffer) }
        return try body(UnsafeRawBufferPointer(start: buffer, count: Int(length)))
    }
}
