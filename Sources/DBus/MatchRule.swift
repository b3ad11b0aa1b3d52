/// A match rule for signals, both as the text the bus takes and as a local test.
public struct MatchRule: Hashable, Sendable {
    public var sender: String?
    public var path: String?
    /// Matches the path and everything below it.
    public var pathNamespace: String?
    public var interface: String?
    public var member: String?
    /// The first argument, when it is a string.
    public var arg0: String?

    public init(sender: String? = nil, path: String? = nil, pathNamespace: String? = nil,
                interface: String? = nil, member: String? = nil, arg0: String? = nil) {
        self.arg0 = arg0
        self.sender = sender
        self.path = path
        self.pathNamespace = pathNamespace
        self.interface = interface
        self.member = member
    }

    /// The rule as `AddMatch` takes it.
    public var text: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            parts.append("\(key)='\(value.replacingOccurrences(of: "'", with: "'\\''"))'")
        }
        add("sender", sender)
        add("path", path)
        add("path_namespace", pathNamespace)
        add("interface", interface)
        add("member", member)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    /// Whether the rule names `sender` as the sender: its unique name, or a well-known
    /// name `answeredFor` says it owns (for signals addressed to us, which the bus
    /// does not check against our rules). A rule without a sender names no one.
    func isFrom(_ sender: String, answeredFor: [String: String]) -> Bool {
        guard let name = self.sender else { return false }
        return name == sender || answeredFor[name] == sender
    }

    /// Local matching. A well-known `sender` is left to the bus (which resolves it, for
    /// the broadcasts it routes by our rules; `BusConnection` drops signals addressed
    /// to us by peers); a unique name (`:1.5`) and the bus's own name are compared here.
    public func matches(_ m: BusMessage) -> Bool {
        guard m.type == .signal else { return false }
        if let sender, sender.hasPrefix(":") || sender == StandardNames.bus, m.sender != sender { return false }
        if let path, m.path != path { return false }
        if let ns = pathNamespace {
            guard let p = m.path else { return false }
            if !(ns == "/" || p == ns || p.hasPrefix(ns + "/")) { return false }
        }
        if let interface, m.interface != interface { return false }
        if let member, m.member != member { return false }
        if let arg0 {
            let args = (try? m.arguments()) ?? []
            DBusValue.closeUnixFDs(in: args) // only looked at here
            if args.first?.string != arg0 { return false }
        }
        return true
    }
}
