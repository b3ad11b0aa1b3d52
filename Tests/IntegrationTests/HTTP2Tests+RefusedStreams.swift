import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// A server that answers some requests with `RST_STREAM(REFUSED_STREAM)`: an HTTP/2 server
/// may refuse a stream it has not begun to process (RFC 9113 §8.7), as busy front ends do
/// under load, and the client is to send the request again. nginx cannot be told to refuse
/// a given stream, so this one is a small HTTP/2 server of Python's hyper-h2 over TLS.
extension HTTP2Tests {
    /// A new site of `count` files (`makeSite`) served over HTTP/2 (TLS with a test CA,
    /// ALPN h2) on a free loopback port, and ferryd started again trusting that CA. The
    /// file NAME is at `/NAME` and at `/refuse/NAME`, where its first request is refused
    /// with `REFUSED_STREAM` before any answer; every other request gets the file (200) or
    /// 404 (other paths: `refusingServerScript`). Its log has a line per request: the
    /// connection's serial, `refused`, `received` or the status, and the path.
    func startRefusingServer(files count: Int = 1) async throws -> (base: String, log: String, bodies: [[UInt8]]) {
        let certificates = try makeTestCertificates(in: work + "/tls")
        let (root, bodies) = try makeSite(count: count)
        let dir = work + "/h2server"
        let log = dir + "/requests.log"
        let port = try startPythonServer(Self.refusingServerScript, in: dir,
                                         arguments: [root, certificates.certificate, certificates.key, "/refuse", log],
                                         what: "the HTTP/2 server (python3-h2)")
        try await restartTrusting(certificates)
        return ("https://127.0.0.1:\(port)", log, bodies)
    }

