import CCurl
import FerryCore
import Foundation

/// What `CurlFailure` needs to word a failed handle's error.
protocol CurlFailureContext {
    var request: EngineRequest { get }
    /// "host:port" of the URL being fetched.
    var hostDescription: String { get }
    /// libcurl's own words for the last error.
    var curlErrorDetail: String { get }
    var osErrno: Int { get }
    /// The connection was up and the request sent (a timeout after that is a stall).
    var requestWasSent: Bool { get }
    var expectedTotal: Int64 { get }
    var bytesOnDisk: Int64 { get }
    var lastLocation: String? { get }
    /// The file a write error concerns.
    var writtenPath: String { get }
    /// The status an HTTP proxy answered a tunnel (`CONNECT`) with; 0 when none was asked for.
    var proxyConnectStatus: Int { get }
}

extension CurlTransfer: CurlFailureContext {
    var writtenPath: String { file.path }
}

/// A snapshot of a finished easy handle's failure details, taken before it is cleaned up.
struct HandleFailureContext: CurlFailureContext {
    var request: EngineRequest
    var hostDescription: String
    var curlErrorDetail: String
    var osErrno: Int
    var requestWasSent: Bool
    var expectedTotal: Int64
    var bytesOnDisk: Int64
    var lastLocation: String?
    var writtenPath: String
    var proxyConnectStatus: Int

    init(easy: UnsafeMutableRawPointer, request: EngineRequest, url: String, errorBuffer: UnsafePointer<CChar>,
         expectedTotal: Int64, bytesOnDisk: Int64, lastLocation: String?, writtenPath: String) {
        self.request = request
        self.hostDescription = EasyHandleSetup.hostDescription(EasyHandleSetup.effectiveURL(easy, fallback: url))
        self.curlErrorDetail = String(cString: errorBuffer)
        var errnoValue = 0
        _ = ferry_easy_getinfo_long(easy, CURLINFO_OS_ERRNO, &errnoValue)
        self.osErrno = errnoValue
        var pretransfer: curl_off_t = 0
        _ = ferry_easy_getinfo_off(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
        self.requestWasSent = pretransfer > 0
        self.expectedTotal = expectedTotal
        self.bytesOnDisk = bytesOnDisk
        self.lastLocation = lastLocation
        self.writtenPath = writtenPath
        var connectStatus = 0
        _ = ferry_easy_getinfo_long(easy, CURLINFO_HTTP_CONNECTCODE, &connectStatus)
        self.proxyConnectStatus = connectStatus
    }
}
