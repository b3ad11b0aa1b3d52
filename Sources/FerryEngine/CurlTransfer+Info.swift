import CCurl
import Foundation

/// What libcurl knows of a download's handle, for its outcome and its errors.
extension CurlTransfer {
    // MARK: - What curl knows

    var effectiveURL: String { EasyHandleSetup.effectiveURL(easy, fallback: request.url) }

    /// "host:port" of the URL being fetched (no user info, path or query).
    var hostDescription: String { EasyHandleSetup.hostDescription(effectiveURL) }

    /// libcurl's own words for the last error (no header values in there).
    var curlErrorDetail: String { String(cString: errorBuffer) }

    /// Redirects curl followed on this handle.
    var redirectCount: Int {
        var value = 0
        if let easy { _ = ferry_easy_getinfo_long(easy, CURLINFO_REDIRECT_COUNT, &value) }
        return value
    }

    var osErrno: Int {
        var value = 0
        if let easy { _ = ferry_easy_getinfo_long(easy, CURLINFO_OS_ERRNO, &value) }
        return value
    }

    /// The status an HTTP proxy answered this handle's tunnel (`CONNECT`) with; 0: none asked.
    var proxyConnectStatus: Int {
        var value = 0
        if let easy { _ = ferry_easy_getinfo_long(easy, CURLINFO_HTTP_CONNECTCODE, &value) }
        return value
    }

    /// Whether the connection was up and the request sent (a timeout after that is a stall).
    var requestWasSent: Bool {
        var value: curl_off_t = 0
        if let easy { _ = ferry_easy_getinfo_off(easy, CURLINFO_PRETRANSFER_TIME_T, &value) }
        return value > 0
    }
}