    /// A third of 60 downloads from one HTTP/2 origin, all asked for at once, are refused
    /// (`REFUSED_STREAM`) on their first request: each is sent again and every download
    /// completes byte-exact on its first attempt, though the session allows no retry.
    func testRefusedStreamsAreSentAgainWithoutCostingAnAttempt() async throws {
        let count = 60
        let (base, log, bodies) = try await startRefusingServer(files: count)
        let s = try await session("com.example.Refused", ["retries": .uint32(0)])

        var transfers: [FerryTransfer] = []
        for i in bodies.indices {
            let path = i % 3 == 0 ? "/refuse/f\(i).bin" : "/f\(i).bin"
            transfers.append(try await s.download(base + path, options: ["destination": .string(work + "/f\(i).bin")]))
        }
        for t in transfers {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorName) \(info.errorMessage)")
            XCTAssertEqual(info.attempts, 1, "\(t.path): a refused stream is not a failed attempt")
            XCTAssertEqual(info.errorName, "", "\(t.path) keeps no error")
        }
        for i in bodies.indices { assertFile(work + "/f\(i).bin", equals: bodies[i]) }

        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        let refused = lines.filter { $0[1] == "refused" }.map { String($0[2]) }
        XCTAssertEqual(Set(refused).count, count / 3, "the server refused each marked file once: \(refused)")
        XCTAssertEqual(refused.count, count / 3, "and no file twice")
        let served = lines.filter { $0[1] == "200" }.map { String($0[2]) }
        XCTAssertEqual(served.count, count, "every file was served once: \(served.count) answers")
        XCTAssertEqual(Set(served).count, count)
    }

    /// A server that refuses every request for a file (`REFUSED_STREAM` each time, as an
    /// overloaded front end might) fails the download with a message that says so, not
    /// with a vague receiving error; nothing is left at the destination.
    func testAServerThatRefusesEveryRequestFailsSayingSo() async throws {
        let (base, log, _) = try await startRefusingServer()
        let s = try await session("com.example.AlwaysRefused", ["retries": .uint32(0)])

        let t = try await s.download(base + "/always/f0.bin", options: ["destination": .string(work + "/f0.bin")])
        let info = try await finish(t, timeout: 60)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network")
        XCTAssertTrue(info.errorMessage.hasPrefix(base.dropFirst("https://".count) + " did not answer the request"), info.errorMessage)
        XCTAssertTrue(info.errorMessage.contains("refused by the server (HTTP/2 REFUSED_STREAM)"), info.errorMessage)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/f0.bin"))
        let refused = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").filter { $0.contains(" refused /always/") }
        XCTAssertGreaterThan(refused.count, 1, "sent again after a refusal, as the message says")
    }

    /// The first connection to a new HTTP/2 origin goes while its first requests wait for
    /// their answers: the origin has answered nothing yet, but ALPN chose h2, so each request
    /// was a stream of a shared connection. Every transfer is tried again at once and
    /// completes byte-exact, though its session allows no retry: none counts the loss as a
    /// failed attempt (none fails, none waits to retry). The server closes the connection
    /// (TLS close and FIN).
    func testAConnectionClosedBeforeAnOriginsFirstAnswerFailsNoTransfer() async throws {
        try await loseFirstConnection(how: "close")
    }

    /// As above, the connection dropped at once (asyncio's `abort`: libcurl reads a reset,
    /// with no word of HTTP/2 in its error).
    func testAConnectionAbortedBeforeAnOriginsFirstAnswerFailsNoTransfer() async throws {
        try await loseFirstConnection(how: "abort")
    }

    /// A request answered over HTTP/2 by a redirect that libcurl follows to a port where
    /// nothing listens: the refused connection is the transfer's own failure, not a lost
    /// stream (what ALPN said of the first connection does not carry over to the next), so
    /// with no retries allowed it fails after one attempt.
    func testARedirectToADeadPortAfterAnHTTP2AnswerFailsAtOnce() async throws {
        let (base, log, _) = try await startRefusingServer()
        let s = try await session("com.example.RedirectedNowhere", ["retries": .uint32(0)])
        let deadPort = try freePort()

        let t = try await s.download(base + "/redirect/\(deadPort)/f0.bin", options: ["destination": .string(work + "/f0.bin")])
        let info = try await finish(t, timeout: 60)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Network")
        XCTAssertTrue(info.errorMessage.contains("Connection refused"), info.errorMessage)
        XCTAssertEqual(info.attempts, 1, "no free tries again: the refused connection is no lost stream")
        let redirects = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").filter { $0.contains(" 302 /redirect/") }
        XCTAssertEqual(redirects.count, 1, "the server answered once: \(redirects)")
    }

    /// A POST upload answered over HTTP/2 (201) whose connection then closes part-way
    /// through the answer is not sent again on its own: the server acted on it, and a
    /// second POST could act twice (a form sent twice). With no retries allowed, it fails
    /// with `Network` after its one attempt, and the server saw the POST once; its
    /// `response-destination` keeps the last receipt, with no part of the cut answer. A
    /// PUT in the same place is sent again at once and completes (a PUT twice is the same
    /// PUT), its whole answer in the receipt.
    func testAPOSTWhoseConnectionWentAfterItsAnswerIsNotSentAgain() async throws {
        let (base, log, _) = try await startRefusingServer()
        let s = try await session("com.example.PostOnce", ["retries": .uint32(0)])
        let body = TestData.bytes(count: 40_000, seed: 77)
        let file = work + "/form.bin"
        FileManager.default.createFile(atPath: file, contents: Data(body))

        let receipt = work + "/receipt.txt"
        FileManager.default.createFile(atPath: receipt, contents: Data("the last receipt\n".utf8))

        let post = try await s.upload(base + "/answer-then-close/form.bin", file: file,
                                      options: ["method": .string("POST"), "response-destination": .string(receipt)])
        let posted = try await finish(post, timeout: 60)
        XCTAssertEqual(posted.state, "failed")
        XCTAssertEqual(posted.errorName, "org.ferry.Ferry1.Error.Network", posted.errorMessage)
        XCTAssertEqual(posted.attempts, 1, "not sent again")
        XCTAssertEqual(posted.httpStatus, 201, "the status of the cut answer tells the server took it")
        XCTAssertEqual(try String(contentsOfFile: receipt, encoding: .utf8), "the last receipt\n",
                       "the response-destination holds no part of the cut answer")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work).filter { $0.hasPrefix(".ferry-answer") }, [],
                       "nothing left of the cut answer")

        let put = try await s.upload(base + "/answer-then-close/put.bin", file: file,
                                     options: ["method": .string("PUT"), "response-destination": .string(receipt)])
        let putInfo = try await finish(put, timeout: 60)
        XCTAssertEqual(putInfo.state, "completed", "\(putInfo.errorName) \(putInfo.errorMessage)")
        XCTAssertEqual(putInfo.httpStatus, 201)
        XCTAssertEqual(try String(contentsOfFile: receipt, encoding: .utf8), String(repeating: "stored\n", count: 1000),
                       "the second answer, whole")

        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        let received = lines.filter { $0.count >= 5 && $0[1] == "received" }
        XCTAssertEqual(received.filter { $0[2] == "POST" }.count, 1, "the server got the POST once: \(lines)")
        XCTAssertEqual(received.filter { $0[2] == "PUT" }.count, 2, "and the PUT twice, the second answered whole: \(lines)")
        XCTAssertTrue(received.allSatisfy { $0[4] == "40000" }, "each with the whole body: \(lines)")
    }

    /// A POST answered 201 whose answer then stops coming (no byte for the session's
    /// `request-timeout`) fails with `Timeout` and is not tried again, though the session
    /// allows retries: the server took it. A PUT in the same place waits to retry.
    func testAPOSTWhoseAnswerStallsAfterSuccessIsNotRetried() async throws {
        let (base, log, _) = try await startRefusingServer()
        let s = try await session("com.example.PostStalls", ["retries": .uint32(3), "request-timeout": .double(1)])
        let file = work + "/form.bin"
        FileManager.default.createFile(atPath: file, contents: Data(TestData.bytes(count: 10_000, seed: 78)))

        let post = try await s.upload(base + "/answer-then-stall/form.bin", file: file, options: ["method": .string("POST")])
        let posted = try await finish(post, timeout: 60)
        XCTAssertEqual(posted.state, "failed")
        XCTAssertEqual(posted.errorName, "org.ferry.Ferry1.Error.Timeout", posted.errorMessage)
        XCTAssertEqual(posted.attempts, 1, "not tried again")
        XCTAssertEqual(posted.httpStatus, 201, "the answer that came says the server took it")

        let put = try await s.upload(base + "/answer-then-stall/put.bin", file: file, options: ["method": .string("PUT")])
        try await waitForState(put, "waiting", timeout: 30)
        try await put.cancel()
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        XCTAssertEqual(lines.filter { $0.count >= 5 && $0[1] == "received" && $0[2] == "POST" }.count, 1, "the POST once: \(lines)")
    }

    private func loseFirstConnection(how: String) async throws {
        let count = 6
        let (base, log, bodies) = try await startRefusingServer(files: count)
        let s = try await session("com.example.FirstConnectionLost", ["retries": .uint32(0)])

        var transfers: [FerryTransfer] = []
        for i in bodies.indices {
            transfers.append(try await s.download(base + "/\(how)/f\(i).bin", options: ["destination": .string(work + "/f\(i).bin")]))
        }
        for t in transfers {
            let info = try await finish(t, timeout: 60)
            XCTAssertEqual(info.state, "completed", "\(t.path): \(info.errorName) \(info.errorMessage)")
            XCTAssertEqual(info.errorName, "", "\(t.path) keeps no error")
        }
        for i in bodies.indices { assertFile(work + "/f\(i).bin", equals: bodies[i]) }
        let paths = Set(transfers.map(\.path))
        let waitedToRetry = signals.all.filter {
            $0.member == "PropertiesChanged" && paths.contains($0.path) && $0.changed["WaitingReason"]?.string == "retry"
        }
        XCTAssertEqual(waitedToRetry.count, 0, "no transfer waited to retry: the loss was no failed attempt")

        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        XCTAssertEqual(lines.filter { $0[1] == Substring(how) }.count, 1, "the server dropped its first connection: \(lines)")
        XCTAssertEqual(lines.first?[1], Substring(how), "before it answered anything: \(lines)")
        XCTAssertEqual(Set(lines.filter { $0[1] == "200" }.map { String($0[2]) }).count, count, "every file was served")
    }

    /// The server of `startRefusingServer`: asyncio, ssl and hyper-h2 (Debian's python3-h2).
    /// Paths under the refused prefix are the files without it, the first request for each
    /// refused; every request for a path under `/always/` is refused. Paths under `/close/`
    /// and `/abort/` are the files without it; the first connection that asks for one is
    /// closed (TLS close, then FIN) or dropped at once (`abort`), its requests unanswered.
    /// `/redirect/PORT/REST` answers 302 to `https://127.0.0.1:PORT/REST`. A POST or PUT to
    /// `/answer-then-close/NAME` is read whole and answered 201; the first to each path gets
    /// a tenth of its answer, then the connection closes (TLS close, then FIN). Under
    /// `/answer-then-stall/` the same, but the rest of that first answer never comes.
    static let refusingServerScript = """
    import asyncio, os, ssl, sys
    import h2.config, h2.connection, h2.errors, h2.events, h2.exceptions

    root, certificate, key, refused_prefix, log_path = sys.argv[1:6]
    refused_once = set()
    dropped = set()
    cut_answers = set()
    log = open(log_path, "a", buffering=1)
    serials = iter(range(1, 1 << 30))

    class Connection(asyncio.Protocol):
        def connection_made(self, transport):
            self.serial = next(serials)
            self.transport = transport
            self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
            self.h2.initiate_connection()
            self.outgoing = {}  # stream id -> [body, bytes sent]
            self.receiving = {}  # stream id -> [method, path, bytes received]
            self.flush()

        def flush(self):
            data = self.h2.data_to_send()
            if data:
                self.transport.write(data)

        def data_received(self, data):
            if self.transport.is_closing():
                return
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.flush()
                self.transport.close()
                return
            for event in events:
                if self.transport.is_closing():
                    return
                if isinstance(event, h2.events.RequestReceived):
                    self.request(event.stream_id, dict(event.headers))
                elif isinstance(event, h2.events.StreamReset):
                    self.outgoing.pop(event.stream_id, None)
                elif isinstance(event, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if event.stream_id in self.receiving:
                        self.receiving[event.stream_id][2] += len(event.data)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id in self.receiving:
                    self.received(event.stream_id, *self.receiving.pop(event.stream_id))
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.transport.close()
            self.send_bodies()
            self.flush()

        def request(self, stream, headers):
            path = headers.get(":path", "/")
            if path.startswith("/always/"):
                log.write(f"{self.serial} refused {path}\\n")
                self.h2.reset_stream(stream, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                return
            kind = (path.split("/") + [""])[1]
            if kind in ("answer-then-close", "answer-then-stall"):
                self.receiving[stream] = [headers.get(":method"), path, 0]
                return
            if kind == "redirect":
                _, _, port, rest = (path.split("/", 3) + ["", ""])[:4]
                log.write(f"{self.serial} 302 {path}\\n")
                self.h2.send_headers(stream, [(":status", "302"), ("location", f"https://127.0.0.1:{port}/{rest}"),
                                              ("content-length", "0")], end_stream=True)
                return
            if kind in ("close", "abort"):
                if kind not in dropped:
                    dropped.add(kind)
                    log.write(f"{self.serial} {kind} {path}\\n")
                    (self.transport.close if kind == "close" else self.transport.abort)()
                    return
                path = path[len(kind) + 1:]
            if path.startswith(refused_prefix + "/"):
                if path not in refused_once:
                    refused_once.add(path)
                    log.write(f"{self.serial} refused {path}\\n")
                    self.h2.reset_stream(stream, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                    return
                path = path[len(refused_prefix):]
            name = os.path.join(root, os.path.basename(path))
            try:
                with open(name, "rb") as f:
                    body = f.read()
            except OSError:
                log.write(f"{self.serial} 404 {path}\\n")
                self.h2.send_headers(stream, [(":status", "404"), ("content-length", "0")], end_stream=True)
                return
            log.write(f"{self.serial} 200 {headers.get(':path')}\\n")
            head = headers.get(":method") == "HEAD"
            self.h2.send_headers(stream, [(":status", "200"), ("content-length", str(len(body))),
                                          ("content-type", "application/octet-stream")], end_stream=head)
            if not head:
                self.outgoing[stream] = [body, 0]

        def received(self, stream, method, path, size):
            log.write(f"{self.serial} received {method} {path} {size}\\n")
            answer = b"stored\\n" * 1000
            self.h2.send_headers(stream, [(":status", "201"), ("content-length", str(len(answer)))])
            if path in cut_answers:
                self.h2.send_data(stream, answer, end_stream=True)
                return
            cut_answers.add(path)
            self.h2.send_data(stream, answer[:len(answer) // 10])
            self.flush()
            if path.startswith("/answer-then-close/"):
                self.transport.close()

        def send_bodies(self):
            for stream, state in list(self.outgoing.items()):
                body, sent = state
                while sent < len(body):
                    window = min(self.h2.local_flow_control_window(stream), self.h2.max_outbound_frame_size)
                    if window <= 0:
                        break
                    chunk = body[sent:sent + window]
                    sent += len(chunk)
                    self.h2.send_data(stream, chunk, end_stream=sent == len(body))
                state[1] = sent
                if sent == len(body):
                    del self.outgoing[stream]

    async def main():
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        context.set_alpn_protocols(["h2"])
        server = await asyncio.get_running_loop().create_server(Connection, "127.0.0.1", 0, ssl=context)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())
    """
}
