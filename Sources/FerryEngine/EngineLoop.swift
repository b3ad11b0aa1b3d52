import CCurl
import Crypto
import FerryCore
import Foundation
import Logging

/// The engine thread's body: owns the multi handle and every attempt, runs
/// poll -> perform -> collect finished, and applies commands from the inbox.
/// Everything here runs on the engine thread (background file jobs only post back).
final class EngineLoop {
    /// Idle wait; curl_multi_poll returns sooner for curl's own timers and on wakeup.
    private static let pollTimeoutMs: Int32 = 60_000

    fileprivate let multi: UnsafeMutableRawPointer
    fileprivate let inbox: EngineInbox
    private let logger: Logger
    /// Every transfer's current attempt, of whatever kind: the only table.
    private var attempts: [TransferID: EngineAttempt] = [:]
    /// The attempt owning each easy handle in the multi.
    private var handleOwners: [UnsafeMutableRawPointer: EngineAttempt] = [:]
    /// Attempts whose callbacks asked for work outside libcurl's callbacks.
    fileprivate var needingService: [EngineAttempt] = []
    /// Handles paused by their speed limit, to resume when their pace allows.
    private var throttledTransfers: [ObjectIdentifier: PacedHandle] = [:]
    /// Attempts started so far: each one's number tells its jobs' results from an older one's.
    private var attemptsStarted: UInt64 = 0
    /// One curl share per cookie jar.
    let cookies = CookieJars()
    /// Every connection's socket (kept until after `curl_multi_cleanup`, which closes
    /// the last through it).
    private let sockets = ConnectionSockets()
    /// The TLS handshake's ALPN choice can be read for a handle (OpenSSL).
    private let alpnReadable = ferry_alpn_probe_works() != 0
    /// When the connections were last forgotten (monotonic ns), nil before: names looked
    /// up before then are looked up again (`dnsCacheTimeout`).
    private var forgotAt: UInt64?
    /// Opening part files, fdatasync and prefix hashing: slow disk work kept off the engine thread.
    let fileJobs = FileJobQueues(label: "org.ferry.engine.files")

    /// The desktop's proxies, for requests that name none (nil: ferryd's environment
    /// names one, or no one to ask).
    private let desktopProxies: DesktopProxies?

    init(multi: UnsafeMutableRawPointer, inbox: EngineInbox, desktopProxies lookup: DesktopProxyLookup?, logger: Logger) {
        self.multi = multi
        self.inbox = inbox
        self.logger = logger
        desktopProxies = lookup.map { DesktopProxies(lookup: $0, inbox: inbox, logger: logger) }
        if let bundle = TrustedCertificates.bundle { logger.info("TLS: trusting the certificate authorities in \(bundle)") }
        if let folder = TrustedCertificates.directory { logger.info("TLS: also trusting the certificate authorities in \(folder)") }
    }

    func run() {
        var running: Int32 = 0
        var ready: Int32 = 0
        loop: while true {
            let commands = inbox.take()
            let stoppedBeforeTaken = startsStoppedLater(in: commands)
            for (i, command) in commands.enumerated() {
                if case .shutdown = command { break loop }
                if case .start(let request) = command, stoppedBeforeTaken.contains(i) {
                    // Stopped before it began: its part file is as it was. The stop that
                    // follows finds no attempt and does nothing.
                    emit(.completed(request.id, .stopped(bytesOnDisk: request.offset)))
                    continue
                }
                apply(command)
            }
            curl_multi_perform(multi, &running)
            collectFinished()
            cookies.saveChanged()
            serviceAttempts()
            let timeout = min(resumeThrottledTransfers(), reportStalledProgress())
            curl_multi_poll(multi, nil, 0, timeout, &ready)
        }
        for attempt in attempts.values { attempt.abandon() }
        attempts.removeAll() // files being opened close when the jobs' results are dropped
        throttledTransfers.removeAll()
        cookies.cleanUp() // after every handle: shares in use cannot be freed
        curl_multi_cleanup(multi)
    }

    /// The indices of the starts in `commands` that a later stop of the same transfer
    /// (before any other start of it) already cancels: both came while the thread was
    /// busy. Such a start opens nothing, so it creates no `.part` file that the core
    /// would have to delete again after it has reported the transfer cancelled.
    private func startsStoppedLater(in commands: [EngineCommand]) -> Set<Int> {
        var stopped = Set<TransferID>()
        var starts = Set<Int>()
        for (i, command) in commands.enumerated().reversed() {
            switch command {
            case .stop(let id): stopped.insert(id)
            case .start(let request): if stopped.remove(request.id) != nil { starts.insert(i) }
            default: break
            }
        }
        return starts
    }

