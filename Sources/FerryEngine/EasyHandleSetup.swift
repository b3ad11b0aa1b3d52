import CCurl
import FerryCore
import Foundation

/// The options every Ferry easy handle gets (protocols, timeouts, proxy, headers), for
/// uploads and range connections. Records the first setopt failure.
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

    /// Protocols, redirects, timeouts, user agent, proxy and the request's headers.
    mutating func common(_ request: EngineRequest, url: String, receiveBuffer: Int) {
        string(CURLOPT_URL, url)
        long(CURLOPT_NOSIGNAL, 1)
        string(CURLOPT_PROTOCOLS_STR, "http,https")
        string(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        long(CURLOPT_FOLLOWLOCATION, 1)
        long(CURLOPT_MAXREDIRS, 10)
        long(CURLOPT_FAILONERROR, 0)
        long(CURLOPT_HTTP_CONTENT_DECODING, 0)
        long(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        long(CURLOPT_TCP_KEEPALIVE, 1)
        let timeout = CurlTransfer.stallSeconds(request)
        long(CURLOPT_LOW_SPEED_LIMIT, 1)
        long(CURLOPT_LOW_SPEED_TIME, Int(timeout.rounded(.up)))
        long(CURLOPT_CONNECTTIMEOUT_MS, Int(timeout * 1000))
        long(CURLOPT_BUFFERSIZE, min(CurlTransfer.bufferSize, max(16 * 1024, receiveBuffer)))
        string(CURLOPT_USERAGENT, CurlTransfer.userAgent)
        if let proxy = request.proxy { string(CURLOPT_PROXY, proxy) }
        for header in request.headers {
            addHeader(header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)")
        }
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

    /// The URL after redirects.
    static func effectiveURL(_ easy: UnsafeMutableRawPointer?, fallback: String) -> String {
        var url: UnsafeMutablePointer<CChar>?
        if let easy, ferry_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK, let url {
            return String(cString: url)
        }
        return fallback
    }
}
