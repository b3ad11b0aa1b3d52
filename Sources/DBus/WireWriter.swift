import CDBus
import Glibc

/// Lays values out in the D-Bus wire format (little-endian), checking on the way
/// everything libdbus would abort on or the bus would disconnect us for.
///
/// One walk does the three jobs: the checks (invalid paths and signatures, NUL in
/// strings, arrays whose items do not match their element type, empty structs,
/// nesting deeper than 64, variants of invalid types), the protocol's size limits
/// (`WireLimits`: an array over 64 MiB, a message over 128 MiB), and — when
/// `storing` — the bytes themselves. `BusMessage.append` walks values with a
/// measuring writer before handing them to libdbus; a large reply is built from the
/// stored bytes (`BusMessage.makeReturn(signature:_:)`) without libdbus's per-value
/// iterators, which cost more than the rest of a `GetManagedObjects` of 10,000
/// transfers together.
struct WireWriter {
    /// Offsets are counted from the start of the body, which starts 8-aligned in
    /// the message, so alignment within the body is alignment within the message.
    private(set) var count = 0
    private(set) var bytes: [UInt8] = []
    let storing: Bool

    /// Thrown when storing a descriptor: those travel beside the body, which only
    /// libdbus can arrange (its iterators take them).
    struct HoldsDescriptor: Error {}

    /// How many containers hold what is written next (`array`, `dictEntry`).
    private var depth = 0
    /// Container signatures already found valid: the same few recur in every object.
    private var validTypes: [String] = []

    init(storing: Bool, capacity: Int = 0) {
        self.storing = storing
        if storing { bytes.reserveCapacity(capacity) }
    }

    /// Adds values in order, as the arguments of one message.
    mutating func append(_ values: [DBusValue]) throws {
        for v in values { try append(v, depth: 0) }
        try finish()
    }

    /// Checks the size of the whole body.
    mutating func finish() throws {
        guard count <= WireLimits.maximumMessageBytes - WireLimits.headerAllowance else {
            throw BusError(name: StandardErrors.limitsExceeded,
                           message: "the message would be \(count) bytes long; D-Bus carries at most \(WireLimits.maximumMessageBytes)")
        }
    }

    // MARK: Writing containers piece by piece (no values built first)

    /// Writes an array of `element` (a dictionary when it is `{KV}`), whose items
    /// `items` writes; each item must be of that type.
    mutating func array(of element: String, _ items: (inout WireWriter) throws -> Void) throws {
        guard isValidSingleType("a" + element) else { throw BusError.invalidArgs("invalid array element type '\(element)'") }
        let at = lengthPlaceholder()
        pad(to: WireLimits.alignment(of: element[...]))
        let start = count
        depth += 1
        try items(&self)
        depth -= 1
        try checkGrowth()
        try patchLength(at: at, count - start)
    }

    /// Writes one entry of a dictionary (inside `array(of: "{KV}")`): `body` writes
    /// its key and its value.
    mutating func dictEntry(_ body: (inout WireWriter) throws -> Void) throws {
        pad(to: 8)
        depth += 1
        try body(&self)
        depth -= 1
    }

    /// Writes a `{sv}` dictionary entry (inside `array(of: "{sv}")`) from its head as
    /// prepared once (`InterfaceSpec.propertyEntryHeads`: the key, then the variant's
    /// signature, which `value` must have), then `value` as the variant's contents.
    mutating func preparedEntry(head: [UInt8], variantContents value: DBusValue) throws {
        pad(to: 8)
        if storing { bytes.append(contentsOf: head) }
        count += head.count
        try append(value, depth: depth + 2)
    }

    /// Writes a value where the enclosing container expects one.
    mutating func value(_ v: DBusValue) throws {
        try append(v, depth: depth)
    }

    /// Writes a variant holding `v` (without boxing it in a `DBusValue.variant`).
    mutating func variant(_ v: DBusValue) throws {
        depth += 1
        defer { depth -= 1 }
        try variantContents(v, depth: depth)
    }

    /// Writes a variant of type `signature` whose contents `contents` writes (a whole
    /// array of values, say, built from no `DBusValue` of its own).
    mutating func variant(signature: String, _ contents: (inout WireWriter) throws -> Void) throws {
        guard isValidSingleType(signature) else { throw BusError.invalidArgs("a variant cannot hold a value of type '\(signature)'") }
        try text(signature, lengthBytes: 1)
        depth += 1
        defer { depth -= 1 }
        try contents(&self)
    }

