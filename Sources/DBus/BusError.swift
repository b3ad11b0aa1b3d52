import CDBus

/// A named D-Bus error: what a method call failed with, or what went wrong locally.
public struct BusError: Error, Equatable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { "\(name): \(message)" }

    static func invalidArgs(_ message: String) -> BusError {
        BusError(name: StandardErrors.invalidArgs, message: message)
    }

    /// A method call whose arguments take more bytes than a call may (`limitCallArguments`).
    static func callTooLarge(_ length: Int, limit: Int, name: String) -> BusError {
        BusError(name: name, message: "the call's arguments take \(length) bytes; at most \(limit) are taken")
    }

    /// Takes a libdbus `DBusError` that is set, and frees it.
    init(consuming error: inout CDBus.DBusError) {
        name = error.name.map { String(cString: $0) } ?? StandardErrors.failed
        message = error.message.map { String(cString: $0) } ?? ""
        dbus_error_free(&error)
    }
}
