import CDBus

/// A D-Bus message. Wraps a `DBusMessage*` and holds one reference to it.
///
/// `@unchecked Sendable`: libdbus messages are reference counted atomically, and
/// this wrapper is only read or written (header fields, arguments) while it is
/// being built or handled on one queue at a time; it is handed between queues only
/// as a finished, immutable message.
public final class BusMessage: @unchecked Sendable {
    let raw: OpaquePointer

    /// Takes over a reference the caller owns (`dbus_message_new_*`,
    /// `dbus_pending_call_steal_reply`, `dbus_connection_pop_message`).
    init(owning raw: OpaquePointer) {
        self.raw = raw
    }

    /// Adds a reference to a message borrowed from libdbus (handed to a callback).
    init(borrowing raw: OpaquePointer) {
        self.raw = raw
        dbus_message_ref(raw)
    }

    deinit {
        dbus_message_unref(raw)
    }

    // MARK: Creating

    public static func methodCall(destination: String?, path: String, interface: String?, member: String) throws -> BusMessage {
        if let destination, !BusNames.isValidBusName(destination) { throw BusError.invalidArgs("invalid bus name '\(destination)'") }
        guard BusNames.isValidObjectPath(path) else { throw BusError.invalidArgs("invalid object path '\(path)'") }
        if let interface, !BusNames.isValidInterfaceName(interface) { throw BusError.invalidArgs("invalid interface name '\(interface)'") }
        guard BusNames.isValidMemberName(member) else { throw BusError.invalidArgs("invalid member name '\(member)'") }
        guard let m = dbus_message_new_method_call(destination, path, interface, member) else { throw BusError.outOfMemory }
        return BusMessage(owning: m)
    }

    public static func signal(path: String, interface: String, member: String) throws -> BusMessage {
        guard BusNames.isValidObjectPath(path) else { throw BusError.invalidArgs("invalid object path '\(path)'") }
        guard BusNames.isValidInterfaceName(interface) else { throw BusError.invalidArgs("invalid interface name '\(interface)'") }
        guard BusNames.isValidMemberName(member) else { throw BusError.invalidArgs("invalid member name '\(member)'") }
        guard let m = dbus_message_new_signal(path, interface, member) else { throw BusError.outOfMemory }
        return BusMessage(owning: m)
    }

    /// A method return for this method call.
    public func makeReturn() throws -> BusMessage {
        try checkReceived()
        guard let m = dbus_message_new_method_return(raw) else { throw BusError.outOfMemory }
        return BusMessage(owning: m)
    }

    /// An error reply for this method call. An invalid error name becomes
    /// `org.freedesktop.DBus.Error.Failed` rather than aborting in libdbus.
    public func makeError(name: String, message: String) throws -> BusMessage {
        try checkReceived()
        let safeName = BusNames.isValidErrorName(name) ? name : StandardErrors.failed
        let safeMessage = String(message.unicodeScalars.filter { $0 != "\0" })
        guard let m = dbus_message_new_error(raw, safeName, safeMessage) else { throw BusError.outOfMemory }
        return BusMessage(owning: m)
    }

    /// libdbus aborts when asked to reply to a message that has no serial yet
    /// (one built here and never sent).
    func checkReceived() throws {
        guard serial != 0 else { throw BusError(name: StandardErrors.failed, message: "cannot reply to a message that was never sent") }
    }

    // MARK: Header

    public var type: MessageType { MessageType(rawValue: dbus_message_get_type(raw)) ?? .invalid }
    public var path: String? { dbus_message_get_path(raw).map { String(cString: $0) } }
    public var interface: String? { dbus_message_get_interface(raw).map { String(cString: $0) } }
    public var member: String? { dbus_message_get_member(raw).map { String(cString: $0) } }
    public var sender: String? { dbus_message_get_sender(raw).map { String(cString: $0) } }
    public var destination: String? { dbus_message_get_destination(raw).map { String(cString: $0) } }

