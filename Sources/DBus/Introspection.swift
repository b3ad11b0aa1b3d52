/// Builds introspection XML from interface specs.
public enum Introspection {
    public static let doctype = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        """

    /// The XML of one interface, as it appears inside `<node>`.
    public static func xml(_ i: InterfaceSpec, indent: String = "  ") -> String {
        var out = "\(indent)<interface name=\"\(escape(i.name))\">\n"
        for m in i.methods {
            if m.inArgs.isEmpty && m.outArgs.isEmpty {
                out += "\(indent)  <method name=\"\(escape(m.name))\"/>\n"
                continue
            }
            out += "\(indent)  <method name=\"\(escape(m.name))\">\n"
            for a in m.inArgs { out += "\(indent)    <arg name=\"\(escape(a.name))\" type=\"\(escape(a.type))\" direction=\"in\"/>\n" }
            for a in m.outArgs { out += "\(indent)    <arg name=\"\(escape(a.name))\" type=\"\(escape(a.type))\" direction=\"out\"/>\n" }
            out += "\(indent)  </method>\n"
        }
        for s in i.signals {
            if s.args.isEmpty {
                out += "\(indent)  <signal name=\"\(escape(s.name))\"/>\n"
                continue
            }
            out += "\(indent)  <signal name=\"\(escape(s.name))\">\n"
            for a in s.args { out += "\(indent)    <arg name=\"\(escape(a.name))\" type=\"\(escape(a.type))\"/>\n" }
            out += "\(indent)  </signal>\n"
        }
        for p in i.properties {
            let head = "\(indent)  <property name=\"\(escape(p.name))\" type=\"\(escape(p.type))\" access=\"\(p.access.rawValue)\""
            if p.emitsChange {
                out += head + "/>\n"
            } else {
                let value = p.isConstant ? "const" : "false"
                out += head + ">\n\(indent)    <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(value)\"/>\n\(indent)  </property>\n"
            }
        }
        out += "\(indent)</interface>\n"
        return out
    }

    static func xml(object: ExportedObject?, children: [String], isObjectManager: Bool) -> String {
        var out = doctype + "\n<node>\n"
        out += standardInterfaces(properties: object != nil, objectManager: isObjectManager && object != nil)
        for i in object?.interfaces ?? [] { out += xml(i) }
        for c in children { out += "  <node name=\"\(escape(c))\"/>\n" }
        out += "</node>\n"
        return out
    }

    static func standardInterfaces(properties: Bool, objectManager: Bool) -> String {
        var out = """
              <interface name="org.freedesktop.DBus.Introspectable">
                <method name="Introspect">
                  <arg name="xml_data" type="s" direction="out"/>
                </method>
              </interface>
              <interface name="org.freedesktop.DBus.Peer">
                <method name="Ping"/>
                <method name="GetMachineId">
                  <arg name="machine_uuid" type="s" direction="out"/>
                </method>
              </interface>

            """
        if properties {
            out += """
                  <interface name="org.freedesktop.DBus.Properties">
                    <method name="Get">
                      <arg name="interface_name" type="s" direction="in"/>
                      <arg name="property_name" type="s" direction="in"/>
                      <arg name="value" type="v" direction="out"/>
                    </method>
                    <method name="GetAll">
                      <arg name="interface_name" type="s" direction="in"/>
                      <arg name="properties" type="a{sv}" direction="out"/>
                    </method>
                    <method name="Set">
                      <arg name="interface_name" type="s" direction="in"/>
                      <arg name="property_name" type="s" direction="in"/>
                      <arg name="value" type="v" direction="in"/>
                    </method>
                    <signal name="PropertiesChanged">
                      <arg name="interface_name" type="s"/>
                      <arg name="changed_properties" type="a{sv}"/>
                      <arg name="invalidated_properties" type="as"/>
                    </signal>
                  </interface>

                """
        }
        if objectManager {
            out += """
                  <interface name="org.freedesktop.DBus.ObjectManager">
                    <method name="GetManagedObjects">
                      <arg name="objects" type="a{oa{sa{sv}}}" direction="out"/>
                    </method>
                    <signal name="InterfacesAdded">
                      <arg name="object" type="o"/>
                      <arg name="interfaces" type="a{sa{sv}}"/>
                    </signal>
                    <signal name="InterfacesRemoved">
                      <arg name="object" type="o"/>
                      <arg name="interfaces" type="as"/>
                    </signal>
                  </interface>

                """
        }
        return out
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}
