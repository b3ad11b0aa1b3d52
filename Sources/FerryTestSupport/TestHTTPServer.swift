import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A loopback HTTP/1.1 server for tests, on 127.0.0.1 and an ephemeral port.
///
/// It serves registered resources with ETag / Last-Modified, `Range` (`bytes=N-`,
/// `bytes=N-M`, `bytes=-N`, answered with 206 + Content-Range, or 416), `If-Range`
/// (a validator that no longer matches gets the whole body with 200) and HEAD, always
/// with Content-Length. Per path it can misbehave (`ServerBehaviour`): answer a status,
/// send slowly, drop or stall the connection mid-body, redirect, fail the first N
/// requests. It records every request. Large bodies stream in 64 KiB zero-copy slices
/// with back-pressure.
public final class TestHTTPServer: @unchecked Sendable {
    // @unchecked Sendable: all mutable state (resources, rules, requests, channel,
    // group, port) is read and written under `lock`.
    private let lock = NSLock()
    private var resources: [String: ServedResource] = [:]
    private var rules: [String: PathRules] = [:]
    private var recorded: [RecordedRequest] = []
    /// Answers held back (`holdAnswers`) by path, sent on `release`.
    private var heldAnswers: [String: [() -> Void]] = [:]
    private var group: MultiThreadedEventLoopGroup?
    private var channel: Channel?
    private var boundPort = 0
    private var connections = 0
    private var connectionsAccepted = 0
    private var inFlight = 0
    private var mostInFlight = 0

    public init() {}

    deinit { stop() }

    /// The port, once started.
    public var port: Int {
        lock.lock(); defer { lock.unlock() }
        return boundPort
    }

    /// "http://127.0.0.1:PORT/path".
    public func url(_ path: String) -> String {
        "http://127.0.0.1:\(port)\(path)"
    }

    /// Client connections open now (the server has not yet seen them close).
    public var openConnections: Int {
        lock.lock(); defer { lock.unlock() }
        return connections
    }

    /// The most requests that were being answered at the same time (from a request's
    /// head until its response ended or its connection closed): what a client's
    /// connection limits allow the server to see.
    public var mostRequestsInFlight: Int {
        lock.lock(); defer { lock.unlock() }
        return mostInFlight
    }

    func requestBegan() { lock.lock(); inFlight += 1; mostInFlight = max(mostInFlight, inFlight); lock.unlock() }
    func requestEnded() { lock.lock(); inFlight -= 1; lock.unlock() }

    /// Counts an accepted connection; returns its number (1 for the first).
    func connectionOpened() -> Int {
        lock.lock(); defer { lock.unlock() }
        connections += 1
        connectionsAccepted += 1
        return connectionsAccepted
    }
    func connectionClosed() { lock.lock(); connections -= 1; lock.unlock() }

    /// Every request received so far, oldest first.
    public var requests: [RecordedRequest] {
        lock.lock(); defer { lock.unlock() }
        return recorded
    }

    /// The requests for one path (query ignored), oldest first.
    public func requests(for path: String) -> [RecordedRequest] {
        requests.filter { $0.path == path }
    }

