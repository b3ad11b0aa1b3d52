import CDBus

func dbus_connection_send_if_open(_ c: BusConnection, _ m: BusMessage) {
    if dbus_connection_get_is_connected(c.raw) != 0 {
        dbus_connection_send(c.raw, m.raw, nil)
    }
}

extension BusConnection {
    /// Answers a method call to one of our objects, or to a standard interface.
    /// On the queue.
    func dispatchMethodCall(_ m: BusMessage, caller: (any Sendable)? = nil) {
        guard let path = m.path, let member = m.member else { return }
        let iface = m.interface

        func fail(_ name: String, _ message: String) {
            guard !m.noReplyExpected, let e = try? m.makeError(name: name, message: message) else { return }
            sendOnQueue(e)
        }
        func reply(_ values: [DBusValue]) {
            reply { try m.makeReturn(values) }
        }
        func reply(_ make: () throws -> BusMessage) {
            guard !m.noReplyExpected else { return }
            do {
                sendOnQueue(try make())
            } catch let e as BusError where e.name == StandardErrors.limitsExceeded {
                let answer = tooLarge("the reply to \(iface ?? "").\(member) on \(path)", e)
                fail(answer.name, answer.message)
            } catch {
                fail(StandardErrors.failed, "could not build the reply: \(error)")
            }
        }
        func args(_ signature: String) -> [DBusValue]? {
            guard m.signature == signature else {
                fail(StandardErrors.invalidArgs, "\(iface ?? "").\(member) takes arguments of type '\(signature)', not '\(m.signature)'")
                return nil
            }
            do {
                guard let limit = callBodyLimit else { return try m.arguments() }
                return try m.arguments(maxBodyBytes: limit.bytes, errorName: limit.errorName)
            } catch let e as BusError {
                fail(e.name, e.message)
                return nil
            } catch {
                fail(StandardErrors.invalidArgs, "\(error)")
                return nil
            }
        }

        let object = objects[path]
        func failMissing() {
            if let m = missingObjectErrors.first(where: { path.hasPrefix($0.prefix) }) {
                fail(m.errorName, "there is no \(m.noun) at \(path) (it never existed, or it was closed or removed)")
            } else {
                fail(StandardErrors.unknownObject, "no object at \(path)")
            }
        }
        // A caller the gate keeps away from this path gets the gate's error, for every
        // interface (its properties and introspection data too).
        if let refusal = gateRefusal(caller, path: path, object: object, interface: iface, member: member) {
            return fail(refusal.name, refusal.message)
        }
        /// Objects this caller may see (all, without a gate).
        func visible(_ o: ExportedObject) -> Bool {
            gateRefusal(caller, path: o.path, object: o, interface: nil, member: "GetManagedObjects") == nil
        }

        // org.freedesktop.DBus.Introspectable, for every path (objects and their parents).
        if member == "Introspect" && (iface == StandardNames.introspectable || (iface == nil && object?.interfaces.contains { $0.method("Introspect") != nil } != true)) {
            guard args("") != nil else { return }
            let children = childNodes(of: path, where: { path in objects[path].map(visible) ?? true })
            guard object != nil || !children.isEmpty || path == "/" else {
                failMissing()
                return
            }
            reply([.string(Introspection.xml(object: object, children: children, isObjectManager: objectManagerPaths.contains(path)))])
            return
        }

        guard let object else {
            failMissing()
            return
        }

        if iface == StandardNames.properties {
            handleProperties(m, member: member, object: object, args: args, reply: reply, fail: fail)
            return
        }
        if iface == StandardNames.objectManager, objectManagerPaths.contains(path) {
            guard member == "GetManagedObjects" else { return fail(StandardErrors.unknownMethod, "no method \(member) on \(StandardNames.objectManager)") }
            guard args("") != nil else { return }
            let prefix = path == "/" ? "/" : path + "/"
            let managed = objects.values.filter { $0.path.hasPrefix(prefix) && $0.path != path && visible($0) }
                .sorted { $0.path < $1.path }
            reply {
                do {
                    return try m.makeReturn(signature: "a{oa{sa{sv}}}") { body in
                        try body.array(of: "{oa{sa{sv}}}") { objects in
                            for o in managed {
                                try objects.dictEntry { entry in
                                    try entry.value(.objectPath(o.path))
                                    try o.writeInterfacesAndProperties(into: &entry)
                                }
                            }
                        }
                    }
                } catch is WireWriter.HoldsDescriptor {
                    return try m.makeReturn([.dictionary(key: "o", value: "a{sa{sv}}",
                                                         managed.map { .init(.objectPath($0.path), $0.interfacesAndProperties()) })])
                }
            }
            return
        }

        let method: MethodSpec?
        if let iface {
            guard let spec = object.interface(iface) else {
                return fail(StandardErrors.unknownInterface, "\(path) has no interface \(iface)")
            }
            method = spec.method(member)
        } else {
            method = object.interfaces.lazy.compactMap { $0.method(member) }.first
        }
        guard let method else {
            return fail(StandardErrors.unknownMethod, "\(path) has no method \(iface.map { $0 + "." } ?? "")\(member)")
        }
        guard let values = args(method.inSignature) else { return }
        let interfaceName = iface ?? object.interfaces.first { $0.method(member) != nil }!.name
        method.handler(MethodInvocation(call: m, arguments: values, path: path, interface: interfaceName, member: member,
                                        connection: self, caller: caller))
    }

