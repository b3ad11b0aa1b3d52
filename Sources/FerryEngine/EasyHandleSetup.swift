import CCurl
import FerryCore
import Foundation

/// The one set-up every Ferry easy handle goes through (single-connection downloads,
/// range connections, uploads): protocols, redirects, timeouts, user agent, proxy and
/// no-proxy, the request's headers, cookies, and the owner's callbacks. A setting added
/// here reaches every kind of attempt; one set anywhere else would reach one kind only
/// (the no-proxy setting once did). Records the first setopt failure.
/// libcurl's write and header callbacks: (data, size, count, owner) -> bytes taken.
typealias CurlDataCallback = @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int

struct EasyHandleSetup {
    let easy: UnsafeMutableRawPointer
    private(set) var error: CURLcode = CURLE_OK
    /// The request headers; the owner frees it with `curl_slist_free_all` after cleanup.
    private(set) var headerList: UnsafeMutablePointer<curl_slist>?

    init(easy: UnsafeMutableRawPointer) { self.easy = easy }

    mutating func check(_ rc: CURLcode) { if rc != CURLE_OK && error == CURLE_OK { error = rc } }
    mutating func string(_ option: CURLoption, _ value: String) { check(ferry_easy_setopt_string(easy, option, value)) }
    mutating func long(_ option: CURLoption, _ value: Int) { check(ferry_easy_setopt_long(easy, option, value)) }
    mutating func pointer(_ option: CURLoption, _ value: UnsafeMutableRawPointer?) { check(ferry_easy_setopt_ptr(easy, option, value)) }

    /// Protocols, redirects, timeouts, user agent, proxy, the request's headers and its
    /// session's cookie jar. `receiveBuffer` is curl's receive buffer (clamped to 16 KiB to
    /// `CurlTransfer.bufferSize`); `maxRedirects`, what this handle may still follow.
    mutating func common(_ request: EngineRequest, url: String, receiveBuffer: Int, maxRedirects: Int = 10,
                         cookies: CookieJars) {
        string(CURLOPT_URL, url)
        long(CURLOPT_NOSIGNAL, 1)
        string(CURLOPT_PROTOCOLS_STR, "http,https")
        string(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        long(CURLOPT_FOLLOWLOCATION, 1)
        long(CURLOPT_MAXREDIRS, maxRedirects)
        long(CURLOPT_FAILONERROR, 0)           // statuses are judged in the header callbacks
        long(CURLOPT_HTTP_CONTENT_DECODING, 0) // bytes as served
        long(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        long(CURLOPT_TCP_KEEPALIVE, 1)
        // A request to an origin whose connection is still being set up waits to learn
        // whether it can be a stream on it (HTTP/2, which ALPN offers over TLS only)
        // instead of opening one more. Not over plain http, which multiplexes never:
        // there a request could wait behind a slow transfer on the connection it waits for.
        if url.lowercased().hasPrefix("https:") { long(CURLOPT_PIPEWAIT, 1) }
        // "No data for requestTimeout seconds" = below 1 byte/s for that long. curl
        // measures speed over its last 5 s, so once the body has begun a stall is caught
        // here later than that (each attempt's `stallDue`, checked by the loop, is on time).
        let timeout = CurlTransfer.stallSeconds(request)
        long(CURLOPT_LOW_SPEED_LIMIT, 1)
        long(CURLOPT_LOW_SPEED_TIME, Int(timeout.rounded(.up)))
        long(CURLOPT_CONNECTTIMEOUT_MS, Int(timeout * 1000))
        long(CURLOPT_BUFFERSIZE, min(CurlTransfer.bufferSize, max(16 * 1024, receiveBuffer)))
        string(CURLOPT_USERAGENT, CurlTransfer.userAgent)
        if let bundle = TrustedCertificates.bundle { string(CURLOPT_CAINFO, bundle) }
        if let directory = TrustedCertificates.directory { string(CURLOPT_CAPATH, directory) }
        if let proxy = request.proxy {
            string(CURLOPT_PROXY, proxy)
            // The session's own proxy applies to every host, whatever no_proxy says; the
            // desktop's, where ferryd's environment says no_proxy, does not.
            if !request.proxyIsTheDesktops { string(CURLOPT_NOPROXY, "") }
        }
        for header in request.headers {
            // "Name;" is curl's way of sending a header with an empty value.
            addHeader(header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)")
        }
        check(cookies.attach(easy, to: request.cookieJar))
    }

    /// The owner's callbacks: `owner` (unretained; the owner cleans the handle up before
    /// it goes) in CURLOPT_PRIVATE, WRITEDATA and HEADERDATA, and curl's error buffer.
    mutating func callbacks(owner: UnsafeMutableRawPointer, errorBuffer: UnsafeMutablePointer<CChar>,
                            body: CurlDataCallback, header: CurlDataCallback) {
        pointer(CURLOPT_PRIVATE, owner)
        pointer(CURLOPT_WRITEDATA, owner)
        pointer(CURLOPT_HEADERDATA, owner)
        check(ferry_easy_setopt_write_cb(easy, body))
        check(ferry_easy_setopt_header_cb(easy, header))
        pointer(CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(errorBuffer))
    }

    /// Has `probe` learn, before each request is sent, whether it goes out on an HTTP/2
    /// connection (see `ALPNProbe`).
    mutating func probeALPN(_ probe: ALPNProbe) {
        check(ferry_easy_probe_alpn(easy, probe.state))
    }

    mutating func addHeader(_ line: String) {
        headerList = curl_slist_append(headerList, line)
    }

    /// Sets CURLOPT_HTTPHEADER once every header is added.
    mutating func installHeaders() {
        if let headerList { check(ferry_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList)) }
    }

    /// "host:port" of a URL (no user info, path or query), for messages.
    static func hostDescription(_ url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            return "the server"
        }
        let shownHost = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        if let port = components.port { return "\(shownHost):\(port)" }
        return components.scheme?.lowercased() == "https" ? "\(shownHost):443" : "\(shownHost):80"
    }

