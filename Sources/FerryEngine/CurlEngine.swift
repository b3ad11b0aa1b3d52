import CCurl
import FerryCore
import Foundation
import Logging
import Synchronization

/// The production `TransferEngine`: libcurl's multi interface driven by one engine
/// thread for all transfers.
///
/// Callers post commands into a locked inbox and wake the thread with
/// `curl_multi_wakeup`; the thread owns every curl handle and every part file
/// descriptor, and calls the event handler (in order per transfer) from itself.
/// When idle the thread sleeps in `curl_multi_poll` and uses no CPU.
///
/// `shutdown()` stops every attempt without events (part files are kept and closed)
/// and joins the thread; it also runs on `deinit`.
public final class CurlEngine: TransferEngine, Sendable {
    /// libcurl's own URL parser's refusal of `url` (which the daemon's checks passed):
    /// the two disagree on some broken URLs (`http://u:p@@host/`, a `%00` in the
    /// password, a non-ASCII host name with no IDNA form), which would otherwise fail
    /// as `Network` after every retry.
    public func urlRefusal(_ url: String) -> String? {
        let rc = ferry_url_check(url)
        guard rc != CURLUE_OK else { return nil }
        if rc == CURLUE_OUT_OF_MEMORY { return nil } // not the URL's fault: the transfer will say
        return String(cString: curl_url_strerror(rc))
    }

    /// Every unanswered request that went out as an HTTP/2 stream is said
    /// (`EngineEvent.unansweredStream`): with libcurl on OpenSSL, whose ALPN the
    /// pre-request callback reads (`ALPNProbe`). Else only answers say.
    public let reportsUnansweredStreams: Bool

    // Sendable: what other threads share is `inbox` (locked), `thread` (written once,
    // in init) and `joined` (a Mutex, held while joining). Curl handles and files are
    // touched only by the engine thread (EngineLoop).
    private let inbox: EngineInbox
    private let thread: pthread_t
    /// The thread was joined or detached.
    private let joined = Mutex(false)

    /// Connections kept open for reuse once idle, over all hosts.
    static let idleConnectionsKept = 32

    /// How often a running download's part file is synced, so that after a power cut
    /// its bytes up to the last sync are trusted (`PartFileWriteback.syncIfDue`): 5 s
    /// unless set. Call before the first engine starts (ferryd: the testing knob
    /// `FERRY_PART_SYNC_MS`).
    public static func setPartSyncInterval(milliseconds: UInt64) {
        PartFileWriteback.syncInterval = max(milliseconds, 1) * 1_000_000
    }

    /// Starts the engine thread. `desktopProxies`: where to ask the proxy of a request
    /// that names none (`EngineRequest.proxy` nil); nil leaves it to libcurl (the
    /// environment's variables).
    public init(logger: Logger = Logger(label: "org.ferry.engine"), desktopProxies: DesktopProxyLookup? = nil) {
        CurlGlobal.initialize()
        reportsUnansweredStreams = ferry_alpn_probe_works() != 0 // after curl_global_init
        guard let multi = curl_multi_init() else {
            fatalError("curl_multi_init failed (out of memory)")
        }
        // Transfers to one origin share an HTTP/2 connection as streams (up to the
        // server's limit, at most 100 each), as many as there are.
        _ = ferry_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = ferry_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, Limits.streamsPerConnection)
        // Idle connections kept for reuse (libcurl's default grows with the handles ever
        // added: after a batch, hundreds stayed open until ferryd exited).
        _ = ferry_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, Self.idleConnectionsKept)
        let inbox = EngineInbox(multi: multi)
        let loop = EngineLoop(multi: multi, inbox: inbox, desktopProxies: desktopProxies, logger: logger)
        self.inbox = inbox
        var tid = pthread_t()
        // The retained loop is released by the thread's entry function.
        let context = Unmanaged.passRetained(loop).toOpaque()
        let rc = pthread_create(&tid, nil, engineThreadMain, context)
        guard rc == 0 else {
            fatalError("could not start the engine thread: \(String(cString: strerror(rc)))")
        }
        self.thread = tid
    }

    deinit {
        shutdown()
        joined.withLock { joined in
            if !joined { pthread_detach(thread); joined = true }
        }
    }

    /// Where events go; called on the engine thread. Set it before the first `start`.
    public func setEventHandler(_ handler: @escaping @Sendable (EngineEvent) -> Void) {
        inbox.setHandler(handler)
    }

    /// Starts an attempt. A `.completed` event always follows (unless the engine shuts down).
    public func start(_ request: EngineRequest) {
        inbox.post(.start(request))
    }

    /// Stops an attempt; `.completed(id, .stopped)` follows unless it already completed.
    public func stop(_ id: TransferID) {
        inbox.post(.stop(id))
    }

    /// Changes the speed limit of a running attempt (0 = unlimited).
    public func setSpeedLimit(_ id: TransferID, bytesPerSecond: UInt64) {
        inbox.post(.setSpeedLimit(id, bytesPerSecond))
    }

    /// Forgets an in-memory cookie jar's cookies (a file jar's file stays).
    public func discardCookies(_ jar: EngineCookieJar) {
        inbox.post(.discardCookies(jar))
    }

    /// The network moved (or the system woke up, or the network came back): every
    /// connection is shut down but those of the requests still going, so what starts
    /// after this makes new ones (see `EngineLoop`).
    public func forgetConnections() {
        inbox.post(.forgetConnections)
    }

    /// Stops every attempt silently (no `.completed` events; part files are closed and
    /// kept) and ends the engine thread. No events are delivered after this returns.
    /// Called from the event handler itself, it returns at once and the thread ends
    /// as soon as the handler returns.
    public func shutdown() {
        inbox.close()
        if pthread_equal(pthread_self(), thread) != 0 { return }
        joined.withLock { joined in
            if !joined {
                pthread_join(thread, nil)
                joined = true
            }
        }
    }
}

private func engineThreadMain(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let loop = Unmanaged<EngineLoop>.fromOpaque(context!).takeRetainedValue()
    Thread.current.name = "ferry-engine"
    ferry_use_utf8_ctype() // international host names (see the shim)
    loop.run()
    return nil
}

/// `curl_global_init` once per process, before the first handle.
enum CurlGlobal {
    private static let done: Bool = {
        ferry_global_init() == CURLE_OK
    }()

    static func initialize() {
        precondition(done, "curl_global_init failed")
    }
}