    private mutating func variantContents(_ inner: DBusValue, depth: Int) throws {
        let signature = inner.signature
        // libdbus aborts on a variant whose signature is invalid (over 255
        // characters, or arrays or structs nested over 32 deep).
        guard isValidSingleType(signature) else {
            throw BusError.invalidArgs("a variant cannot hold a value of type '\(signature)'")
        }
        try text(signature, lengthBytes: 1)
        try append(inner, depth: depth)
    }

    private mutating func isValidSingleType(_ type: String) -> Bool {
        if type.utf8.count == 1, let c = type.utf8.first { return WireLimits.isBasicTypeCode(c) || c == UInt8(ascii: "v") }
        if validTypes.contains(type) { return true }
        guard BusNames.isValidSingleType(type) else { return false }
        if validTypes.count < 32 { validTypes.append(type) }
        return true
    }

    /// Pads to 8, where a structure (and a message's body) starts.
    mutating func padToStructure() {
        pad(to: 8)
    }

    /// Overwrites the 4 bytes at `offset` (a length written before it was known).
    mutating func setUInt32(at offset: Int, _ value: UInt32) {
        guard storing else { return }
        withUnsafeBytes(of: value.littleEndian) { raw in
            for i in 0..<4 { bytes[offset + i] = raw[i] }
        }
    }

    // MARK: Primitives

    private mutating func pad(to alignment: Int) {
        let padded = (count + alignment - 1) & ~(alignment - 1)
        if storing, padded > count { bytes.append(contentsOf: repeatElement(0, count: padded - count)) }
        count = padded
    }

    private mutating func put<T: FixedWidthInteger>(_ x: T) {
        pad(to: MemoryLayout<T>.size)
        if storing { withUnsafeBytes(of: x.littleEndian) { bytes.append(contentsOf: $0) } }
        count += MemoryLayout<T>.size
    }

    /// Reserves an array's length, to be filled in by `patchLength(at:)`.
    private mutating func lengthPlaceholder() -> Int {
        pad(to: 4)
        let at = count
        put(UInt32(0))
        return at
    }

    private mutating func patchLength(at: Int, _ length: Int) throws {
        try checkArray(length)
        setUInt32(at: at, UInt32(length))
    }

    private func checkArray(_ length: Int) throws {
        guard length <= WireLimits.maximumArrayBytes else {
            throw BusError(name: StandardErrors.limitsExceeded,
                           message: "an array in the message would be over \(WireLimits.maximumArrayBytes) bytes long, the most D-Bus carries")
        }
    }

    private mutating func checkGrowth() throws {
        // Checked as it grows: a huge reply is refused without walking all of it.
        guard count <= WireLimits.maximumMessageBytes else {
            throw BusError(name: StandardErrors.limitsExceeded,
                           message: "the message would be over \(WireLimits.maximumMessageBytes) bytes long, the most D-Bus carries")
        }
    }

    /// A string's bytes and its terminating NUL, after a length of `lengthBytes` (1 or 4).
    private mutating func text(_ s: String, lengthBytes: Int) throws {
        var s = s
        try s.withUTF8 { utf8 in
            if let base = utf8.baseAddress, memchr(base, 0, utf8.count) != nil {
                throw BusError.invalidArgs("string contains a NUL character")
            }
            if lengthBytes == 1 { put(UInt8(truncatingIfNeeded: utf8.count)) } else { put(UInt32(utf8.count)) }
            if storing {
                bytes.append(contentsOf: utf8)
                bytes.append(0)
            }
            count += utf8.count + 1
        }
    }

    // MARK: Values

