/// A request the test server received, as the client sent it.
public struct RecordedRequest: Sendable {
    public var method: String
    /// The request target as sent, query included ("/file.bin?x=1").
    public var uri: String
    /// The path without the query ("/file.bin").
    public var path: String
    public var headers: [(name: String, value: String)]

    public init(method: String, uri: String, headers: [(name: String, value: String)]) {
        self.method = method
        self.uri = uri
        self.path = String(uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        self.headers = headers
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}
