/// One argument of a method or signal.
public struct ArgSpec: Sendable, Equatable {
    public var name: String
    public var type: String
    public init(_ name: String, _ type: String) {
        self.name = name
        self.type = type
    }
}

/// A method of an exported interface. The handler runs on the connection's queue;
/// it must answer the invocation exactly once (now or later, from any thread).
/// Arguments have already been checked against `inArgs`.
public struct MethodSpec: Sendable {
    public var name: String
    public var inArgs: [ArgSpec]
    public var outArgs: [ArgSpec]
    public var handler: @Sendable (MethodInvocation) -> Void
    public init(_ name: String, in inArgs: [ArgSpec] = [], out outArgs: [ArgSpec] = [],
                handler: @escaping @Sendable (MethodInvocation) -> Void) {
        self.name = name
        self.inArgs = inArgs
        self.outArgs = outArgs
        self.handler = handler
    }
    public var inSignature: String { inArgs.map(\.type).joined() }
}

public enum PropertyAccess: String, Sendable { case read, readwrite }

/// A property. Values live in the `ExportedObject`; a writable property's setter
/// (on the queue) validates the new value and throws a `BusError` to refuse it;
/// when it returns, the value is stored and `PropertiesChanged` is sent.
public struct PropertySpec: Sendable {
    public var name: String
    public var type: String
    public var access: PropertyAccess
    /// false = `org.freedesktop.DBus.Property.EmitsChangedSignal` "false".
    public var emitsChange: Bool
    /// The value never changes while the object lives: `EmitsChangedSignal` "const"
    /// (and no `PropertiesChanged`, as with `emitsChange` false).
    public var isConstant = false
    public var setter: (@Sendable (DBusValue) throws -> Void)?
    /// An asynchronous setter, told the path of the object being written (for
    /// specs shared by many objects). It answers through `done` — nil to accept,
    /// an error to refuse — from any thread; the `Set` call is answered then, and
    /// the connection's queue is free meanwhile.
    public var objectSetter: (@Sendable (DBusValue, String, @escaping @Sendable (BusError?) -> Void) -> Void)?

    public init(_ name: String, _ type: String, access: PropertyAccess = .readwrite,
                objectSetter: @escaping @Sendable (DBusValue, String, @escaping @Sendable (BusError?) -> Void) -> Void) {
        self.name = name
        self.type = type
        self.access = access
        self.emitsChange = true
        self.objectSetter = objectSetter
    }

    public init(_ name: String, _ type: String, access: PropertyAccess = .read, emitsChange: Bool = true,
                setter: (@Sendable (DBusValue) throws -> Void)? = nil) {
        self.name = name
        self.type = type
        self.access = access
        self.emitsChange = emitsChange
        self.setter = setter
    }
}

public struct SignalSpec: Sendable, Equatable {
    public var name: String
    public var args: [ArgSpec]
    public init(_ name: String, _ args: [ArgSpec] = []) {
        self.name = name
        self.args = args
    }
}

/// An interface an object exports.
public struct InterfaceSpec: Sendable {
    public var name: String
    public var methods: [MethodSpec]
    public var properties: [PropertySpec] {
        didSet {
            propertyOrder = Self.order(properties)
            propertyIndex = Self.index(properties)
            propertyEntryHeads = properties.map(Self.entryHead)
        }
    }
    public var signals: [SignalSpec]
    /// Indices of `properties` sorted by name: GetAll and GetManagedObjects list them
    /// in this order without sorting per object.
    private(set) var propertyOrder: [Int]
    /// Each property's index in `properties` by name: every change of an object's
    /// properties looks each one up.
    private(set) var propertyIndex: [String: Int]
    /// Per property, the start of its `{sv}` entry as written in `GetAll` and
    /// `GetManagedObjects`: the name, then the variant's signature (the property's
    /// type). The same bytes for every object (an entry starts 8-aligned); nil for a
    /// name or type the wire cannot carry, which takes the checked way.
    private(set) var propertyEntryHeads: [[UInt8]?]
    public init(name: String, methods: [MethodSpec] = [], properties: [PropertySpec] = [], signals: [SignalSpec] = []) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
        propertyOrder = Self.order(properties)
        propertyIndex = Self.index(properties)
        propertyEntryHeads = properties.map(Self.entryHead)
    }
    private static func entryHead(_ p: PropertySpec) -> [UInt8]? {
        let name = Array(p.name.utf8), type = Array(p.type.utf8)
        guard !name.contains(0), type.count <= 255, BusNames.isValidSingleType(p.type) else { return nil }
        var head = withUnsafeBytes(of: UInt32(name.count).littleEndian, Array.init)
        head += name + [0, UInt8(type.count)] + type + [0]
        return head
    }
    private static func index(_ properties: [PropertySpec]) -> [String: Int] {
        // The first of a name wins, as a search from the front found it.
        Dictionary(properties.enumerated().map { ($1.name, $0) }, uniquingKeysWith: { first, _ in first })
    }
    private static func order(_ properties: [PropertySpec]) -> [Int] {
        properties.indices.sorted { properties[$0].name < properties[$1].name }
    }
    func method(_ name: String) -> MethodSpec? { methods.first { $0.name == name } }
    public func property(_ name: String) -> PropertySpec? { propertyIndex[name].map { properties[$0] } }
}
