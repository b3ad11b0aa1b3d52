import Foundation

/// The rules for `OpenSession`'s identifier and configuration keys.
enum SessionValidation {
    static let maxConnectionsPerHost: ClosedRange<UInt32> = Limits.concurrentTransfers
    static let proxySchemes: Set<String> = ["http", "https", "socks5", "socks5h"]

    /// 1-255 characters of `[A-Za-z0-9._-]`.
    static func validateIdentifier(_ identifier: String) throws {
        guard !identifier.isEmpty else {
            throw CoreError.invalidArgument("the session identifier is empty; use a reverse-DNS name such as com.example.App")
        }
        guard identifier.utf8.count <= 255 else {
            throw CoreError.invalidArgument("the session identifier is \(identifier.utf8.count) characters long; at most 255 are allowed")
        }
        let allowed = identifier.unicodeScalars.allSatisfy { c in
            switch c {
            case "a"..."z", "A"..."Z", "0"..."9", ".", "_", "-": return true
            default: return false
            }
        }
        guard allowed else {
            throw CoreError.invalidArgument("session identifier \(identifier.debugDescription) may only hold letters, digits, '.', '_' and '-'")
        }
    }

    /// Checks the keys present in `update`. An empty `directory` or `proxy` means "back
    /// to the default" and is accepted.
    static func validate(_ update: SessionConfigurationUpdate, fileManager: FileManager = .default) throws {
        if let directory = update.directory { try Limits.checkPath(directory, what: "the session directory") }
        if let proxy = update.proxy { try Limits.check(proxy, max: Limits.urlBytes, what: "the proxy URL") }
        if let id = update.applicationID, !id.isEmpty { try validateApplicationID(id) }
        if let directory = update.directory, !directory.isEmpty {
            try FileSystemChecks.requireWritableDirectory(directory, role: "session directory")
        }
        if let headers = update.headers { try HeaderFields.validate(headers) }
        if let n = update.maxConnectionsPerHost, !maxConnectionsPerHost.contains(n) {
            throw CoreError.invalidArgument("max-connections-per-host is \(n); it must be between \(maxConnectionsPerHost.lowerBound) and \(maxConnectionsPerHost.upperBound)")
        }
        if let t = update.requestTimeout { try validateTimeout(t, key: "request-timeout") }
        if let t = update.resourceTimeout { try validateTimeout(t, key: "resource-timeout") }
        if let proxy = update.proxy, !proxy.isEmpty { try validateProxy(proxy) }
    }

    /// Refuses a header sent with the value `"(hidden)"` (as `Configuration` shows every
    /// value) that the session does not hold: there is no real value to keep, and
    /// servers would get the placeholder (a configuration read from another session, or
    /// from one that has gone since).
    static func checkHiddenValues(_ headers: [String: String]?, held: [String: String], identifier: String) throws {
        guard let headers, headers.values.contains(Redaction.hiddenValue) else { return }
        let heldNames = Set(held.keys.map { $0.lowercased() })
        if let name = headers.keys.sorted().first(where: { headers[$0] == Redaction.hiddenValue && !heldNames.contains($0.lowercased()) }) {
            throw CoreError.invalidArgument("header '\(name)' is sent as \"\(Redaction.hiddenValue)\" (how Configuration shows a value), but session '\(identifier)' holds no value for it to keep; give its value")
        }
    }

    /// A desktop application id is a D-Bus well-known name: at most 255 bytes, two or
    /// more dot-separated elements of `[A-Za-z0-9_-]`, none starting with a digit.
    static func validateApplicationID(_ id: String) throws {
        try Limits.check(id, max: Limits.applicationIDBytes, what: "application-id")
        let elements = id.split(separator: ".", omittingEmptySubsequences: false)
        let valid = elements.count >= 2 && elements.allSatisfy { e in
            guard let first = e.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
            return e.unicodeScalars.allSatisfy { c in
                switch c {
                case "a"..."z", "A"..."Z", "0"..."9", "_", "-": return true
                default: return false
                }
            }
        }
        guard valid else {
            let shown = id.count > 80 ? String(id.prefix(80)) + "…" : id
            throw CoreError.invalidArgument("application-id \(shown.debugDescription) is not a desktop application id; give its D-Bus name, such as org.example.App")
        }
    }

    static func validateTimeout(_ value: Double, key: String) throws {
        guard value.isFinite, value > 0 else {
            throw CoreError.invalidArgument("\(key) is \(value); it must be a positive number of seconds")
        }
    }

    static func validateProxy(_ proxy: String) throws {
        let shown = RequestURL.redacted(proxy)
        guard !RequestURL.hasSpaceOrControl(proxy),
              let components = URLComponents(string: proxy), let scheme = components.scheme?.lowercased() else {
            throw CoreError.invalidArgument("proxy '\(shown)' is not a URL; give one such as http://proxy.example:3128 or socks5h://localhost:1080")
        }
        guard proxySchemes.contains(scheme) else {
            throw CoreError.invalidArgument("proxy scheme '\(scheme)' is not supported; use http, https, socks5 or socks5h")
        }
        guard let host = components.host, !host.isEmpty else {
            throw CoreError.invalidArgument("proxy '\(shown)' has no host name")
        }
    }
}

extension SessionConfiguration {
    /// Applies the keys present in `update`; returns whether anything changed.
    mutating func apply(_ update: SessionConfigurationUpdate) -> Bool {
        let before = self
        if let v = update.persistent { persistent = v }
        if let v = update.directory { directory = v.isEmpty ? nil : FileSystemChecks.normalize(v) }
        if let v = update.headers { headers = Self.keepingHiddenValues(v, of: headers) }
        if let v = update.maxConnectionsPerHost { maxConnectionsPerHost = v }
        if let v = update.requestTimeout { requestTimeout = v }
        if let v = update.resourceTimeout { resourceTimeout = v }
        if let v = update.allowMetered { allowMetered = v }
        if let v = update.notify { notify = v }
        if let v = update.speedLimit { speedLimit = v }
        if let v = update.retries { retries = v }
        if let v = update.proxy { proxy = v.isEmpty ? nil : v }
        if let v = update.applicationID { applicationID = v }
        if let v = update.cookies { cookies = v }
        if let v = update.privateSignals { privateSignals = v }
        if let v = update.discretionary { discretionary = v }
        if let v = update.onClientExit { onClientExit = v }
        return self != before
    }

    /// `new`, where a value of `"(hidden)"` (as `Configuration` shows every value)
    /// for a header the session holds keeps the held value: a client that reads the
    /// configuration, changes one header and sends the headers back keeps the others'
    /// real values. Header names match without regard to case, as in HTTP. (One the
    /// session does not hold was refused before: `checkHiddenValues`.)
    static func keepingHiddenValues(_ new: [String: String], of held: [String: String]) -> [String: String] {
        guard new.values.contains(Redaction.hiddenValue) else { return new }
        let heldByName = Dictionary(held.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        return Dictionary(uniqueKeysWithValues: new.map { name, value in
            (name, value == Redaction.hiddenValue ? heldByName[name.lowercased()] ?? value : value)
        })
    }
}
