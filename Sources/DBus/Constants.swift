import CDBus

// libdbus's DBUS_TYPE_* and friends are macros with casts, which Swift does not
// import; they are spelled out here once.
enum TypeCode {
    static let invalid: Int32 = 0
    static let byte = Int32(UInt8(ascii: "y"))
    static let boolean = Int32(UInt8(ascii: "b"))
    static let int16 = Int32(UInt8(ascii: "n"))
    static let uint16 = Int32(UInt8(ascii: "q"))
    static let int32 = Int32(UInt8(ascii: "i"))
    static let uint32 = Int32(UInt8(ascii: "u"))
    static let int64 = Int32(UInt8(ascii: "x"))
    static let uint64 = Int32(UInt8(ascii: "t"))
    static let double = Int32(UInt8(ascii: "d"))
    static let string = Int32(UInt8(ascii: "s"))
    static let objectPath = Int32(UInt8(ascii: "o"))
    static let signature = Int32(UInt8(ascii: "g"))
    static let unixFD = Int32(UInt8(ascii: "h"))
    static let array = Int32(UInt8(ascii: "a"))
    static let variant = Int32(UInt8(ascii: "v"))
    static let structure = Int32(UInt8(ascii: "r"))
    static let dictEntry = Int32(UInt8(ascii: "e"))
}

/// The four kinds of D-Bus message.
public enum MessageType: Int32, Sendable {
    case invalid = 0, methodCall = 1, methodReturn = 2, error = 3, signal = 4
}

/// Well-known names of the bus and of the standard interfaces.
public enum StandardNames {
    public static let bus = "org.freedesktop.DBus"
    public static let busPath = "/org/freedesktop/DBus"
    public static let introspectable = "org.freedesktop.DBus.Introspectable"
    public static let properties = "org.freedesktop.DBus.Properties"
    public static let peer = "org.freedesktop.DBus.Peer"
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    public static let local = "org.freedesktop.DBus.Local"
}

/// Standard error names.
public enum StandardErrors {
    public static let failed = "org.freedesktop.DBus.Error.Failed"
    public static let noReply = "org.freedesktop.DBus.Error.NoReply"
    public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
    public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
    public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
    public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
    public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
    public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
    public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
    public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
    public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
    public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"
    /// A message over the protocol's size limits (see `WireLimits`).
    public static let limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
}