    private func handleProperties(_ m: BusMessage, member: String, object: ExportedObject,
                                  args: (String) -> [DBusValue]?, reply: ([DBusValue]) -> Void,
                                  fail: (String, String) -> Void) {
        switch member {
        case "Get":
            guard let a = args("ss"), let iname = a[0].string, let pname = a[1].string else { return }
            guard let spec = object.interface(iname) else { return fail(StandardErrors.unknownInterface, "\(object.path) has no interface \(iname)") }
            guard spec.property(pname) != nil, let v = object.property(iname, pname) else {
                return fail(StandardErrors.unknownProperty, "\(iname) has no property \(pname)")
            }
            reply([.variant(v)])
        case "GetAll":
            guard let a = args("s"), let iname = a[0].string else { return }
            if let spec = object.interface(iname) {
                reply([object.allProperties(spec)])
            } else if [StandardNames.introspectable, StandardNames.properties, StandardNames.peer, StandardNames.objectManager].contains(iname) {
                reply([.vardict([:])])
            } else {
                fail(StandardErrors.unknownInterface, "\(object.path) has no interface \(iname)")
            }
        case "Set":
            guard let a = args("ssv") else { return }
            // No property here is of a type that holds a descriptor: close any sent.
            defer { DBusValue.closeUnixFDs(in: a) }
            guard let iname = a[0].string, let pname = a[1].string else { return }
            guard let spec = object.interface(iname) else { return fail(StandardErrors.unknownInterface, "\(object.path) has no interface \(iname)") }
            guard let p = spec.property(pname) else { return fail(StandardErrors.unknownProperty, "\(iname) has no property \(pname)") }
            guard p.access == .readwrite, p.setter != nil || p.objectSetter != nil else {
                return fail(StandardErrors.propertyReadOnly, "\(iname).\(pname) is read-only")
            }
            // Exactly one level: a property of type `v` holds a variant itself.
            guard case .variant(let value) = a[2] else { return }
            guard value.signature == p.type else {
                return fail(StandardErrors.invalidArgs, "\(iname).\(pname) is of type '\(p.type)', not '\(value.signature)'")
            }
            if let objectSetter = p.objectSetter {
                objectSetter(value, object.path) { [self, object] error in
                    queue.async { [self] in
                        if error == nil, objects[object.path] === object { object.setProperties(iname, [pname: value]) }
                        answer(m, error: error)
                    }
                }
                return
            }
            do {
                try p.setter?(value)
            } catch let e as BusError {
                return fail(e.name, e.message)
            } catch {
                return fail(StandardErrors.failed, "\(error)")
            }
            object.setProperties(iname, [pname: value])
            reply([])
        default:
            fail(StandardErrors.unknownMethod, "no method \(member) on \(StandardNames.properties)")
        }
    }

    /// Answers a method call later (on the queue): an empty return, or the error.
    func answer(_ m: BusMessage, error: BusError?) {
        guard !m.noReplyExpected else { return }
        let reply = error.map { try? m.makeError(name: $0.name, message: $0.message) } ?? (try? m.makeReturn())
        if let reply { sendOnQueue(reply) }
    }

    /// Names of the nodes directly below `path` that lead to exported objects.
    func childNodes(of path: String, where shown: (String) -> Bool = { _ in true }) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        for p in objects.keys where p.hasPrefix(prefix) && p != path && shown(p) {
            let rest = p.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted { a, b in
            // Numeric ids in numeric order.
            if let x = Int(a), let y = Int(b) { return x < y }
            return a < b
        }
    }
}