    /// Progress for transfers whose data stopped mid-interval (the write callback
    /// reports only when data comes), and the end of those whose body brought nothing
    /// for `request-timeout`; returns how long the poll may sleep.
    private func reportStalledProgress() -> Int32 {
        let now = monotonicNanoseconds()
        var timeout = Self.pollTimeoutMs
        var stalled: [EngineAttempt] = []
        for attempt in attempts.values {
            if let due = attempt.reportProgressIfDue(now: now) {
                timeout = min(timeout, Int32(clamping: (due - now + 999_999) / 1_000_000))
            }
            if let due = attempt.stallDue {
                if due <= now {
                    stalled.append(attempt)
                } else {
                    timeout = min(timeout, Int32(clamping: (due - now + 999_999) / 1_000_000))
                }
            }
        }
        for attempt in stalled { attempt.stalled(now: now) }
        // A report above may have found a failure (held bytes that could not be
        // written): the attempt ends now, not after the next wait.
        return needingService.isEmpty ? timeout : 0
    }

    /// Called from a write callback that paused its transfer for the speed limit.
    func throttled(_ handle: PacedHandle) {
        throttledTransfers[ObjectIdentifier(handle)] = handle
    }

    /// Forgets a handle that is going away.
    func unthrottle(_ handle: PacedHandle) {
        throttledTransfers[ObjectIdentifier(handle)] = nil
    }

    /// Unpauses the throttled transfers whose time has come; returns how long the
    /// poll may sleep before the next one is due.
    private func resumeThrottledTransfers() -> Int32 {
        guard !throttledTransfers.isEmpty else { return Self.pollTimeoutMs }
        let now = monotonicNanoseconds()
        for (key, transfer) in throttledTransfers where transfer.speedLimit == 0 || transfer.paceAllowsAt <= now {
            throttledTransfers[key] = nil
            transfer.resumeAfterThrottle() // may deliver a chunk and throttle again
        }
        var timeout = Self.pollTimeoutMs
        for transfer in throttledTransfers.values {
            let wait = transfer.paceAllowsAt > now ? (transfer.paceAllowsAt - now + 999_999) / 1_000_000 : 0
            timeout = min(timeout, Int32(clamping: wait))
        }
        return timeout
    }

    /// Delivers an event (dropped once the engine is shutting down).
    func emit(_ event: EngineEvent) {
        inbox.currentHandler?(event)
    }

    // MARK: - Commands

    private func apply(_ command: EngineCommand) {
        switch command {
        case .start(let request):
            start(request)
        case .stop(let id):
            attempts[id]?.stop()
        case .setSpeedLimit(let id, let bytesPerSecond):
            attempts[id]?.setSpeedLimit(bytesPerSecond) // a lifted limit takes effect in resumeThrottledTransfers
        case .jobDone(let id, let attempt, let job):
            guard let owner = attempts[id], owner.attempt == attempt else { return } // a stale attempt's: dropped
            owner.jobDone(job)
        case .discardCookies(let jar):
            cookies.discard(jar)
        case .forgetConnections:
            forgetConnections()
        case .desktopProxy(let origin, let generation, let answer):
            desktopProxyAnswered(origin, generation: generation, answer)
        case .shutdown:
            break // handled by run()
        }
    }

    private func start(_ request: EngineRequest) {
        guard attempts[request.id] == nil else {
            logger.warning("start ignored: transfer \(request.id) already has a running attempt")
            return
        }
        attemptsStarted += 1
        let number = attemptsStarted
        if request.proxy == nil, let desktop = desktopProxies, let origin = DesktopProxies.origin(of: request.url) {
            guard let known = desktop.proxy(for: origin, now: monotonicNanoseconds()) else {
                let waiter = AwaitingProxy(request: request, attempt: number, loop: self)
                attempts[request.id] = waiter
                return desktop.wait(waiter, for: origin)
            }
            return begin(request, throughTheDesktops: known, attempt: number)
        }
        begin(request, attempt: number)
    }

    /// Starts `request` through the desktop's proxy for its origin (nil: direct).
    private func begin(_ request: EngineRequest, throughTheDesktops proxy: String?, attempt number: UInt64) {
        var proxied = request
        proxied.proxy = proxy
        proxied.proxyIsTheDesktops = proxy != nil
        begin(proxied, attempt: number)
    }

    /// The desktop's answer for `origin` came: the requests that waited for it start.
    private func desktopProxyAnswered(_ origin: String, generation: Int, _ answer: DesktopProxyAnswer) {
        guard let desktop = desktopProxies else { return }
        let (proxy, waiters) = desktop.answered(origin, generation: generation, answer, now: monotonicNanoseconds())
        for waiter in waiters where attempts[waiter.id] === waiter { // not stopped meanwhile
            begin(waiter.request, throughTheDesktops: proxy, attempt: waiter.attempt)
        }
    }

