/// Properties of many objects in one reply, laid out by property rather than by object.
///
/// A `GetManagedObjects` reply names every property of every object and wraps each
/// value in a variant of its own: for 10,000 objects of 22 properties, 220,000 names
/// and variant signatures, each checked by libdbus three times (in the sender, the bus
/// and the receiver). Here each property is one array holding that property of every
/// object, in the order of the objects: one name and one variant per property, and the
/// numbers as arrays of fixed-size values.
extension MethodInvocation {
    /// Answers with `(ao objects, a{sv} columns)`: the objects at `paths` (in that order)
    /// that exist, have `interface`, and that the caller may see as it would in
    /// `GetManagedObjects`; and for each of `properties` (names of `spec`'s properties,
    /// all of them in name order when empty; names it lacks are left out) an array of
    /// that property's type holding its value on each of those objects, in the same
    /// order. A reply over the bus's limits answers as the connection's oversize error.
    /// From any thread.
    public func replyWithPropertyColumns(paths: [String], interface spec: InterfaceSpec, properties: [String]) {
        let connection = self.connection
        connection.queue.async { [self] in
            var objects: [ExportedObject] = []
            objects.reserveCapacity(paths.count)
            for path in paths {
                guard let o = connection.objects[path], o.interface(spec.name) != nil,
                      connection.gateRefusal(caller, path: path, object: o, interface: nil, member: "GetManagedObjects") == nil
                else { continue }
                objects.append(o)
            }
            let wanted = (properties.isEmpty ? spec.propertyOrder : properties.compactMap { spec.propertyIndex[$0] }).map { spec.properties[$0] }
            replyBuilt {
                let columns = try Self.columns(of: objects, interface: spec, properties: wanted)
                return try call.makeReturn(signature: "aoa{sv}") { body in
                    try body.array(of: "o") { w in
                        for o in objects { try w.value(.objectPath(o.path)) }
                    }
                    try body.array(of: "{sv}") { w in
                        for (c, property) in wanted.enumerated() {
                            try w.dictEntry { w in
                                try w.value(.string(property.name))
                                try w.variant(signature: "a" + property.type) { w in
                                    try w.array(of: property.type) { w in
                                        for v in columns[c] { try w.value(v) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// `properties` (of `spec`) of each object, one array per property, in the order of
    /// `objects`. Read object by object: reading each object once keeps ten thousand
    /// objects' values from leaving the cache between one column and the next (reading
    /// them column by column took twice as long). Throws when an object lacks a value of
    /// the property's type (the arrays must line up).
    static func columns(of objects: [ExportedObject], interface spec: InterfaceSpec, properties: [PropertySpec]) throws -> [[DBusValue]] {
        // Where each property is in `spec` (nil: not one of its properties; such a
        // property is then looked up by name in each object).
        let indices = properties.map { spec.propertyIndex[$0.name] }
        var columns = [[DBusValue]](repeating: [], count: properties.count)
        for c in columns.indices { columns[c].reserveCapacity(objects.count) }
        for o in objects {
            guard let i = o.interfaces.firstIndex(where: { $0.name == spec.name }) else {
                throw BusError(name: StandardErrors.failed, message: "\(o.path) has no interface \(spec.name)")
            }
            // Objects of one spec are laid out alike: a property's value is at its index.
            let sameLayout = o.interfaces[i].properties.elementsEqual(spec.properties) { $0.name == $1.name }
            for (c, property) in properties.enumerated() {
                let found = sameLayout ? indices[c].flatMap { o.value(i, $0) } : o.property(spec.name, property.name)
                guard let v = found, v.hasSignature(property.type[...]) else {
                    throw BusError(name: StandardErrors.failed,
                                   message: "\(o.path) holds no \(property.type) value of \(spec.name).\(property.name)")
                }
                columns[c].append(v)
            }
        }
        return columns
    }
}
