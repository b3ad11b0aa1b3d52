import Dispatch
import Foundation

/// Retries after transient failures, and the session's resource-timeout.
extension TransferCoordinator {
    /// An attempt failed. Transient failures wait (`waiting`, reason `retry`) and are
    /// tried again, continuing from the bytes on disk, up to the session's `retries`,
    /// after the policy's backoff or the server's `Retry-After` (the longer); anything
    /// else, or a wait that would outlast the resource-timeout, fails the transfer.
    /// Losses of a shared connection a transfer is tried again after at once, before
    /// they count as failed attempts (a server that keeps dropping its connections).
    /// Not a POST upload's: the server may have acted on it before its connection went
    /// (answered, or still working on its answer), and sent again it could act twice
    /// (RFC 9110 §9.2.2), so its loss counts as on HTTP/1.1. GETs and PUTs may be sent
    /// twice to the same effect. (A request the server refused unprocessed,
    /// `REFUSED_STREAM`, libcurl sends again itself.)
    static let sharedConnectionLossesForgiven = 3

    func attemptFailed(_ t: TransferRecord, _ error: CoreError) {
        if case .http(let status, _) = error { t.snapshot.httpStatus = UInt32(clamping: status) }
        let now = environment.now()
        if let deadline = resourceDeadline(t), now >= deadline {
            failTransfer(t, resourceTimeoutError(t))
            return
        }
        if t.postAccepted {
            // The server answered the POST with success before the failure (its answer
            // cut part-way): it took it, and sent again it would act twice. Not tried
            // again, whatever `retries` allows; `HttpStatus` shows the answer.
            failTransfer(t, error)
            return
        }
        if case .network = error, t.onSharedConnection, !t.isPOST,
           t.sharedConnectionLosses < Self.sharedConnectionLossesForgiven {
            // The shared (HTTP/2) connection its stream was on (answered or not yet) went
            // away: a GOAWAY, a reset, a server that dropped a hundred streams at once. Not
            // this transfer's failure: it goes back to the queue at once, its retries untouched.
            t.sharedConnectionLosses += 1
            t.onSharedConnection = false
            logger.info("transfer \(t.id): its shared connection went away (\(error.message)); trying again at once")
            t.life.requeue()
            settle(t)
            publishChanged(t)
            return
        }
        if network.portal || t.attemptBehindPortal, mayBeTheSignIn(t, error) {
            waitForSignIn(t, error)
            return
        }
        if failedJustAfterWaking(t, error) { return }
        // Not the portal's: the failure counts as any other, and the sign-in no longer
        // brings it back early (its wait is its own, `Retry-After` included).
        t.signInWaits = 0
        if let status = t.failedResponseStatus, !RetryPolicy.isTransient(status: status) {
            // The server's answer (a 4xx, a redirect the engine refused) will not change;
            // a Metalink download asks its next URL.
            if !t.isAwaitingMetalink, !error.isProxyAuthenticationRefusal,
               tryNextMetalinkSource(t, because: "HTTP \(status)") { return }
            failTransfer(t, error)
            return
        }
        let maxRetries = sessions[t.session]?.configuration.retries ?? 0
        guard case .retry(var seconds) = environment.retryPolicy.decide(error, t.retriesUsed + 1, maxRetries),
              seconds.isFinite, seconds >= 0 else {
            // (Not after a piece every source failed: the engine tried them all.)
            if !t.isAwaitingMetalink, !error.isChecksumMismatch, !error.isProxyAuthenticationRefusal,
               tryNextMetalinkSource(t, because: error.message) { return }
            failTransfer(t, error)
            return
        }
        if let wanted = t.retryAfter, wanted.isFinite, wanted > seconds { seconds = wanted }
        let due = now &+ Self.microseconds(seconds)
        if failsBeforeRetry(t, due: due, error) { return }
        t.retriesUsed += 1
        // The contract's `Error` is the last failure: while it waits to try again, the
        // transfer says why (`ferry show`); it is cleared when the transfer completes.
        t.showError(error)
        logger.info("transfer \(t.id): \(error.shortName) (\(error.message)); retry \(t.retriesUsed) of \(maxRetries) in \(String(format: "%.1f", seconds)) s")
        settle(t, t.life.retry(at: due))
        publishChanged(t)
    }

    // MARK: - A network that wants a sign-in

