import CDBus
import Glibc

/// Moves `DBusValue`s in and out of libdbus message iterators.
enum Marshal {
    /// How deep containers may nest, variants included (the spec's 2 × 32); receivers
    /// refuse deeper messages, and the bus disconnects their sender. Checked by
    /// `WireWriter` before anything is written.
    static let maximumDepth = 64

    /// Writes a value checked by `WireWriter`.
    static func write(_ v: DBusValue, into iter: inout DBusMessageIter) throws {
        func basic<T: BitwiseCopyable>(_ type: Int32, _ value: T) throws {
            var x = value
            guard dbus_message_iter_append_basic(&iter, type, &x) != 0 else { throw BusError.outOfMemory }
        }
        func text(_ type: Int32, _ s: String) throws {
            try s.withCString { p in
                var ptr: UnsafePointer<CChar>? = p
                guard dbus_message_iter_append_basic(&iter, type, &ptr) != 0 else { throw BusError.outOfMemory }
            }
        }
        func container(_ type: Int32, _ signature: String?, _ body: (inout DBusMessageIter) throws -> Void) throws {
            var sub = DBusMessageIter()
            let opened: dbus_bool_t
            if let signature {
                opened = signature.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) }
            } else {
                opened = dbus_message_iter_open_container(&iter, type, nil, &sub)
            }
            guard opened != 0 else { throw BusError.outOfMemory }
            do {
                try body(&sub)
            } catch {
                dbus_message_iter_abandon_container(&iter, &sub)
                throw error
            }
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw BusError.outOfMemory }
        }

        switch v {
        case .byte(let x): try basic(TypeCode.byte, x)
        case .boolean(let b): try basic(TypeCode.boolean, dbus_bool_t(b ? 1 : 0))
        case .int16(let x): try basic(TypeCode.int16, x)
        case .uint16(let x): try basic(TypeCode.uint16, x)
        case .int32(let x): try basic(TypeCode.int32, x)
        case .uint32(let x): try basic(TypeCode.uint32, x)
        case .int64(let x): try basic(TypeCode.int64, x)
        case .uint64(let x): try basic(TypeCode.uint64, x)
        case .double(let x): try basic(TypeCode.double, x)
        case .string(let s): try text(TypeCode.string, s)
        case .objectPath(let s): try text(TypeCode.objectPath, s)
        case .signature(let s): try text(TypeCode.signature, s)
        case .unixFD(let fd): try basic(TypeCode.unixFD, fd)
        case .bytes(let bytes):
            try container(TypeCode.array, "y") { sub in
                guard !bytes.isEmpty else { return }
                try bytes.withUnsafeBufferPointer { buf in
                    var p: UnsafePointer<UInt8>? = buf.baseAddress
                    guard dbus_message_iter_append_fixed_array(&sub, TypeCode.byte, &p, Int32(buf.count)) != 0 else {
                        throw BusError.outOfMemory
                    }
                }
            }
        case .array(let element, let items):
            try container(TypeCode.array, element) { sub in
                for item in items { try write(item, into: &sub) }
            }
        case .dictionary(let k, let vsig, let entries):
            try container(TypeCode.array, "{" + k + vsig + "}") { sub in
                for e in entries {
                    var entry = DBusMessageIter()
                    guard dbus_message_iter_open_container(&sub, TypeCode.dictEntry, nil, &entry) != 0 else { throw BusError.outOfMemory }
                    try write(e.key, into: &entry)
                    try write(e.value, into: &entry)
                    guard dbus_message_iter_close_container(&sub, &entry) != 0 else { throw BusError.outOfMemory }
                }
            }
        case .structure(let fields):
            try container(TypeCode.structure, nil) { sub in
                for f in fields { try write(f, into: &sub) }
            }
        case .variant(let inner):
            try container(TypeCode.variant, inner.signature) { sub in
                try write(inner, into: &sub)
            }
        }
    }

    static func read(_ iter: inout DBusMessageIter) throws -> DBusValue {
        func basic<T: BitwiseCopyable>(_ zero: T) -> T {
            var x = zero
            dbus_message_iter_get_basic(&iter, &x)
            return x
        }
        func text() -> String {
            var p: UnsafePointer<CChar>? = nil
            dbus_message_iter_get_basic(&iter, &p)
            return p.map { String(cString: $0) } ?? ""
        }
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case TypeCode.byte: return .byte(basic(UInt8(0)))
        case TypeCode.boolean: return .boolean(basic(dbus_bool_t(0)) != 0)
        case TypeCode.int16: return .int16(basic(Int16(0)))
        case TypeCode.uint16: return .uint16(basic(UInt16(0)))
        case TypeCode.int32: return .int32(basic(Int32(0)))
        case TypeCode.uint32: return .uint32(basic(UInt32(0)))
        case TypeCode.int64: return .int64(basic(Int64(0)))
        case TypeCode.uint64: return .uint64(basic(UInt64(0)))
        case TypeCode.double: return .double(basic(Double(0)))
        case TypeCode.string: return .string(text())
        case TypeCode.objectPath: return .objectPath(text())
        case TypeCode.signature: return .signature(text())
        case TypeCode.unixFD:
            // A duplicate made for us (-1 when that failed, e.g. out of descriptors).
            let fd = basic(Int32(-1))
            guard fd >= 0 else { throw BusError.invalidArgs("could not take a file descriptor from the message (\(String(cString: strerror(errno))))") }
            return .unixFD(fd)
        case TypeCode.variant:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(try read(&sub))
        case TypeCode.structure:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .structure(try readAll(&sub))
        case TypeCode.array:
            let full = signatureOf(&iter)
            let element = String(full.dropFirst())
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            let elementType = dbus_message_iter_get_element_type(&iter)
            if elementType == TypeCode.byte {
                var p: UnsafePointer<UInt8>? = nil
                var n: Int32 = 0
                if dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                    dbus_message_iter_get_fixed_array(&sub, &p, &n)
                }
                return .bytes(p.map { Array(UnsafeBufferPointer(start: $0, count: Int(n))) } ?? [])
            }
            if elementType == TypeCode.dictEntry {
                // element is "{KV}"
                let inner = Array(element.dropFirst().dropLast())
                let key = String(inner[0])
                let value = String(inner.dropFirst())
                var entries: [DBusValue.DictEntry] = []
                var key0: DBusValue?
                do {
                    while dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                        var entry = DBusMessageIter()
                        dbus_message_iter_recurse(&sub, &entry)
                        key0 = try read(&entry)
                        dbus_message_iter_next(&entry)
                        let v = try read(&entry)
                        entries.append(.init(key0!, v))
                        key0 = nil
                        dbus_message_iter_next(&sub)
                    }
                } catch {
                    // Nobody gets the descriptors read so far.
                    DBusValue.closeUnixFDs(in: entries.flatMap { [$0.key, $0.value] } + (key0.map { [$0] } ?? []))
                    throw error
                }
                return .dictionary(key: key, value: value, entries)
            }
            return .array(element: element, try readAll(&sub))
        default:
            throw BusError.invalidArgs("unsupported D-Bus type code \(type)")
        }
    }

    /// Reads every value from `iter` to its end. When one cannot be read, closes the
    /// file descriptors read so far (nobody will get them) and throws.
    static func readAll(_ iter: inout DBusMessageIter) throws -> [DBusValue] {
        var items: [DBusValue] = []
        do {
            while dbus_message_iter_get_arg_type(&iter) != TypeCode.invalid {
                items.append(try read(&iter))
                dbus_message_iter_next(&iter)
            }
        } catch {
            DBusValue.closeUnixFDs(in: items)
            throw error
        }
        return items
    }

    private static func signatureOf(_ iter: inout DBusMessageIter) -> String {
        guard let p = dbus_message_iter_get_signature(&iter) else { return "" }
        defer { dbus_free(p) }
        return String(cString: p)
    }
}