    /// The handle's response came over HTTP/2 or later (one connection, many streams).
    static func isMultiplexed(_ easy: UnsafeMutableRawPointer?) -> Bool {
        var version = 0
        guard let easy, ferry_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version) == CURLE_OK else { return false }
        return version >= CURL_HTTP_VERSION_2_0
    }

    /// The URL after redirects.
    static func effectiveURL(_ easy: UnsafeMutableRawPointer?, fallback: String) -> String {
        var url: UnsafeMutablePointer<CChar>?
        if let easy, ferry_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK, let url {
            return String(cString: url)
        }
        return fallback
    }
}

/// The certificate authorities TLS is verified against: the system's store (libcurl's
/// default), unless ferryd's environment names others the way curl's users do —
/// `CURL_CA_BUNDLE` or `SSL_CERT_FILE` (a PEM file), `SSL_CERT_DIR` (a hashed folder).
/// This replaces the trusted set (as curl does); nothing turns verification off.
enum TrustedCertificates {
    static let bundle: String? = {
        let environment = ProcessInfo.processInfo.environment
        return [environment["CURL_CA_BUNDLE"], environment["SSL_CERT_FILE"]].lazy.compactMap { $0 }.first { !$0.isEmpty }
    }()

    static let directory: String? = {
        guard let folder = ProcessInfo.processInfo.environment["SSL_CERT_DIR"], !folder.isEmpty else { return nil }
        return folder
    }()
}

/// Whether a handle's request went out as a stream of an HTTP/2 connection (ALPN chose
/// h2), known once the connection is up, before any answer: a request whose shared
/// connection is lost before its answer is no failure of its own (the core tries it again
/// at once, as one whose answer had begun), which libcurl 7.88's `CURLINFO_HTTP_VERSION`
/// (0 until a response) cannot tell. Set on the engine thread by libcurl's pre-request
/// callback (`ferry_easy_probe_alpn`); its owner keeps it as long as the handle.
final class ALPNProbe {
    let state: UnsafeMutablePointer<ferry_alpn_probe>

    init() {
        state = .allocate(capacity: 1)
        state.initialize(to: ferry_alpn_probe(easy: nil, http2: 0))
    }

    deinit { state.deallocate() }

    /// The request last sent (redirects included) went out on an HTTP/2 connection, and
    /// no redirect has answered it since.
    var negotiatedHTTP2: Bool { state.pointee.http2 != 0 }

    /// A redirect answered the request: the next one's connection is not known until
    /// it is sent (libcurl may fail to connect it, and the callback would not run).
    func redirected() { state.pointee.http2 = 0 }
}
