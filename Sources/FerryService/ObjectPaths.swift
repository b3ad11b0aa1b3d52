import FerryCore

/// Names of the bus API (the contract's "Names" table).
public enum FerryBusNames {
    public static let busName = "org.ferry.Ferry1"
    public static let managerPath = "/org/ferry/Ferry1"
    public static let managerInterface = "org.ferry.Ferry1.Manager"
    public static let sessionInterface = "org.ferry.Ferry1.Session"
    public static let transferInterface = "org.ferry.Ferry1.Transfer"

    public static func sessionPath(_ id: SessionID) -> String { "\(managerPath)/session/\(id)" }
    public static func transferPath(_ id: TransferID) -> String { "\(managerPath)/transfer/\(id)" }

    /// The id in a session or transfer path, or nil when the path is not one.
    public static func id(inPath path: String, kind: String) -> UInt64? {
        let prefix = "\(managerPath)/\(kind)/"
        guard path.hasPrefix(prefix) else { return nil }
        let rest = path.dropFirst(prefix.count)
        guard !rest.isEmpty, rest.allSatisfy(\.isNumber) else { return nil }
        return UInt64(rest)
    }
}
