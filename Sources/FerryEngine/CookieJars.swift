import CCurl
import FerryCore
import Foundation

/// The engine's cookie jars: one curl share handle (CURL_LOCK_DATA_COOKIE) per jar, so
/// every attempt with the same jar sees the cookies the others received, and attempts
/// with different jars never see each other's. A file jar is read into its share by
/// the first handle that uses it. It is written back by a handle of its own (never by
/// the attempts' handles, which would rewrite the whole file each time one ends) and
/// only when its cookies changed: `saveChanged()` compares the share's cookies with
/// what was last written whenever a handle that used the jar has gone. Engine thread
/// only (the shares need no locks: one thread uses them).
///
/// Each share also holds the TLS sessions (CURL_LOCK_DATA_SSL_SESSION) of its attempts,
/// and attempts without a jar share one of their own: a new connection to a server
/// resumes the TLS session an earlier attempt made (libcurl keeps them per easy handle
/// otherwise, and an attempt's handle is new). Attempts with different jars never
/// resume each other's sessions, as they never see each other's cookies. Connections
/// and DNS answers are shared by the multi handle already.
///
/// Cookie values are never logged.
final class CookieJars {
    private final class Jar {
        let share: UnsafeMutableRawPointer
        /// File jars: an easy handle that only writes the file (CURLOPT_COOKIEJAR).
        var writer: UnsafeMutableRawPointer?
        /// The cookies as last written (nil: not written by this ferryd yet).
        var written: [String]?
        init(share: UnsafeMutableRawPointer) { self.share = share }
    }

    private var jars: [EngineCookieJar: Jar] = [:]
    /// The jar of each attempt handle attached to one.
    private var handleJars: [UnsafeMutableRawPointer: EngineCookieJar] = [:]
    /// Jars whose cookies may have changed since they were last written.
    private var unsaved: Set<EngineCookieJar> = []
    /// Jars to free once no handle uses them any more.
    private var discarded: [UnsafeMutableRawPointer] = []
    /// The TLS sessions of attempts without a jar (made by the first of them).
    private var withoutJar: UnsafeMutableRawPointer?

    /// A share of TLS sessions, and of cookies when `cookies`.
    private static func makeShare(cookies: Bool) -> UnsafeMutableRawPointer? {
        guard let created = curl_share_init() else { return nil }
        var kinds = [CURL_LOCK_DATA_SSL_SESSION]
        if cookies { kinds.append(CURL_LOCK_DATA_COOKIE) }
        for kind in kinds where ferry_share_setopt_long(created, CURLSHOPT_SHARE, Int(kind.rawValue)) != CURLSHE_OK {
            curl_share_cleanup(created)
            return nil
        }
        return created
    }

    /// Connects `easy` to the jar's cookies (nothing for nil: no cookie engine at all).
    /// Call `detach(easy)` before the handle is cleaned up.
    func attach(_ easy: UnsafeMutableRawPointer, to jar: EngineCookieJar?) -> CURLcode {
        guard let jar else {
            if withoutJar == nil { withoutJar = Self.makeShare(cookies: false) }
            guard let share = withoutJar else { return CURLE_OUT_OF_MEMORY }
            return ferry_easy_setopt_share(easy, share)
        }
        freeDiscarded()
        var first = false
        let entry: Jar
        if let existing = jars[jar] {
            entry = existing
        } else {
            guard let created = Self.makeShare(cookies: true) else { return CURLE_FAILED_INIT }
            entry = Jar(share: created)
            jars[jar] = entry
            first = true
        }
        var rc = ferry_easy_setopt_share(easy, entry.share)
        guard rc == CURLE_OK else { return rc }
        switch jar {
        case .file(let path):
            // Read only once: a later read would put back values that newer answers replaced.
            if first {
                Self.createPrivately(path)
                rc = ferry_easy_setopt_string(easy, CURLOPT_COOKIEFILE, path)
            } else {
                // An empty file name reads nothing but turns the cookie engine on for this handle.
                rc = ferry_easy_setopt_string(easy, CURLOPT_COOKIEFILE, "")
            }
        case .memory:
            rc = ferry_easy_setopt_string(easy, CURLOPT_COOKIEFILE, "")
        }
        if rc == CURLE_OK { handleJars[easy] = jar }
        return rc
    }

