import NIOCore
import NIOHTTP1

/// One client connection of the test server: answers requests in turn and streams
/// bodies with back-pressure, pacing, drops and stalls. Event-loop confined.
final class HTTPConnection: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private static let chunkSize = 64 * 1024
    private static let paceInterval = TimeAmount.milliseconds(100)

    private struct BodyStream {
        var remaining: ByteBuffer
        var sent = 0
        var cutAfter: Int?
        var cut: ResponsePlan.Cut
        var bytesPerSecond: Int?
        var keepAlive: Bool
        var requestIndex: Int
    }

    private let server: TestHTTPServer
    private var requestHead: HTTPRequestHead?
    /// The current request's index in the server's record.
    private var requestIndex = -1
    private var upload: UploadReceiver?
    private var stream: BodyStream?
    private var pacing: Scheduled<Void>?
    /// After a stall nothing more is sent on this connection.
    private var stalled = false
    /// A request of this connection is being answered (`TestHTTPServer.mostRequestsInFlight`).
    private var answering = false
    /// Which connection of the server's this is (`RecordedRequest.connection`).
    private var number = 0

    init(server: TestHTTPServer) {
        self.server = server
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            requestHead = head
            requestIndex = server.record(head, connection: number)
            if !answering { answering = true; server.requestBegan() }
            upload = head.method == .PUT || head.method == .POST
                ? UploadReceiver(contentType: head.headers.first(name: "Content-Type")) : nil
        case .body(let buffer):
            upload?.consume(buffer)
        case .end:
            guard let head = requestHead, !stalled else { return }
            requestHead = nil
            let received = upload?.finish()
            upload = nil
            if let received { server.recordUpload(requestIndex, received) }
            var plan = server.plan(for: head, upload: received)
            if head.method == .HEAD { plan.sendsBody = false }
            if plan.silent { return }
            guard plan.held else {
                respond(context: context, plan: plan, keepAlive: head.isKeepAlive)
                return
            }
            let path = RecordedRequest(method: "", uri: head.uri, headers: []).path
            let loop = context.eventLoop
            let bound = NIOLoopBound((self, context), eventLoop: loop)
            server.answer(path) {
                loop.execute {
                    let (connection, context) = bound.value
                    connection.respond(context: context, plan: plan, keepAlive: head.isKeepAlive)
                }
            }
        }
    }

    private func respond(context: ChannelHandlerContext, plan: ResponsePlan, keepAlive: Bool) {
        var headers = plan.headers
        headers.replaceOrAdd(name: "Content-Length", value: String(plan.body.readableBytes))
        headers.replaceOrAdd(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        let head = HTTPResponseHead(version: .http1_1, status: plan.status, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        guard plan.sendsBody, plan.body.readableBytes > 0 || plan.cutAfter != nil else {
            endResponse(context: context, keepAlive: keepAlive)
            return
        }
        stream = BodyStream(remaining: plan.body, cutAfter: plan.cutAfter, cut: plan.cut,
                            bytesPerSecond: plan.bytesPerSecond, keepAlive: keepAlive, requestIndex: requestIndex)
        pump(context: context)
    }

    private func endResponse(context: ChannelHandlerContext, keepAlive: Bool) {
        stream = nil
        if answering { answering = false; server.requestEnded() }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            done.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    /// Sends as much as pacing and back-pressure allow.
    private func pump(context: ChannelHandlerContext) {
        guard stream != nil else { return }
        if let rate = stream!.bytesPerSecond {
            let quantum = max(1, rate / 10)
            guard sendSlice(context: context, upTo: quantum) else { return }
            context.flush()
            pacing = context.eventLoop.assumeIsolated().scheduleTask(in: Self.paceInterval) { [self] in
                pacing = nil
                pump(context: context)
            }
            return
        }
        while context.channel.isWritable {
            guard sendSlice(context: context, upTo: Self.chunkSize) else { return }
        }
        context.flush()
    }

    /// Writes one slice. Returns false when the stream is over (ended, dropped or stalled).
    private func sendSlice(context: ChannelHandlerContext, upTo limit: Int) -> Bool {
        guard var s = stream else { return false }
        var n = min(limit, s.remaining.readableBytes)
        if let cut = s.cutAfter { n = min(n, max(0, cut - s.sent)) }
        let written: EventLoopFuture<Void>?
        if n > 0, let slice = s.remaining.readSlice(length: n) {
            s.sent += n
            server.countSent(s.requestIndex, n)
            written = context.write(wrapOutboundOut(.body(.byteBuffer(slice))))
        } else {
            written = nil
        }
        stream = s
        if let cut = s.cutAfter, s.sent >= cut {
            stream = nil
            context.flush()
            switch s.cut {
            case .drop:
                // Close once the bytes before the cut are on the wire.
                if let written {
                    written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                } else {
                    context.close(promise: nil)
                }
            case .stall:
                stalled = true
            }
            return false
        }
        if s.remaining.readableBytes == 0 {
            endResponse(context: context, keepAlive: s.keepAlive)
            return false
        }
        return true
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, stream != nil, stream!.bytesPerSecond == nil {
            pump(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    func channelActive(context: ChannelHandlerContext) {
        number = server.connectionOpened()
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        server.connectionClosed()
        if answering { answering = false; server.requestEnded() }
        pacing?.cancel()
        pacing = nil
        stream = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}
