import DBus
import FerryInterface

/// A call's input arguments, read by their declaration (`FerryInterface`'s `BusMethod`
/// inputs), not by position. The bus checked them against the method's input
/// signature before the handler runs (a wrong type is refused there with
/// `org.freedesktop.DBus.Error.InvalidArgs`), so each reader finds its type.
struct CallArguments {
    let method: BusMethod
    let values: [DBusValue]

    init(_ method: BusMethod, _ values: [DBusValue]) {
        self.method = method
        self.values = values
    }

    init(_ method: BusMethod, of inv: MethodInvocation) {
        self.init(method, inv.arguments)
    }

    /// The value of `argument`, one of the method's inputs.
    func value(_ argument: BusArgument) -> DBusValue {
        let i = method.position(of: argument)
        // Checked by the bus already; an empty string keeps a bug from trapping.
        return i < values.count ? values[i] : .string("")
    }

    func string(_ argument: BusArgument) -> String { value(argument).string ?? "" }
    func bool(_ argument: BusArgument) -> Bool { value(argument).bool ?? false }
    func uint32(_ argument: BusArgument) -> UInt32 { value(argument).uint32 ?? 0 }
    func uint64(_ argument: BusArgument) -> UInt64 { value(argument).uint64 ?? 0 }
    func bytes(_ argument: BusArgument) -> [UInt8] { value(argument).bytes ?? [] }
}

extension FerryBusService {
    typealias MethodHandler = @Sendable (MethodInvocation, CallArguments) -> Void

    /// An interface's methods as the contract declares them (`FerryInterface`), each
    /// with its handler, which reads its arguments through `CallArguments`.
    static func methodSpecs(_ declared: [BusMethod], handlers: [BusMethod: MethodHandler]) -> [MethodSpec] {
        declared.map { m in
            guard let handle = handlers[m] else { preconditionFailure("no handler for \(m.interface).\(m.name)") }
            return MethodSpec(m.name, in: m.inputs.map(ArgSpec.init), out: m.outputs.map(ArgSpec.init)) { inv in
                handle(inv, CallArguments(m, of: inv))
            }
        }
    }

    /// An interface's signals as the contract declares them.
    static func signalSpecs(_ declared: [BusSignal]) -> [SignalSpec] {
        declared.map { SignalSpec($0.name, $0.arguments.map(ArgSpec.init)) }
    }
}

extension ArgSpec {
    init(_ argument: BusArgument) {
        self.init(argument.name, argument.signature)
    }
}