    /// Whether `error` may be a captive portal's doing, to be waited out: its own
    /// certificate for the server's name (`Tls`), connections it refuses, resets or
    /// leaves unanswered (`Network`, `Timeout`). Not a POST upload's `Network` or
    /// `Timeout`: it may have reached the server, and its retries are the user's say
    /// (`attemptFailed`); a failed TLS handshake sent nothing. Not after
    /// `signInWaitsAllowed` such waits in a row: NetworkManager's verdict can be wrong
    /// for long (DNS filtering, a check the network blocks), and a failure that lasts
    /// that long is the server's.
    func mayBeTheSignIn(_ t: TransferRecord, _ error: CoreError) -> Bool {
        guard t.signInWaits < Self.signInWaitsAllowed else { return false }
        switch error {
        case .tls: return true
        case .network, .timeout: return !t.isPOST
        default: return false
        }
    }

    /// The longest wait between tries while the network wants a sign-in (seconds).
    static let signInRetryCap: Double = 60
    /// Sign-in waits in a row before failures count as usual again: 5, 10, 20, 40 s,
    /// then a minute each, about ten minutes in all.
    static let signInWaitsAllowed = 13

    /// An attempt failed while NetworkManager says the network wants a sign-in (a
    /// captive portal: `Connectivity` `PORTAL`), or it began while it did (a request the
    /// portal left unanswered ends after the sign-in). The failure is most likely the
    /// portal's, not the server's: the transfer neither fails (a `Tls` failure would
    /// be final) nor spends a retry. It waits (reason `retry`) and is tried again as
    /// soon as the sign-in is done (`retrySignInWaits`), or after 5 s, 10 s, … up to
    /// a minute whatever NetworkManager says, in case its verdict is wrong (a server on
    /// the local network, a check the network blocks). The session's resource-timeout
    /// still applies; after about ten minutes of such waits, failures count as usual
    /// (`mayBeTheSignIn`).
    func waitForSignIn(_ t: TransferRecord, _ error: CoreError) {
        t.signInWaits += 1
        let seconds = min(Self.signInRetryCap, 5 * Double(1 << min(t.signInWaits - 1, 8)))
        let waits = waitSparingARetry(t, error, seconds: seconds,
                                      hint: "the network wants a sign-in first, on its own page: trying again once it is done",
                                      log: "behind a sign-in page; trying again after the sign-in, or in \(Int(seconds)) s")
        if !waits { t.signInWaits = 0 }
    }

    /// `t` waits `seconds` (`retry`) and tries again without spending a retry, its
    /// `Error` showing `error` with `hint` in brackets; `log` ends the log line. It fails
    /// with `error` instead when the wait would outlast its resource-timeout. Whether
    /// it waits.
    private func waitSparingARetry(_ t: TransferRecord, _ error: CoreError, seconds: Double, hint: String, log: String) -> Bool {
        let due = environment.now() &+ Self.microseconds(seconds)
        if failsBeforeRetry(t, due: due, error) { return false }
        t.showError(CoreError(name: error.name, message: error.message + " (\(hint))") ?? error)
        logger.info("transfer \(t.id): \(error.shortName) (\(error.message)) \(log)")
        settle(t, t.life.retry(at: due))
        publishChanged(t)
        return true
    }

    /// The network no longer wants a sign-in: transfers that wait for one go again
    /// now. Once per such change of the network, which looks at every transfer (as the
    /// network policy does then).
    func retrySignInWaits() {
        for t in transfers.values where t.signInWaits > 0 {
            t.signInWaits = 0
            guard t.state == .waiting, t.life.waitingReason == .retry else { continue }
            logger.info("transfer \(t.id): the network no longer wants a sign-in; trying again")
            t.life.requeue()
            settle(t)
            publishChanged(t)
        }
    }

    // MARK: - Just after a sleep

    /// How long after a wake-up failures of the network count for nothing (s).
    static let wakeGrace: Double = 30
    /// The wait between such tries (s).
    static let wakeRetryDelay: Double = 3

