import CDBus

extension BusMessage {
    /// A method return for this call with `values` as its body, laid out by
    /// `WireWriter` and handed to libdbus whole (`dbus_message_demarshal`, which
    /// validates it again) instead of value by value through its iterators: for a
    /// reply of tens of thousands of values, the iterators cost several times more.
    /// Same checks and errors as `append`; values holding a descriptor are built the
    /// usual way.
    public func makeReturn(_ values: [DBusValue]) throws -> BusMessage {
        do {
            return try makeReturn(signature: values.map(\.signature).joined()) { body in
                for v in values { try body.value(v) }
            }
        } catch is WireWriter.HoldsDescriptor {
            let r = try makeReturn()
            try r.append(values)
            return r
        }
    }

    /// A method return whose body of type `signature` `write` lays out.
    func makeReturn(signature: String, _ write: (inout WireWriter) throws -> Void) throws -> BusMessage {
        try checkReceived()
        guard BusNames.isValidSignature(signature) else {
            throw BusError.invalidArgs("the body's signature would be '\(signature)': over 255 characters or nested too deeply")
        }
        // Built in one buffer, header then body (which starts 8-aligned, as alignment
        // within the body requires), handed to libdbus and dropped before the copy:
        // a reply of tens of megabytes is held at most three times at once.
        let loaded: OpaquePointer = try {
            var message = WireWriter(storing: true, capacity: 4096)
            // The header: byte order, type, flags, version, body length (filled in
            // below), serial, then the fields REPLY_SERIAL, DESTINATION and SIGNATURE.
            var fields: [DBusValue] = [.structure([.byte(5), .variant(.uint32(serial))])]
            if let sender { fields.append(.structure([.byte(6), .variant(.string(sender))])) }
            fields.append(.structure([.byte(8), .variant(.signature(signature))]))
            for v: DBusValue in [.byte(UInt8(ascii: "l")), .byte(2), .byte(1 /* no reply expected */), .byte(1),
                                 .uint32(0), // body length
                                 .uint32(1), // replaced: the copy below has none, and the connection gives it the next
                                 .array(element: "(yv)", fields)] {
                try message.value(v)
            }
            message.padToStructure()
            let bodyStart = message.count
            try write(&message)
            try message.finish()
            message.setUInt32(at: 4, UInt32(message.count - bodyStart))

            var error = DBusError()
            dbus_error_init(&error)
            defer { dbus_error_free(&error) }
            let loaded = message.bytes.withUnsafeBytes { raw in
                dbus_message_demarshal(raw.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(raw.count), &error)
            }
            guard let loaded else {
                let why = error.message.map { String(cString: $0) } ?? "unknown reason"
                throw BusError(name: StandardErrors.failed, message: "libdbus refused the reply built for it: \(why)")
            }
            return loaded
        }()
        defer { dbus_message_unref(loaded) }
        // A copy has no serial: sending it gives it the connection's next one.
        guard let copy = dbus_message_copy(loaded) else { throw BusError.outOfMemory }
        return BusMessage(owning: copy)
    }
}
