import CCurl
import FerryCore
import Logging

/// The desktop's proxy for each origin, for the requests that neither their session nor
/// ferryd's environment gives a proxy (`DesktopProxyLookup`: the portal's
/// `ProxyResolver`, which reads GNOME's or KDE's network proxy settings, a PAC script
/// included). One question per origin; the answer is kept `keptFor`, and forgotten when
/// the network moves (another network may have another proxy). A request whose origin
/// has no answer yet waits for it (`AwaitingProxy`), as do the others to that origin
/// meanwhile. Where nothing answers (no portal), every request goes direct, as before,
/// and the question is asked again only after `unavailableFor` or a move.
/// Engine thread only.
final class DesktopProxies {
    static let keptFor: UInt64 = 60 * 1_000_000_000
    static let unavailableFor: UInt64 = 300 * 1_000_000_000
    /// After a question that failed (timed out, refused), nothing is asked for this long,
    /// doubled for each failure in a row up to `unavailableFor`: a portal that hangs
    /// does not hold every new origin's first request its 5 s each time.
    static let failedFor: UInt64 = 5 * 1_000_000_000
    /// Origins kept at most: beyond, the table starts afresh (a question each again).
    static let maximumOrigins = 1024
    /// Of an answer, the longest proxy taken (at most `DesktopProxyAnswer.maximumProxies` are looked at).
    static let maximumProxyLength = 2048

    /// One question: an origin, asked in a `generation` (the network it was asked on).
    struct Question: Hashable {
        let origin: String
        let generation: Int
    }

    private let lookup: DesktopProxyLookup
    private let inbox: EngineInbox
    private let logger: Logger
    /// The answer for each origin: the proxy (nil: direct) and until when it holds. An
    /// entry outlives its time until asked again, so that a changed answer is logged,
    /// and it is used while nothing is asked (`quietUntil`).
    private var known: [String: (proxy: String?, until: UInt64)] = [:]
    /// The attempts waiting for each question's answer; a question is here while it is out.
    private var waiting: [Question: [AwaitingProxy]] = [:]
    /// Until when nothing is asked (no portal, or questions failing): requests go direct.
    private var quietUntil: UInt64 = 0
    /// Questions failed in a row (`failedFor`).
    private var failuresInARow = 0
    /// Bumped by `forget` (the network moved): answers to questions asked before are
    /// not used.
    private var generation = 0

    init(lookup: DesktopProxyLookup, inbox: EngineInbox, logger: Logger) {
        self.lookup = lookup
        self.inbox = inbox
        self.logger = logger
    }

    /// The proxy for `origin` if known now (`.some(nil)`: direct), or nil when it must
    /// be asked (`wait`). While nothing is asked (`quietUntil`), an origin without an
    /// answer goes direct; one with an answer keeps it (also one whose question again
    /// failed: its last answer).
    func proxy(for origin: String, now: UInt64) -> String?? {
        if let entry = known[origin], now < entry.until || now < quietUntil { return .some(entry.proxy) }
        if now < quietUntil { return .some(nil) }
        return nil
    }

    /// `waiter` waits for `origin`'s answer; the question goes out if it is not out yet.
    func wait(_ waiter: AwaitingProxy, for origin: String) {
        let question = Question(origin: origin, generation: generation)
        if waiting[question] != nil {
            waiting[question]!.append(waiter)
            return
        }
        waiting[question] = [waiter]
        logger.debug("asking the desktop which proxy \(origin) goes through")
        let inbox = inbox
        lookup.lookup(origin) { answer in
            inbox.post(.desktopProxy(origin: question.origin, generation: question.generation, answer))
        }
    }