    /// Right after a wake-up the network may not be back yet (Wi-Fi reconnecting, an
    /// address being got; without NetworkManager ferryd cannot tell), and the
    /// transfers started over at the wake-up fail at once, unreachable or unresolved.
    /// For `wakeGrace` seconds such failures (`Network`, `Timeout`; not a POST's,
    /// which may have reached the server: its retries are the user's say) neither fail
    /// the transfer nor spend a retry: it waits `wakeRetryDelay` seconds (`retry`, its
    /// `Error` saying why) and tries again. The resource-timeout still applies. Whether
    /// it waits so.
    func failedJustAfterWaking(_ t: TransferRecord, _ error: CoreError) -> Bool {
        let now = environment.now()
        guard wokeAt > 0, now >= wokeAt, now - wokeAt < Self.microseconds(Self.wakeGrace) else { return false }
        switch error {
        case .network, .timeout: guard !t.isPOST, t.failedResponseStatus == nil else { return false }
        default: return false
        }
        let seconds = Int(Self.wakeRetryDelay)
        // Failed instead (past its resource-timeout), it is handled all the same.
        _ = waitSparingARetry(t, error, seconds: Self.wakeRetryDelay,
                              hint: "the system has just woken up, and the network may not be back yet: trying again in \(seconds) s",
                              log: "just after a wake-up; trying again in \(seconds) s")
        return true
    }

    // MARK: - A network that changed

    /// The machine moved to another network, came back online, woke up, or signed in
    /// to the network's page: on a network that works now, transfers waiting to try again after a failure of the network
    /// (`Network`, `Timeout`: a connection refused, reset or unanswered, a name not
    /// found), most likely the old network's doing (a VPN gone, a dead access point),
    /// go again now rather than wait out their backoff, up to five minutes. The retry
    /// they wait for is already counted: going early spends none more. Not a wait the
    /// server asked for (an error status, `Retry-After`, even with its answer cut
    /// after): the server's state did not change with the network. Once per such
    /// change, looking at every transfer as the network policy does then.
    func retryNetworkFailuresNow(_ why: String) {
        // Not onto a network that wants a sign-in: they would fail on its page (its
        // certificate a final `Tls`); they go once it is done.
        guard network.online && !network.portal else { return }
        let due = transfers.values.filter { t in
            t.state == .waiting && t.life.waitingReason == .retry && t.failedResponseStatus == nil
                && (t.snapshot.errorName == Self.networkErrorName || t.snapshot.errorName == Self.timeoutErrorName)
                && !dedupe.isFollower(t.id)
        }
        for t in due.sorted(by: { $0.id < $1.id }) {
            logger.info("transfer \(t.id): \(why); trying again now rather than after its wait")
            t.life.requeue()
            settle(t)
            publishChanged(t)
        }
    }

    private static let networkErrorName = CoreError.network("").name
    private static let timeoutErrorName = CoreError.timeout("").name

    // MARK: - Resource timeout

    /// A retry due at `due` would come after the resource-timeout: the transfer fails
    /// now with `error` instead. Whether it did.
    private func failsBeforeRetry(_ t: TransferRecord, due: UInt64, _ error: CoreError) -> Bool {
        guard let deadline = resourceDeadline(t), due >= deadline else { return false }
        logger.info("transfer \(t.id): not retrying; the wait would outlast the session's resource-timeout")
        failTransfer(t, error)
        return true
    }

    /// When the transfer's resource-timeout runs out (µs), nil when its clock has not
    /// started (it starts at the first attempt after a client started the transfer).
    func resourceDeadline(_ t: TransferRecord) -> UInt64? {
        guard t.resourceStarted > 0, let timeout = sessions[t.session]?.configuration.resourceTimeout,
              timeout.isFinite, timeout > 0 else { return nil }
        return t.resourceStarted &+ Self.microseconds(timeout)
    }

    func resourceTimeoutError(_ t: TransferRecord) -> CoreError {
        let timeout = sessions[t.session]?.configuration.resourceTimeout ?? 0
        return .timeout("The transfer did not finish within the session's resource-timeout of \(Self.describeSeconds(timeout)) (counted from its start, retries included); resume it to try again")
    }

    static func microseconds(_ seconds: Double) -> UInt64 {
        guard seconds.isFinite, seconds > 0 else { return 0 }
        return seconds >= 1e12 ? UInt64(1e18) : UInt64(seconds * 1_000_000)
    }

    static func describeSeconds(_ seconds: Double) -> String {
        if seconds >= 86_400, seconds.truncatingRemainder(dividingBy: 86_400) == 0 { return "\(Int(seconds / 86_400)) days" }
        if seconds >= 3600, seconds.truncatingRemainder(dividingBy: 3600) == 0 { return "\(Int(seconds / 3600)) hours" }
        if seconds == seconds.rounded() { return "\(Int(seconds)) seconds" }
        return String(format: "%.1f seconds", seconds)
    }
}