    /// Starts attempt `number` of `request`, its proxy settled (its session's, the
    /// desktop's, or libcurl's from the environment).
    private func begin(_ request: EngineRequest, attempt number: UInt64) {
        if let upload = request.upload {
            let attempt = UploadAttempt(request: request, source: upload, attempt: number, loop: self)
            attempts[request.id] = attempt
            logger.debug("transfer \(request.id): attempt \(number) starts (upload)")
            return attempt.begin()
        }
        // A segmented download's part file is looked at and opened by a file job too; one
        // that is not a regular file gets one connection.
        let segmented = request.isRanged
        let opening = OpeningDownload(request: request, attempt: number, segmented: segmented, loop: self)
        attempts[request.id] = opening
        if segmented {
            let connections = min(max(request.connections, 1), SegmentedDownload.maximumConnections)
            logger.debug("transfer \(request.id): attempt \(number) starts (up to \(connections) connections, once its file is open)")
        }
        opening.begin()
    }

    /// The machine moved to another network (or woke up, or came back online): the
    /// connections made before may be dead without a word (no reset ever comes), and
    /// libcurl would send requests on them and wait. Every connection's socket is shut down, so libcurl closes each
    /// one instead of using it again, save those of the requests still in the multi:
    /// the core stopped the attempts that start over before it asked, and what goes on
    /// is a request it will not send twice (a POST awaiting its answer) or one that
    /// would start over (an upload, a download it cannot continue). Those are
    /// condemned: libcurl closes each as its request ends (`CURLOPT_FORBID_REUSE`, set
    /// now: put back in its cache, it could be taken by a handle in the same
    /// `curl_multi_perform` before `remove` sees it free), `remove` shuts down any left
    /// unused, and while one that may be shared (HTTP/2) is in use, no new request goes
    /// on it as a stream (`add`). The names looked up before are looked up again
    /// (`dnsCacheTimeout`): behind a VPN with its own DNS a name may lead elsewhere.
    private func forgetConnections() {
        forgotAt = monotonicNanoseconds()
        desktopProxies?.forget { attempts[$0.id] === $0 }
        for easy in handleOwners.keys { _ = ferry_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1) }
        let count = sockets.shutDown(sparing: connectionsInUse())
        logger.info("connections of before forgotten: \(count) of \(sockets.count) shut down, \(handleOwners.count) requests going on")
    }

    /// The connections of the handles in the multi, by their ends (libcurl says which
    /// socket a handle uses only once it is done), with whether each may carry other
    /// requests as streams: HTTP/2 as its TLS handshake chose (ALPN), or, where that
    /// cannot be read, unless its answer came over HTTP/1.x. Plain http is never
    /// multiplexed (see `EasyHandleSetup.common`).
    private func connectionsInUse() -> [ConnectionSockets.Ends: Bool] {
        var ends: [ConnectionSockets.Ends: Bool] = [:]
        for easy in handleOwners.keys {
            var local = 0, peer = 0, version = 0
            var localIP: UnsafeMutablePointer<CChar>?, peerIP: UnsafeMutablePointer<CChar>?
            guard ferry_easy_getinfo_long(easy, CURLINFO_LOCAL_PORT, &local) == CURLE_OK, local > 0,
                  ferry_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &peer) == CURLE_OK, peer > 0,
                  ferry_easy_getinfo_string(easy, CURLINFO_LOCAL_IP, &localIP) == CURLE_OK, let localIP,
                  ferry_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &peerIP) == CURLE_OK, let peerIP else { continue }
            let shared: Bool
            if !EasyHandleSetup.effectiveURL(easy, fallback: "https:").lowercased().hasPrefix("https:") {
                shared = false
            } else if alpnReadable {
                shared = ferry_connection_negotiated_h2(easy) != 0
            } else {
                shared = !(ferry_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version) == CURLE_OK
                           && version > 0 && version < CURL_HTTP_VERSION_2_0)
            }
            let key = ConnectionSockets.Ends(local: ConnectionSockets.end(String(cString: localIP), local),
                                             peer: ConnectionSockets.end(String(cString: peerIP), peer))
            ends[key] = (ends[key] ?? false) || shared
        }
        return ends
    }

    // MARK: - Finished handles

    private func collectFinished() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                  let owner = handleOwners[easy] else { continue }
            owner.handleDone(easy, code: ferry_msg_result(message))
        }
    }
}

// MARK: - What attempts ask of the loop