    /// An answer came: returns the proxy chosen (nil: direct) and who waited for it
    /// (none when it is the answer to a question of before a move: those asked again).
    func answered(_ origin: String, generation asked: Int, _ answer: DesktopProxyAnswer, now: UInt64) -> (String?, [AwaitingProxy]) {
        let waiters = waiting.removeValue(forKey: Question(origin: origin, generation: asked)) ?? []
        guard asked == generation else { return (nil, []) }
        let proxy: String?
        switch answer {
        case .proxies(let proxies):
            failuresInARow = 0
            proxy = Self.choice(proxies)
            if proxy == nil, !proxies.contains(where: { $0.lowercased().hasPrefix("direct:") }) {
                logger.notice("the desktop's proxy for \(origin) is none Ferry can use (\(Self.shown(proxies))); going direct")
            }
            let before = known[origin]
            if before == nil || before!.proxy != proxy {
                logger.info("proxy for \(origin): \(proxy.map { Self.shown([$0])[0] } ?? "none, direct") (the desktop's settings)")
            }
            if known.count >= Self.maximumOrigins, before == nil { known.removeAll(keepingCapacity: true) }
            known[origin] = (proxy, now &+ Self.keptFor)
        case .unavailable(let why):
            proxy = nil
            if now >= quietUntil {
                logger.info("no desktop proxy settings (\(why)): requests without a proxy of their session's or the environment's go direct")
            }
            quietUntil = max(quietUntil, now &+ Self.unavailableFor)
        case .failed(let why):
            // An origin asked again (its minute over) keeps its last answer meanwhile:
            // behind a proxy, going direct would fail.
            let before = known[origin]
            proxy = before?.proxy
            // Questions out together that fail together count as one failure.
            guard now >= quietUntil else { break }
            failuresInARow += 1
            let wait = min(Self.failedFor << UInt64(min(failuresInARow - 1, 6)), Self.unavailableFor)
            let meanwhile = before == nil ? "going direct" : "keeping its last answer"
            logger.notice("could not ask the desktop which proxy \(origin) goes through (\(why)); \(meanwhile), asking again in \(wait / 1_000_000_000) s")
            quietUntil = now &+ wait
        }
        return (proxy, waiters)
    }

    /// The network moved: the answers of before are asked again, also for the requests
    /// waiting for one (another network may have another proxy, or a PAC script that
    /// answers otherwise).
    /// `current`: whether a waiter still waits (not stopped meanwhile).
    func forget(current: (AwaitingProxy) -> Bool) {
        known.removeAll()
        quietUntil = 0
        failuresInARow = 0
        generation += 1
        let before = waiting
        waiting.removeAll()
        for (question, waiters) in before {
            for waiter in waiters where current(waiter) { wait(waiter, for: question.origin) }
        }
    }

    /// How the log shows proxies of an answer: without credentials, clipped, at most four.
    static func shown(_ proxies: [String]) -> [String] {
        proxies.prefix(4).map { String(Redaction.urlWithoutCredentials($0, slashesInAuthority: true).prefix(200)) }
    }

    /// The proxy libcurl goes through for the first answer it can use (nil: direct, also
    /// when none can be used). The portal answers as GLib's `GProxyResolver` does: URLs
    /// such as `http://host:port`, `socks://host:port` (SOCKS 5, names resolved by the
    /// proxy) or `direct://`.
    static func choice(_ proxies: [String]) -> String? {
        for proxy in proxies.prefix(DesktopProxyAnswer.maximumProxies) where proxy.utf8.count <= maximumProxyLength {
            guard let colon = proxy.firstIndex(of: ":") else { continue }
            let scheme = proxy[..<colon].lowercased()
            let rest = proxy[colon...]
            if scheme == "direct" { return nil }
            guard rest.hasPrefix("://"), rest.count > 3, !proxy.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } == true }) else { continue }
            switch scheme {
            case "http", "https", "socks4", "socks4a", "socks5", "socks5h": return scheme + rest
            case "socks": return "socks5h" + rest
            default: continue
            }
        }
        return nil
    }

    /// What the question is asked for: `scheme://host[:port]/` of `url`, without
    /// credentials or path. Nil for what is not a URL with an authority (not asked).
    static func origin(of url: String) -> String? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "http" || scheme == "https" else { return nil }
        let afterScheme = url[schemeEnd.upperBound...]
        var authority = afterScheme.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        guard !authority.isEmpty else { return nil }
        return scheme + "://" + authority.lowercased() + "/"
    }
}

/// A request waiting for its origin's desktop proxy (`DesktopProxies`): no handle, no
/// file yet. When the answer comes, the loop starts it (`EngineLoop.begin`) in its place.
final class AwaitingProxy: EngineAttempt {
    private(set) var request: EngineRequest
    let attempt: UInt64
    var id: TransferID { request.id }
    private unowned let loop: EngineLoop

    init(request: EngineRequest, attempt: UInt64, loop: EngineLoop) {
        self.request = request
        self.attempt = attempt
        self.loop = loop
    }

    func stop() {
        // Nothing was opened: the part file is as it was.
        loop.attemptEnded(self, .stopped(bytesOnDisk: request.offset))
    }

    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode) {}
    func setSpeedLimit(_ bytesPerSecond: UInt64) { request.speedLimit = bytesPerSecond }
    func reportProgressIfDue(now: UInt64) -> UInt64? { nil }
    var stallDue: UInt64? { nil }
    func stalled(now: UInt64) {}
    func abandon() {}
    func jobDone(_ job: AttemptJob) {}
    func service() {}
}
