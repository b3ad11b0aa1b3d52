import ArgumentParser

/// `-H 'Name: value'` arguments (get, put, post).
enum HeaderArguments {
    /// Refuses one without a colon or without a name (`': v'` is not a header named
    /// `v`); the service checks the rest (a token name, no CR, LF or NUL).
    static func validate(_ headers: [String]) throws {
        for h in headers {
            guard let colon = h.firstIndex(of: ":") else {
                throw ValidationError("header '\(h)' is not of the form 'Name: value'")
            }
            if h[..<colon].trimmingCharacters(in: .whitespaces).isEmpty {
                throw ValidationError("header '\(h)' has no name before its ':'")
            }
        }
    }

    /// Name to value, each without the spaces around it.
    static func dictionary(_ headers: [String]) -> [String: String] {
        var d: [String: String] = [:]
        for h in headers {
            guard let colon = h.firstIndex(of: ":") else { continue }
            d[h[..<colon].trimmingCharacters(in: .whitespaces)] = h[h.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return d
    }
}