extension EngineLoop {
    /// Adds one of an attempt's easy handles to the multi.
    func add(_ easy: UnsafeMutableRawPointer, owner: EngineAttempt) -> CURLMcode {
        if sockets.track(easy) != CURLE_OK {
            logger.warning("could not follow the sockets of a handle: a network change will not end its connections")
        }
        // While a connection of the network left that may be shared is in use, a request
        // of the new one opens its own rather than go on it as a stream.
        _ = ferry_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, sockets.hasCondemnedShared ? 1 : 0)
        _ = ferry_easy_setopt_long(easy, CURLOPT_DNS_CACHE_TIMEOUT, dnsCacheTimeout())
        let rc = curl_multi_add_handle(multi, easy)
        if rc == CURLM_OK { handleOwners[easy] = owner }
        return rc
    }

    /// How long (s) a name libcurl looked up may be used again: its default minute, but
    /// less than the time since the connections were last forgotten (a move to another
    /// network, back online), so that a name looked up on the old network is looked up
    /// again (libcurl has no call that empties its DNS cache; an entry is stale for a
    /// handle once its age reaches the handle's timeout, and 0 looks every name up).
    private func dnsCacheTimeout() -> Int {
        guard let forgotAt else { return Self.dnsCacheSeconds }
        return min(Self.dnsCacheSeconds, Int((monotonicNanoseconds() &- forgotAt) / 1_000_000_000))
    }

    private static let dnsCacheSeconds = 60

    /// Takes a handle out of the multi (if it is in); the owner then cleans it up.
    func remove(_ easy: UnsafeMutableRawPointer, owner: AnyObject) {
        if handleOwners.removeValue(forKey: easy) != nil {
            curl_multi_remove_handle(multi, easy)
            if sockets.hasCondemned { sockets.shutDownCondemned(inUse: connectionsInUse()) }
        }
        if let paced = owner as? PacedHandle { unthrottle(paced) }
    }

    /// `old` goes on as `new` (same transfer, same attempt number): a download whose
    /// part file is open now.
    func replace(_ old: EngineAttempt, with new: EngineAttempt) {
        guard attempts[old.id] === old else { return }
        attempts[old.id] = new
    }

    /// An attempt ended: the last events go out.
    func attemptEnded(_ attempt: EngineAttempt, _ outcome: EngineOutcome) {
        guard attempts[attempt.id] === attempt else { return }
        attempts[attempt.id] = nil
        cookies.saveChanged() // a finished attempt's cookies are on disk before it is reported
        emit(.completed(attempt.id, outcome))
        logger.debug("transfer \(attempt.id): attempt \(attempt.attempt) completed: \(outcome)")
    }

    func log(_ id: TransferID, _ message: String) {
        logger.info("transfer \(id): \(message)")
    }

    func debug(_ id: TransferID, _ message: @autoclosure () -> String) {
        logger.debug("transfer \(id): \(message())")
    }

    /// Asks for `attempt.service()` once the current curl call has returned.
    func requestService(_ attempt: EngineAttempt) {
        if !needingService.contains(where: { $0 === attempt }) { needingService.append(attempt) }
    }

    fileprivate func serviceAttempts() {
        while !needingService.isEmpty {
            let due = needingService
            needingService.removeAll()
            for attempt in due where attempts[attempt.id] === attempt { attempt.service() }
        }
    }

    /// Hands a background job's result to attempt `attempt` of transfer `id` on the
    /// engine thread. Any thread: it only touches the (locked) inbox.
    func post(_ job: sending AttemptJob, to id: TransferID, attempt: UInt64) {
        inbox.post(.jobDone(id, attempt: attempt, job))
    }

    /// What a background job (on another thread) posts its result with.
    var mailbox: JobMailbox { JobMailbox(inbox: inbox) }
}

/// Hands background jobs' results to the engine thread (`EngineLoop.post`), from any
/// thread: it holds only the engine's locked inbox, so the jobs capture it and never
/// the loop.
struct JobMailbox: Sendable {
    fileprivate let inbox: EngineInbox

    func post(_ job: sending AttemptJob, to id: TransferID, attempt: UInt64) {
        inbox.post(.jobDone(id, attempt: attempt, job))
    }
}

/// A part file opened for an attempt, and whether the attempt resumes in it.
struct OpenedPart {
    let file: PartFile
    let resume: Bool

    /// Opens the part file; resumes only with a validator and a part file that holds the
    /// bytes claimed, else cuts it to nothing. Runs on a file job.
    static func open(for request: EngineRequest) -> Result<OpenedPart, Failure> {
        let file: PartFile
        switch PartFile.open(request.partPath, within: request.confinedTo) {
        case .success(let opened): file = opened
        case .failure(let error): return .failure(Failure(error: error, bytesOnDisk: 0))
        }
        let resume = request.offset > 0 && request.ifRange != nil && file.isRegular && file.initialSize >= request.offset
        if !resume, let error = file.truncate(to: 0) {
            file.close()
            return .failure(Failure(error: error, bytesOnDisk: file.initialSize))
        }
        return .success(OpenedPart(file: file, resume: resume))
    }

    /// The part file could not be opened or cut; what it holds.
    struct Failure: Error {
        let error: PartFileError
        let bytesOnDisk: Int64
    }
}
