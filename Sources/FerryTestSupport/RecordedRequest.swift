/// A request the test server received, as the client sent it.
public struct RecordedRequest: Sendable {
    public var method: String
    /// The request target as sent, query included ("/file.bin?x=1").
    public var uri: String
    /// The path without the query ("/file.bin"), also when the request came through a
    /// proxy in absolute form ("http://host:port/file.bin?x=1").
    public var path: String
    /// The request target was in absolute form: a client sent it to this server as its
    /// HTTP proxy. Serving it as its own path makes the server that proxy too.
    public var viaProxy: Bool
    public var headers: [(name: String, value: String)]
    /// Body bytes the server handed to the connection for this request's answer.
    public var bodyBytesSent = 0
    /// The request's body, for PUT and POST (once it has arrived in full).
    public var upload: ReceivedUpload?
    /// The connection it came on, numbered in the order the server accepted them.
    public var connection = 0

    public init(method: String, uri: String, headers: [(name: String, value: String)]) {
        self.method = method
        self.uri = uri
        var target = Substring(uri)
        viaProxy = !uri.hasPrefix("/") && uri.contains("://")
        if viaProxy, let authority = uri.range(of: "://") {
            let rest = uri[authority.upperBound...]
            target = rest.firstIndex(of: "/").map { rest[$0...] } ?? "/"
        }
        self.path = String(target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        self.headers = headers
    }

    /// Every value of a header, by case-insensitive name.
    public func headerValues(_ name: String) -> [String] {
        let wanted = name.lowercased()
        return headers.filter { $0.name.lowercased() == wanted }.map(\.value)
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}