    private mutating func append(_ v: DBusValue, depth: Int) throws {
        guard depth <= Marshal.maximumDepth else { throw BusError.invalidArgs("values nested more than \(Marshal.maximumDepth) deep") }
        switch v {
        case .byte(let x): put(x)
        case .boolean(let b): put(UInt32(b ? 1 : 0))
        case .int16(let x): put(x)
        case .uint16(let x): put(x)
        case .int32(let x): put(x)
        case .uint32(let x): put(x)
        case .int64(let x): put(x)
        case .uint64(let x): put(x)
        case .double(let x): put(x.bitPattern)
        case .string(let s): try text(s, lengthBytes: 4)
        case .objectPath(let p):
            guard BusNames.isValidObjectPath(p) else { throw BusError.invalidArgs("invalid object path '\(p)'") }
            try text(p, lengthBytes: 4)
        case .signature(let s):
            guard BusNames.isValidSignature(s), s.utf8.count <= 255 else { throw BusError.invalidArgs("invalid signature '\(s)'") }
            try text(s, lengthBytes: 1)
        case .unixFD(let fd):
            // libdbus duplicates it when appending; a closed one would fail there
            // with nothing better than "out of memory".
            guard fd >= 0, fcntl(fd, F_GETFD) != -1 else { throw BusError.invalidArgs("\(fd) is not an open file descriptor") }
            if storing { throw HoldsDescriptor() }
            put(UInt32(0))
        case .bytes(let b):
            let at = lengthPlaceholder()
            if storing { bytes.append(contentsOf: b) }
            count += b.count
            try patchLength(at: at, b.count)
        case .array(let element, let items):
            guard isValidSingleType(element) else { throw BusError.invalidArgs("invalid array element type '\(element)'") }
            let at = lengthPlaceholder()
            pad(to: WireLimits.alignment(of: element[...]))
            let start = count
            for item in items {
                guard item.hasSignature(element[...]) else {
                    throw BusError.invalidArgs("array of '\(element)' holds a '\(item.signature)'")
                }
                try append(item, depth: depth + 1)
                try checkArray(count - start) // as it grows: a huge array is refused early
            }
            try patchLength(at: at, count - start)
        case .dictionary(let k, let vsig, let entries):
            guard k.utf8.count == 1, isValidSingleType(k), k != "v" else {
                throw BusError.invalidArgs("invalid dictionary key type '\(k)'")
            }
            guard isValidSingleType(vsig) else { throw BusError.invalidArgs("invalid dictionary value type '\(vsig)'") }
            let at = lengthPlaceholder()
            pad(to: 8)
            let start = count
            for e in entries {
                guard e.key.hasSignature(k[...]), e.value.hasSignature(vsig[...]) else {
                    throw BusError.invalidArgs("dictionary a{\(k)\(vsig)} holds a \(e.key.signature) -> \(e.value.signature) entry")
                }
                pad(to: 8)
                try append(e.key, depth: depth + 2)
                try append(e.value, depth: depth + 2)
                try checkArray(count - start)
            }
            try patchLength(at: at, count - start)
        case .structure(let fields):
            guard !fields.isEmpty else { throw BusError.invalidArgs("empty structure") }
            pad(to: 8)
            for f in fields { try append(f, depth: depth + 1) }
        case .variant(let inner):
            try variantContents(inner, depth: depth + 1)
        }
        try checkGrowth()
    }
}

extension DBusValue {
    /// Whether `signature` is this value's type, without building its signature.
    func hasSignature(_ signature: Substring) -> Bool {
        switch self {
        case .array(let element, _):
            return signature.first == "a" && signature.dropFirst() == element[...]
        case .dictionary(let k, let v, _):
            return signature.utf8.count == k.utf8.count + v.utf8.count + 3
                && signature.hasPrefix("a{") && signature.last == "}"
                && signature.dropFirst(2).hasPrefix(k) && signature.dropFirst(2 + k.count).dropLast() == v[...]
        case .structure, .bytes:
            return self.signature[...] == signature
        default:
            // A basic type or a variant: one character.
            return signature.utf8.count == 1 && self.typeCharacter == signature.utf8.first
        }
    }

    /// The type character of a basic value or a variant.
    private var typeCharacter: UInt8 {
        switch self {
        case .byte: return UInt8(ascii: "y")
        case .boolean: return UInt8(ascii: "b")
        case .int16: return UInt8(ascii: "n")
        case .uint16: return UInt8(ascii: "q")
        case .int32: return UInt8(ascii: "i")
        case .uint32: return UInt8(ascii: "u")
        case .int64: return UInt8(ascii: "x")
        case .uint64: return UInt8(ascii: "t")
        case .double: return UInt8(ascii: "d")
        case .string: return UInt8(ascii: "s")
        case .objectPath: return UInt8(ascii: "o")
        case .signature: return UInt8(ascii: "g")
        case .unixFD: return UInt8(ascii: "h")
        case .variant: return UInt8(ascii: "v")
        case .bytes, .array, .dictionary, .structure: return 0
        }
    }
}
