import DBus
import FerryCore
import FerryInterface

/// `Manager.ListTransferProperties`: every transfer the caller may see, with the
/// properties asked for, one array per property (a listing of 10,000 transfers in one
/// reply about a third the size of `GetManagedObjects`', and far fewer values to check).
extension FerryBusService {
    /// The most names one call may ask for (more than the interface has, so a client
    /// may repeat some; each name is refused past it).
    static let listedPropertyNames = 64

    func listTransferProperties(_ inv: MethodInvocation, _ args: CallArguments) {
        let spec = specs.transfer
        let names: [String]
        do {
            let asked = args.value(FerryInterface.ManagerMethod.properties).arrayElements?.compactMap(\.string) ?? []
            names = try Self.listedProperties(asked, of: spec)
        } catch {
            return answer(inv, .failure(error))
        }
        // The transfers as ListTransfers gives them (the caller's own when sandboxed),
        // taken on the core's queue after the grouped calls (downloads, calls on transfers)
        // sent before this one; their values read on the bus's queue, from the objects as
        // exported there by then.
        pipelinedCalls.close()
        core.queue.async { [self] in
            do {
                let paths = try visibleTransfers(inv, core).map(FerryInterface.transferPath)
                inv.replyWithPropertyColumns(paths: paths, interface: spec, properties: names)
            } catch {
                answer(inv, .failure(error))
            }
        }
    }

    /// The property names asked for, each once, in the order first asked; empty for all.
    static func listedProperties(_ asked: [String], of spec: InterfaceSpec) throws -> [String] {
        guard asked.count <= listedPropertyNames else {
            throw CoreError.limitExceeded("\(asked.count) property names were given; at most \(listedPropertyNames) are allowed")
        }
        var seen: Set<String> = []
        var names: [String] = []
        for name in asked {
            guard spec.property(name) != nil else {
                // Quoted only when it could be a property's name (ASCII letters and digits):
                // no look-alike letters, controls or overrides reach the message.
                let plain = name.unicodeScalars.allSatisfy { ("0"..."9").contains($0) || ("A"..."Z").contains($0) || ("a"..."z").contains($0) }
                let shown = plain && !name.isEmpty && name.utf8.count <= 64 ? "'\(name)'" : "of \(name.utf8.count) bytes"
                throw CoreError.invalidArgument("\(FerryInterface.transferInterface) has no property \(shown)")
            }
            if seen.insert(name).inserted { names.append(name) }
        }
        return names
    }
}
