import CCurl
import FerryCore
import Foundation

/// The engine's cookie jars: one curl share handle (CURL_LOCK_DATA_COOKIE) per jar, so
/// every attempt with the same jar sees the cookies the others received, and attempts
/// with different jars never see each other's. A file jar is read into its share by
/// the first handle that uses it and written back (whole) when each handle is cleaned
/// up. Engine thread only (the shares need no locks: one thread uses them).
///
/// Cookie values are never logged.
final class CookieJars {
    private var shares: [EngineCookieJar: UnsafeMutableRawPointer] = [:]
    /// Jars to free once no handle uses them any more.
    private var discarded: [UnsafeMutableRawPointer] = []

    /// Connects `easy` to the jar's cookies (nothing for nil: no cookie engine at all).
    func attach(_ easy: UnsafeMutableRawPointer, to jar: EngineCookieJar?) -> CURLcode {
        guard let jar else { return CURLE_OK }
        freeDiscarded()
        var first = false
        let share: UnsafeMutableRawPointer
        if let existing = shares[jar] {
            share = existing
        } else {
            guard let created = curl_share_init() else { return CURLE_OUT_OF_MEMORY }
            guard ferry_share_setopt_long(created, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_COOKIE.rawValue)) == CURLSHE_OK else {
                curl_share_cleanup(created)
                return CURLE_FAILED_INIT
            }
            shares[jar] = created
            share = created
            first = true
        }
        var rc = ferry_easy_setopt_share(easy, share)
        guard rc == CURLE_OK else { return rc }
        switch jar {
        case .file(let path):
            Self.createPrivately(path)
            // Read only once: a later read would put back values that newer answers replaced.
            if first { rc = ferry_easy_setopt_string(easy, CURLOPT_COOKIEFILE, path) }
            if rc == CURLE_OK { rc = ferry_easy_setopt_string(easy, CURLOPT_COOKIEJAR, path) }
        case .memory:
            // An empty file name reads nothing but turns the cookie engine on for this handle.
            rc = ferry_easy_setopt_string(easy, CURLOPT_COOKIEFILE, "")
        }
        return rc
    }

    /// Forgets a jar's cookies in memory (its file, if any, stays).
    func discard(_ jar: EngineCookieJar) {
        guard let share = shares.removeValue(forKey: jar) else { return }
        discarded.append(share)
        freeDiscarded()
    }

    /// Frees every share; call after every easy handle is cleaned up.
    func cleanUp() {
        discarded.append(contentsOf: shares.values)
        shares.removeAll()
        freeDiscarded()
    }

    private func freeDiscarded() {
        // CURLSHE_IN_USE while a handle still uses it: tried again later.
        discarded.removeAll { curl_share_cleanup($0) == CURLSHE_OK }
    }

    /// Creates a missing jar file, and narrows an existing one, to mode 0600, so that
    /// curl (which keeps the mode of the file it rewrites) never writes cookies
    /// readable by others. A symbolic link is not followed.
    private static func createPrivately(_ path: String) {
        let fd = path.withCString { open($0, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0o600) }
        guard fd >= 0 else { return }
        var st = stat()
        if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_mode & 0o077 != 0 { _ = fchmod(fd, 0o600) }
        close(fd)
    }
}
