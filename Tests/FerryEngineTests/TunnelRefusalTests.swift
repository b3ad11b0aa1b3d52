import CCurl
import FerryCore
@testable import FerryEngine
import XCTest

/// How a proxy's refusal to open a tunnel (`CONNECT`, for an https URL) is worded and
/// classed: as the proxy's HTTP status, naming the proxy, never the server's connection
/// failing, and never with the proxy's credentials.
final class TunnelRefusalTests: XCTestCase {
    private struct Context: CurlFailureContext {
        var request: EngineRequest
        var hostDescription = "files.example:443"
        var curlErrorDetail = "CONNECT tunnel failed, response 407"
        var osErrno = 0
        var requestWasSent = false
        var expectedTotal: Int64 = -1
        var bytesOnDisk: Int64 = 0
        var lastLocation: String?
        var writtenPath = "/tmp/x.part"
        var proxyConnectStatus: Int
    }

    private func context(_ status: Int, proxy: String? = "http://alice:open-sesame@proxy.example:3128") -> Context {
        Context(request: EngineRequest(id: 1, url: "https://files.example/a.bin", partPath: "/tmp/x.part", proxy: proxy),
                proxyConnectStatus: status)
    }

    func testA407IsAnHttpFailureNamingTheProxyAndItsCredentialsWithoutThem() {
        let error = CurlFailure.error(for: CURLE_RECV_ERROR, in: context(407))
        guard case .http(let status, let message) = error else { return XCTFail("\(error)") }
        XCTAssertEqual(status, 407)
        XCTAssertEqual(message, "The proxy proxy.example:3128 refused a tunnel to files.example:443 with HTTP 407 Proxy Authentication Required: it wants credentials, and those in the session's proxy URL (user:password@) were missing or refused")
        XCTAssertFalse(RetryPolicy.isTransient(error), "the same credentials would be refused again")
    }

    /// The desktop's proxy settings may give no credentials: the message says where they can go.
    func testA407FromTheDesktopsProxySaysItGaveNoCredentials() {
        var c = context(407, proxy: "http://proxy.example:3128")
        c.request.proxyIsTheDesktops = true
        let error = CurlFailure.error(for: CURLE_RECV_ERROR, in: c)
        guard case .http(407, let message) = error else { return XCTFail("\(error)") }
        XCTAssertEqual(message, "The proxy proxy.example:3128 refused a tunnel to files.example:443 with HTTP 407 Proxy Authentication Required: it wants credentials, which the desktop's proxy settings do not give (a session's proxy URL can carry them: user:password@)")
        // GNOME's settings can hold a user and password, which the portal passes on.
        c.request.proxy = "http://alice:open-sesame@proxy.example:3128"
        let refused = CurlFailure.error(for: CURLE_RECV_ERROR, in: c)
        XCTAssertEqual(refused.message, "The proxy proxy.example:3128 refused a tunnel to files.example:443 with HTTP 407 Proxy Authentication Required: it wants credentials, and those of the desktop's proxy settings were refused")
    }

    func testAProxyThatCannotReachTheServerIsTriedAgain() {
        let error = CurlFailure.error(for: CURLE_RECV_ERROR, in: context(502))
        guard case .http(502, let message) = error else { return XCTFail("\(error)") }
        XCTAssertEqual(message, "The proxy proxy.example:3128 refused a tunnel to files.example:443 with HTTP 502 Bad Gateway")
        XCTAssertTrue(RetryPolicy.isTransient(error))
    }

    func testAnOpenedTunnelOrNoneLeavesTheFailureAsItWas() {
        for status in [0, 200] {
            var c = context(status)
            c.osErrno = Int(ECONNRESET)
            XCTAssertEqual(CurlFailure.error(for: CURLE_RECV_ERROR, in: c), .network("The connection to files.example:443 was reset"))
        }
    }
}