    /// The attempt handle `easy` is about to be cleaned up: its jar is checked for
    /// changed cookies at the next `saveChanged()`.
    func detach(_ easy: UnsafeMutableRawPointer) {
        guard let jar = handleJars.removeValue(forKey: easy) else { return }
        if case .file = jar { unsaved.insert(jar) }
    }

    /// Writes the file jars whose cookies changed since they were last written. Cheap
    /// when nothing is unsaved (the common case: one set lookup).
    func saveChanged() {
        guard !unsaved.isEmpty else { return }
        for jar in unsaved { save(jar) }
        unsaved.removeAll()
    }

    private func save(_ jar: EngineCookieJar) {
        guard case .file(let path) = jar, let entry = jars[jar] else { return }
        if entry.writer == nil {
            guard let writer = curl_easy_init() else { return }
            // curl writes a temporary file beside the jar; `install` syncs it and renames
            // it over the jar, then syncs the folder (curl itself syncs nothing).
            guard ferry_easy_setopt_share(writer, entry.share) == CURLE_OK,
                  ferry_easy_setopt_string(writer, CURLOPT_COOKIEJAR, Self.temporary(path)) == CURLE_OK else {
                curl_easy_cleanup(writer)
                return
            }
            entry.writer = writer
        }
        guard let writer = entry.writer else { return }
        let cookies = Self.cookieList(writer)
        guard cookies != entry.written else { return }
        let temporary = Self.temporary(path)
        unlink(temporary) // one left by a crash; created afresh, private
        Self.createPrivately(temporary)
        guard ferry_easy_setopt_string(writer, CURLOPT_COOKIELIST, "FLUSH") == CURLE_OK else { return }
        // Durable, or tried again at the next save: a power cut leaves the old jar or the new one.
        do {
            try DurableFiles.install(temporary, at: path)
            entry.written = cookies
        } catch {}
    }

    /// Where curl writes the jar before it takes the jar's name.
    private static func temporary(_ path: String) -> String { path + ".new" }

    /// The share's cookies, one Netscape-format line each.
    private static func cookieList(_ easy: UnsafeMutableRawPointer) -> [String] {
        var list: UnsafeMutablePointer<curl_slist>?
        guard ferry_easy_getinfo_slist(easy, CURLINFO_COOKIELIST, &list) == CURLE_OK else { return [] }
        defer { curl_slist_free_all(list) }
        var lines: [String] = []
        var node = list
        while let current = node {
            if let data = current.pointee.data { lines.append(String(cString: data)) }
            node = current.pointee.next
        }
        return lines
    }

    /// Saves the jar if it changed, then forgets its cookies in memory (its file, if
    /// any, stays).
    func discard(_ jar: EngineCookieJar) {
        if unsaved.remove(jar) != nil { save(jar) }
        guard let entry = jars.removeValue(forKey: jar) else { return }
        release(entry)
        freeDiscarded()
    }

    /// Saves what changed and frees every share; call after every easy handle is
    /// cleaned up.
    func cleanUp() {
        saveChanged()
        for entry in jars.values { release(entry) }
        jars.removeAll()
        if let share = withoutJar { discarded.append(share) }
        withoutJar = nil
        freeDiscarded()
    }

    private func release(_ entry: Jar) {
        if let writer = entry.writer {
            // Without a jar file name, cleaning up writes nothing (saved above when needed).
            _ = ferry_easy_setopt_string(writer, CURLOPT_COOKIEJAR, nil)
            curl_easy_cleanup(writer)
            entry.writer = nil
        }
        discarded.append(entry.share)
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