    /// Addresses the message to one connection (a signal so addressed is delivered to
    /// it alone, whatever match rules say). An invalid bus name is refused.
    public func setDestination(_ name: String) throws {
        guard BusNames.isValidBusName(name) else { throw BusError.invalidArgs("invalid bus name '\(name)'") }
        guard dbus_message_set_destination(raw, name) != 0 else { throw BusError.outOfMemory }
    }
    public var errorName: String? { dbus_message_get_error_name(raw).map { String(cString: $0) } }
    public var signature: String { dbus_message_get_signature(raw).map { String(cString: $0) } ?? "" }
    public var serial: UInt32 { dbus_message_get_serial(raw) }
    public var replySerial: UInt32 { dbus_message_get_reply_serial(raw) }
    /// Whether the sender wants no reply (a call whose answer would only be dropped).
    public var noReplyExpected: Bool {
        get { dbus_message_get_no_reply(raw) != 0 }
        set { dbus_message_set_no_reply(raw, newValue ? 1 : 0) }
    }

    /// Whether the bus may start the destination service for this call (default true).
    public var autoStart: Bool {
        get { dbus_message_get_auto_start(raw) != 0 }
        set { dbus_message_set_auto_start(raw, newValue ? 1 : 0) }
    }

    // MARK: Arguments

    /// Appends values to the body, in order. Checks every value first
    /// (`WireWriter`), so that a bad value throws instead of tripping libdbus's
    /// assertions, and so that a body over the protocol's size limits throws
    /// `LimitsExceeded` (`WireLimits`) instead of getting the sender disconnected by
    /// the bus.
    public func append(_ values: [DBusValue]) throws {
        var measure = WireWriter(storing: false)
        try measure.append(values)
        // libdbus writes a body signature over 255 characters or nested too deeply
        // without complaint, and the bus then disconnects us for the invalid message.
        let whole = signature + values.map(\.signature).joined()
        guard BusNames.isValidSignature(whole) else {
            throw BusError.invalidArgs("the body's signature would be '\(whole)': over 255 characters or nested too deeply")
        }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(raw, &iter)
        for v in values { try Marshal.write(v, into: &iter) }
    }

    public func append(_ values: DBusValue...) throws { try append(values) }

    /// The body's values. File descriptors (`h`) in them are new duplicates, owned
    /// by the caller, on every call.
    public func arguments() throws -> [DBusValue] {
        // What libdbus accepted but the reader cannot take (an `h` without
        // descriptors) gets libdbus's own reading, and its errors.
        if let values = try? argumentsFromBytes() { return values }
        return try argumentsFromIterators()
    }

    /// The length of the body as sent (nil when it cannot be told).
    var bodyLength: Int? {
        try? withMarshalledBytes { try WireReader.bodyRange(ofMessage: $0).length }
    }

    /// The body's values, as `arguments()`; a body over `maxBodyBytes` answers
    /// `errorName` before any value is read (its descriptors are left to libdbus, which
    /// closes them with the message).
    public func arguments(maxBodyBytes: Int, errorName: String) throws -> [DBusValue] {
        let hasDescriptors = dbus_message_contains_unix_fds(raw) != 0
        let signature = self.signature
        let fromBytes: [DBusValue]? = try withMarshalledBytes { bytes in
            guard let (_, length) = try? WireReader.bodyRange(ofMessage: bytes) else { return nil }
            guard length <= maxBodyBytes else { throw BusError.callTooLarge(length, limit: maxBodyBytes, name: errorName) }
            return hasDescriptors ? nil : try? WireReader.values(ofMessage: bytes, signature: signature)
        }
        return try fromBytes ?? argumentsFromIterators()
    }

    /// The body's values read through libdbus's iterators (which hand out descriptors).
    func argumentsFromIterators() throws -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return [] }
        return try Marshal.readAll(&iter)
    }

    /// For error replies: the error with its message (the first string argument).
    public func asError() -> BusError {
        let args = (try? arguments()) ?? []
        DBusValue.closeUnixFDs(in: args)
        let message = args.first?.string
        return BusError(name: errorName ?? StandardErrors.failed, message: message ?? "")
    }
}

extension BusError {
    static let outOfMemory = BusError(name: StandardErrors.noMemory, message: "out of memory")
}