    /// Binds `host` (127.0.0.1; any 127.x.y.z is loopback too) on `port` (0: an
    /// ephemeral one) and starts serving.
    public func start(host: String = "127.0.0.1", port: Int = 0) throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true, withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(HTTPConnection(server: self))
                }
            }
        let channel: Channel
        do {
            channel = try bootstrap.bind(host: host, port: port).wait()
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        lock.lock()
        self.group = group
        self.channel = channel
        self.boundPort = channel.localAddress?.port ?? 0
        lock.unlock()
    }

    /// Closes the listener and every connection (stalled ones included).
    public func stop() {
        lock.lock()
        let (channel, group) = (self.channel, self.group)
        self.channel = nil
        self.group = nil
        lock.unlock()
        try? channel?.close().wait()
        try? group?.syncShutdownGracefully()
    }

    /// Serves `body` at `path` (replacing what was there: call it again to change the
    /// file or its ETag between attempts). Behaviours set for the path stay.
    public func add(path: String, body: [UInt8], etag: String? = "\"v1\"", lastModified: String? = nil,
                    contentDisposition: String? = nil, supportsRanges: Bool = true) {
        let resource = ServedResource(body: ByteBuffer(bytes: body), etag: etag, lastModified: lastModified,
                                      contentDisposition: contentDisposition, supportsRanges: supportsRanges)
        lock.lock()
        resources[path] = resource
        lock.unlock()
    }

    /// Serves `body` at `path`; see the `[UInt8]` variant.
    public func add(path: String, body: Data, etag: String? = "\"v1\"", lastModified: String? = nil,
                    contentDisposition: String? = nil, supportsRanges: Bool = true) {
        add(path: path, body: [UInt8](body), etag: etag, lastModified: lastModified,
            contentDisposition: contentDisposition, supportsRanges: supportsRanges)
    }

    /// Adds a behaviour for `path` (behaviours of different kinds combine).
    public func set(_ behaviour: ServerBehaviour, on path: String) {
        lock.lock()
        rules[path, default: PathRules()].apply(behaviour)
        lock.unlock()
    }

    /// Sends the answers held back for `path` (`holdAnswers`) and stops holding them.
    public func release(_ path: String) {
        lock.lock()
        rules[path]?.held = false
        let answers = heldAnswers.removeValue(forKey: path) ?? []
        lock.unlock()
        for answer in answers { answer() }
    }

    /// Whether an answer for `path` is being held back.
    public func isHoldingAnswer(for path: String) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return !(heldAnswers[path] ?? []).isEmpty
    }

    /// Runs `answer` now, or on `release(path)` while answers to `path` are held.
    func answer(_ path: String, _ answer: @escaping () -> Void) {
        lock.lock()
        guard rules[path]?.held == true else {
            lock.unlock()
            answer()
            return
        }
        heldAnswers[path, default: []].append(answer)
        lock.unlock()
    }

    /// Removes every behaviour of `path`: it is served normally again.
    public func clearBehaviours(on path: String) {
        lock.lock()
        rules[path] = nil
        lock.unlock()
    }

    // MARK: - For the connection handler

    /// Records a request; returns its index for `countSent` and `recordUpload`.
    func record(_ head: HTTPRequestHead, connection: Int) -> Int {
        var request = RecordedRequest(method: head.method.rawValue, uri: head.uri,
                                      headers: head.headers.map { (name: $0.name, value: $0.value) })
        request.connection = connection
        lock.lock()
        defer { lock.unlock() }
        recorded.append(request)
        return recorded.count - 1
    }

    /// Counts body bytes handed to the connection for request `index`.
    func countSent(_ index: Int, _ bytes: Int) {
        lock.lock()
        if recorded.indices.contains(index) { recorded[index].bodyBytesSent += bytes }
        lock.unlock()
    }

    func recordUpload(_ index: Int, _ upload: ReceivedUpload) {
        lock.lock()
        if recorded.indices.contains(index) { recorded[index].upload = upload }
        lock.unlock()
    }

    /// The bodies received (PUT and POST) for a path, oldest first.
    public func uploads(for path: String) -> [ReceivedUpload] {
        requests(for: path).compactMap(\.upload)
    }

    /// Decides the response to one request, consuming one-shot behaviours.
    func plan(for head: HTTPRequestHead, upload: ReceivedUpload? = nil) -> ResponsePlan {
        let path = RecordedRequest(method: "", uri: head.uri, headers: []).path
        lock.lock()
        defer { lock.unlock() }
        var rule = rules[path] ?? PathRules()
        defer { if rules[path] != nil { rules[path] = rule } }
        rule.requestsSeen += 1
        if let replacement = rule.replacement, rule.requestsSeen > replacement.afterRequests, let old = resources[path] {
            resources[path] = ServedResource(body: ByteBuffer(bytes: replacement.body), etag: replacement.etag,
                                             lastModified: old.lastModified, contentDisposition: old.contentDisposition,
                                             supportsRanges: old.supportsRanges)
            rule.replacement = nil
        }
        var plan = basePlan(for: head, path: path, rule: &rule, upload: upload)
        plan.held = rule.held
        for cookie in rule.cookies { plan.headers.add(name: "Set-Cookie", value: cookie) }
        if let date = rule.date { plan.headers.add(name: "Date", value: date) }
        return plan
    }

    private func basePlan(for head: HTTPRequestHead, path: String, rule: inout PathRules, upload: ReceivedUpload?) -> ResponsePlan {

        let retryHeaders = rule.retryAfter.map { [("Retry-After", $0)] } ?? []
        if let fail = rule.failFirst, fail.remaining > 0 {
            rule.failFirst = (fail.remaining - 1, fail.status)
            return .text(fail.status, "HTTP \(fail.status)\n", extraHeaders: retryHeaders)
        }
        if let fail = rule.rangeFailures, fail.remaining > 0, head.headers.first(name: "Range") != nil {
            rule.rangeFailures = (fail.remaining - 1, fail.status)
            return .text(fail.status, "HTTP \(fail.status)\n", extraHeaders: retryHeaders)
        }
        if let code = rule.status {
            return .text(code, "HTTP \(code)\n", extraHeaders: retryHeaders)
        }
        if let redirect = rule.redirect {
            return .text(redirect.status, "Moved to \(redirect.location)\n", extraHeaders: [("Location", redirect.location)])
        }
        if rule.silent {
            var plan = ResponsePlan.text(200, "")
            plan.silent = true
            return plan
        }
        if let accepted = rule.uploads, head.method == .PUT || head.method == .POST {
            let text = "received \(upload?.byteCount ?? 0) bytes, sha256 \(upload?.sha256 ?? "")\n"
            let body = accepted.body.map { ByteBuffer(bytes: $0) } ?? ByteBuffer(string: text)
            var plan = ResponsePlan.text(accepted.status, "")
            plan.body = body
            // The answer too may be cut or stall part-way (`dropAfter`, `stallAfter`).
            if let (bytes, cut) = rule.takeCut() { (plan.cutAfter, plan.cut) = (bytes, cut) }
            return plan
        }
        guard let resource = resources[path] else {
            return .text(404, "not found\n")
        }
        guard head.method == .GET || head.method == .HEAD else {
            return .text(405, "method not allowed\n", extraHeaders: [("Allow", "GET, HEAD")])
        }

        let size = resource.body.readableBytes
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/octet-stream")
        if let etag = resource.etag { headers.add(name: "ETag", value: etag) }
        if let lastModified = resource.lastModified { headers.add(name: "Last-Modified", value: lastModified) }
        if let disposition = resource.contentDisposition { headers.add(name: "Content-Disposition", value: disposition) }
        if resource.supportsRanges { headers.add(name: "Accept-Ranges", value: "bytes") }

        var status = HTTPResponseStatus.ok
        var body = resource.body
        var bodyStart = 0
        if resource.supportsRanges, !rule.ignoreRanges, let rangeHeader = head.headers.first(name: "Range"),
           rule.ignoreIfRange || Self.validatorMatches(head.headers.first(name: "If-Range"), resource),
           let range = ByteRangeRequest(rangeHeader, size: size) {
            switch range {
            case .unsatisfiable:
                headers.add(name: "Content-Range", value: "bytes */\(size)")
                var plan = ResponsePlan.text(416, "", extraHeaders: [])
                plan.headers = headers
                return plan
            case .range(let asked, let last):
                let first = min(max(0, asked - rule.rangeShift), last)
                status = .partialContent
                headers.add(name: "Content-Range", value: "bytes \(first)-\(last)/\(size)")
                body = resource.body.getSlice(at: resource.body.readerIndex + first, length: last - first + 1)!
                bodyStart = first
            }
        }
        if let at = rule.corruptAt, at >= bodyStart, at < bodyStart + body.readableBytes {
            var bytes = Array(body.readableBytesView)
            bytes[at - bodyStart] ^= 0xFF
            body = ByteBuffer(bytes: bytes)
        }

        var plan = ResponsePlan(status: status, headers: headers, body: body)
        plan.sendsBody = head.method != .HEAD
        if plan.sendsBody {
            plan.bytesPerSecond = rule.bytesPerSecond
            if status == .partialContent, let drop = rule.rangeDrop, drop.remaining > 0 {
                rule.rangeDrop = (drop.bytes, drop.remaining - 1)
                plan.cutAfter = drop.bytes
                plan.cut = .drop
            } else if let (bytes, cut) = rule.takeCut() {
                (plan.cutAfter, plan.cut) = (bytes, cut)
            }
        }
        return plan
    }

    /// No If-Range, or one equal to the current strong ETag or Last-Modified date.
    private static func validatorMatches(_ ifRange: String?, _ resource: ServedResource) -> Bool {
        guard let validator = ifRange?.trimmingCharacters(in: .whitespaces) else { return true }
        if validator.hasPrefix("W/") { return false }
        if validator.hasPrefix("\"") { return validator == resource.etag }
        return validator == resource.lastModified
    }
}
