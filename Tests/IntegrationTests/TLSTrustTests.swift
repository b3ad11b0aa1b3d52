import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// TLS is verified: a server whose certificate no trusted authority signed fails as
/// `Tls`, and ferryd trusts another authority only where its environment says so, the
/// way curl's users do it (`CURL_CA_BUNDLE`, `SSL_CERT_FILE`). A test CA made here with
/// openssl signs a loopback HTTPS server (Python's `ssl` over `http.server`).
final class TLSTrustTests: FerryTestCase {
    private var authority: String { work + "/tls/ca.pem" }

    /// Makes the test CA and a certificate for 127.0.0.1 signed by it; starts an HTTPS
    /// server on a free loopback port with `body` at /file.bin; returns its base URL.
    private func startHTTPSServer(body: [UInt8]) throws -> String {
        let dir = work + "/tls"
        _ = try makeTestCertificates(in: dir)
        FileManager.default.createFile(atPath: dir + "/file.bin", contents: Data(body))
        let script = """
        import functools, http.server, ssl, sys
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[1] + "/server.pem", sys.argv[1] + "/server.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """
        let port = try startPythonServer(script, in: dir, arguments: [dir], what: "the HTTPS server")
        return "https://127.0.0.1:\(port)"
    }

    private func download(_ url: String, to name: String) async throws -> TransferInfo {
        let s = try await session("com.example.TLS", ["retries": .uint32(0)])
        return try await finish(try await s.download(url, options: ["destination": .string(work + "/" + name)]))
    }

    func testAnUntrustedCertificateFailsAsTlsAndATrustedAuthorityIsTakenFromTheEnvironment() async throws {
        let body = TestData.bytes(count: 300_000, seed: 12)
        let base = try startHTTPSServer(body: body)

        let refused = try await download(base + "/file.bin", to: "untrusted.bin")
        XCTAssertEqual(refused.state, "failed")
        XCTAssertEqual(refused.errorName, "org.ferry.Ferry1.Error.Tls", refused.errorMessage)
        XCTAssertFalse(exists(work + "/untrusted.bin"), "nothing saved from a server that was not verified")

        // CURL_CA_BUNDLE comes first, as with curl: empty, it leaves the choice to SSL_CERT_FILE
        // (this machine's own environment may set both to the system's store).
        for variable in ["CURL_CA_BUNDLE", "SSL_CERT_FILE"] {
            try await stopFerryd()
            try await startFerryd(extraEnvironment: ["CURL_CA_BUNDLE": ""].merging([variable: authority]) { $1 })
            let name = "trusted-\(variable).bin"
            let info = try await download(base + "/file.bin", to: name)
            XCTAssertEqual(info.state, "completed", "\(variable): \(info.errorMessage)")
            assertFile(work + "/" + name, equals: body)
        }
    }
}
