import CCurl
import FerryCore
import Foundation

/// Turns a libcurl result into a transfer failure a person can act on. Messages name
/// the host and port, never a header value or the URL's query or user info.
enum CurlFailure {
    static func error(for code: CURLcode, in transfer: CurlFailureContext) -> CoreError {
        let host = transfer.hostDescription
        let detail = transfer.curlErrorDetail
        let seconds = secondsText(transfer.request.requestTimeout)
        let isUpload = transfer.request.upload != nil
        let via = isUpload ? "uploading to \(host)" : "downloading from \(host)"
        if (code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR) && detail.hasPrefix(givenUp) {
            // libcurl sends a request again, on a fresh connection, when an HTTP/2 server
            // refuses its stream or a reused connection dies before any answer; it gives
            // up after a few such tries (counted per handle, redirects included: no number
            // is given here).
            return .network("\(host) did not answer the request: it was sent again on fresh connections until libcurl gave up, each time refused by the server (HTTP/2 REFUSED_STREAM) or closed before any answer")
        }
        if let refusal = tunnelRefusal(code, transfer) { return refusal }
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST where resolvedNameIsTheProxy(transfer):
            // A SOCKS proxy's own name that does not resolve comes as the host's (libcurl 7.88).
            return .network("Could not resolve the host name of the proxy \(proxyDescription(transfer) ?? "")"
                .trimmingCharacters(in: .whitespaces))
        case CURLE_COULDNT_RESOLVE_HOST:
            return .network("Could not resolve the host name of \(host)")
        case CURLE_COULDNT_RESOLVE_PROXY:
            return .network("Could not resolve the host name of the proxy \(proxyDescription(transfer) ?? "")"
                .trimmingCharacters(in: .whitespaces))
        case CURLE_COULDNT_CONNECT where proxyDescription(transfer) != nil:
            // With a proxy every connection goes to the proxy, not to the server.
            let proxy = proxyDescription(transfer)!
            switch Int32(transfer.osErrno) {
            case ECONNREFUSED: return .network("Connection refused by the proxy \(proxy) (\(via))")
            case ENETUNREACH, EHOSTUNREACH: return .network("No route to the proxy \(proxy) (\(via))")
            default: return .network("Could not connect to the proxy \(proxy) (\(via))")
            }
        case CURLE_COULDNT_CONNECT:
            switch Int32(transfer.osErrno) {
            case ECONNREFUSED: return .network("Connection refused by \(host)")
            case ENETUNREACH: return .network("The network is unreachable (connecting to \(host))")
            case EHOSTUNREACH: return .network("No route to \(host)")
            default: return .network("Could not connect to \(host)")
            }
        case CURLE_OPERATION_TIMEDOUT:
            if transfer.requestWasSent { return stalled(transfer) }
            return .timeout("Could not connect to \(host) within \(seconds)")
        case CURLE_PARTIAL_FILE:
            let expected = transfer.expectedTotal >= 0 ? " of \(transfer.expectedTotal)" : ""
            return .network("The connection to \(host) closed after \(transfer.bytesOnDisk)\(expected) bytes")
        case CURLE_GOT_NOTHING:
            return .network("\(host) closed the connection without sending a response")
        case CURLE_SEND_ERROR:
            return .network("The connection to \(host) failed while sending the request")
        case CURLE_RECV_ERROR:
            if Int32(transfer.osErrno) == ECONNRESET {
                return .network("The connection to \(host) was reset")
            }
            return .network("The connection to \(host) failed while receiving data")
        case CURLE_WEIRD_SERVER_REPLY, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_HTTP3, CURLE_BAD_CONTENT_ENCODING:
            return .network("\(host) sent a malformed response")
        case CURLE_TOO_MANY_REDIRECTS:
            return .tooManyRedirects("More than 10 redirects, starting at \(hostOnly(transfer.request.url))")
        case CURLE_UNSUPPORTED_PROTOCOL:
            if let location = transfer.lastLocation {
                let scheme = location.split(separator: ":", maxSplits: 1).first.map(String.init) ?? location
                return .network("Redirected to a \(scheme.lowercased()): URL; only http and https are allowed")
            }
            if detail.contains("HTTP/0.9") {
                // curl takes a reply without a status line for HTTP/0.9, which it refuses.
                return .network("\(host) answered without an HTTP status line (an HTTP/0.9 reply, or not HTTP at all)")
            }
            let why = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            return .network("\(host) sent a reply that is not usable HTTP: \(why)")
        case CURLE_URL_MALFORMAT:
            return .network("The URL is not valid")
        case CURLE_PROXY:
            return .network("The proxy refused the connection to \(host)")
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_SHUTDOWN_FAILED,
             CURLE_SSL_CRL_BADFILE, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED,
             CURLE_SSL_ENGINE_INITFAILED, CURLE_USE_SSL_FAILED, CURLE_SSL_CLIENTCERT:
            let why = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            return .tls("A secure connection to \(host) could not be made: \(why)")
        case CURLE_WRITE_ERROR:
            return .disk("Could not write \(transfer.writtenPath)")
        case CURLE_OUT_OF_MEMORY where transfer.requestWasSent:
            // libcurl's answer to a response header line over its 100 KiB (or headers
            // over 300 KiB in all): the same request gets the same header again.
            return .unusableResponse("\(host) sent a response header larger than Ferry accepts (100 KiB a line, 300 KiB in all)")
        case CURLE_OUT_OF_MEMORY:
            return .network("Out of memory while \(via)")
        default:
            let why = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            return .network("\(isUpload ? "Upload to" : "Download from") \(host) failed: \(why)")
        }
    }

    /// A failed request that went out as a stream of an HTTP/2 connection and had no
    /// answer (the caller knows that): the engine says so (`EngineEvent.unansweredStream`),
    /// so that the loss of the shared connection does not count against the transfer. Not
    /// when libcurl itself sent it again until it gave up: that server refuses it.
    static func isUnansweredStream(_ alpn: ALPNProbe, detail: String) -> Bool {
        alpn.negotiatedHTTP2 && !detail.hasPrefix(givenUp)
    }

    /// How libcurl's message begins when it has sent a request again too many times
    /// ("Connection died, tried 5 times before giving up").
    static let givenUp = "Connection died, tried "

    /// An HTTP proxy that would not open a tunnel (`CONNECT`, for an https URL) to the
    /// server: libcurl reports a receive error, which would name the server. Its status
    /// decides, as a server's would: 407 (credentials missing or refused) and other 4xx
    /// are not tried again, 5xx (the proxy could not reach the server) are. Nil when no
    /// tunnel was refused.
    static func tunnelRefusal(_ code: CURLcode, _ transfer: CurlFailureContext) -> CoreError? {
        let status = transfer.proxyConnectStatus
        guard code != CURLE_OK, status != 0, !(200..<300).contains(status) else { return nil }
        let who = proxyDescription(transfer).map { "The proxy \($0)" } ?? "The proxy"
        let host = transfer.hostDescription
        let text = HTTPReasonPhrase.standard(status).map { "HTTP \(status) \($0)" } ?? "HTTP \(status)"
        guard status >= 400 else { return .network("\(who) answered \(text) when asked for a tunnel to \(host)") }
        let hint = status != 407 ? ""
            : !transfer.request.proxyIsTheDesktops
            ? ": it wants credentials, and those in the session's proxy URL (user:password@) were missing or refused"
            : Redaction.urlWithoutCredentials(transfer.request.proxy ?? "") != (transfer.request.proxy ?? "")
            ? ": it wants credentials, and those of the desktop's proxy settings were refused"
            : ": it wants credentials, which the desktop's proxy settings do not give (a session's proxy URL can carry them: user:password@)"
        return .http(status: status, "\(who) refused a tunnel to \(host) with \(text)\(hint)")
    }

    /// "host:port" of the proxy the request went through (the session's `proxy` or the
    /// desktop's, else the environment's for the URL's scheme), without credentials; nil
    /// without one.
    static func proxyDescription(_ transfer: CurlFailureContext) -> String? {
        var proxy = transfer.request.proxy
        // With no_proxy set, the environment's proxy, and the desktop's (left to no_proxy
        // as well), may not apply to this host: name none.
        if proxy == nil || transfer.request.proxyIsTheDesktops, !EnvironmentProxy.noProxy().isEmpty { return nil }
        if proxy == nil { proxy = EnvironmentProxy.proxy(for: transfer.request.url) }
        guard let proxy, !proxy.isEmpty else { return nil }
        let withScheme = proxy.contains("://") ? proxy : "http://" + proxy
        guard let components = URLComponents(string: withScheme), let host = components.host, !host.isEmpty else {
            return "(unreadable proxy address)"
        }
        let shownHost = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(shownHost):\(components.port ?? 1080)"
    }

    /// libcurl's "Could not resolve host: NAME" names the proxy's host (a SOCKS proxy's
    /// name is resolved as a host's).
    static func resolvedNameIsTheProxy(_ transfer: CurlFailureContext) -> Bool {
        let marker = "Could not resolve host: "
        guard let proxy = proxyDescription(transfer), let range = transfer.curlErrorDetail.range(of: marker) else { return false }
        let name = transfer.curlErrorDetail[range.upperBound...].trimmingCharacters(in: .whitespaces)
        let targetHost = URLComponents(string: transfer.request.url)?.host ?? ""
        guard !name.isEmpty, name.caseInsensitiveCompare(targetHost) != .orderedSame else { return false }
        let proxyHost = proxy.hasPrefix("[") ? String(proxy.dropFirst().prefix { $0 != "]" }) : String(proxy.prefix { $0 != ":" })
        return name.caseInsensitiveCompare(proxyHost) == .orderedSame
    }

    /// Nothing came from the server for `request-timeout`.
    static func stalled(_ transfer: CurlFailureContext) -> CoreError {
        stalled(host: transfer.hostDescription, request: transfer.request)
    }

    static func stalled(host: String, request: EngineRequest) -> CoreError {
        .timeout("No data from \(host) for \(secondsText(request.requestTimeout))")
    }

    /// "60 s", "1.5 s".
    static func secondsText(_ seconds: Double) -> String {
        let value = max(1, seconds)
        if value == value.rounded() && value < 1e9 { return "\(Int(value)) s" }
        return String(format: "%.1f s", value)
    }

    private static func hostOnly(_ url: String) -> String {
        URLComponents(string: url)?.host ?? "the server"
    }
}
