import Dispatch

/// The network policy: transfers wait (`waiting`, reason `offline` or `metered`)
/// while the network does not allow them, and go on by themselves when it does.
///
/// - Offline: every queued or running transfer waits; nothing is tried, so no retry
///   and no attempt is spent on a network that is not there.
/// - Metered: transfers of sessions with `allow-metered` false wait.
///
/// A running transfer that has to wait is stopped at a resumable point (its `.part`
/// file stays and the next attempt continues from it). These waits are no failures:
/// they spend no retry and add no attempt. Waits for a time (`start-after`, `retry`)
/// run their course first; the transfer is judged when it is queued again. (Except
/// retry waits after a failure of the network, which end when the network moves or
/// comes back: `retryNetworkFailuresNow`.)
///
/// The rule is applied to every live transfer when the network changes, to a session's
/// transfers when its configuration changes, and to each transfer as it becomes queued
/// (new, resumed, retried), so each is judged like the others without a pass over all.
extension TransferCoordinator {
    /// Tells the core what the network allows now; transfers wait or go on at once.
    /// Ferry assumes `NetworkConditions.assumed` until told otherwise.
    /// `portal`: the network wants a sign-in first; see `waitForSignIn`.
    /// `route`: the connection the traffic goes out through (NetworkManager's
    /// `PrimaryConnection`), nil when not known or none; a change from one named to
    /// another is a move (`networkMoved`).
    public func setNetworkState(metered: Bool, online: Bool, portal: Bool = false, route: String? = nil) {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        let new = NetworkConditions(metered: metered, online: online, portal: portal, route: route)
        guard new != network else { return }
        if new.metered != network.metered || new.online != network.online || new.portal != network.portal {
            logger.info("network: \(new)")
        }
        let signedIn = network.portal && !portal
        let cameOnline = online && !network.online
        let moved = online && route != nil && knownRoute != nil && route != knownRoute
        if moved { logger.info("network: moved from \(knownRoute ?? "") to \(route ?? "")") }
        if let route { knownRoute = route }
        mutate {
            network = new
            if moved {
                networkMoved()
            } else if cameOnline {
                // Back online, maybe on another network (asleep meanwhile): connections
                // kept from before may be dead. The transfers waited, nothing runs on one.
                engine.forgetConnections()
            }
            applyNetworkPolicy(to: transfers.keys.sorted())
            if signedIn { retrySignInWaits() }
            if moved || cameOnline || signedIn {
                retryNetworkFailuresNow(moved ? "the network moved" : cameOnline ? "back online" : "signed in")
            }
        }
    }

    /// The machine moved to another network while online (NetworkManager's primary
    /// connection changed: Wi-Fi to wired, another Wi-Fi, a VPN). Connections made on
    /// the old one may be dead without a word: a transfer on one would stall until its
    /// `request-timeout`, then spend a retry, and a new request could be sent on one.
    /// Every running transfer stops at a resumable point and is queued again at once
    /// (no failure, no retry spent: a download's next attempt continues from its
    /// `.part` file); then the engine forgets its
    /// connections, so every request after makes new ones. Not a POST awaiting its
    /// answer: sent again, the server could act twice. Nor a transfer that would start
    /// over from its first byte, having moved some (an upload, a download the server
    /// cannot continue), unless its connection is shared (HTTP/2: other requests would
    /// go on it as streams). Those run on, on their own connections, which the engine
    /// keeps for them alone. Not one whose data is all in.
    /// Looks at the running transfers only, once per move.
    /// `why`: what happened, for the log ("the network moved").
    func networkMoved(_ why: String = "the network moved") {
        for id in index.running.sorted() {
            // Not one whose attempt has ended or whose data is all in (being flushed,
            // checked, copied to its descriptor): it needs the network no more.
            guard let t = transfers[id], t.state == .running, !t.stopInFlight, !dedupe.isFollower(id),
                  !t.life.isFollowing, t.life.attempt?.ended != true, !t.connectionsFreed else { continue }
            if t.isPOSTAwaitingItsAnswer {
                logger.info("transfer \(t.id): a POST awaiting its answer goes on after \(why)")
                continue
            }
            if t.wouldStartOverIfStopped, !t.onSharedConnection {
                // If its connection still works (the old network is still up, a VPN that
                // lets it through), it finishes there; if not, it stalls and is retried,
                // as before the move, without having lost more.
                logger.info("transfer \(t.id): goes on after \(why) (stopped, it would start over)")
                continue
            }
            logger.info("transfer \(t.id): \(why); starting over on a new connection")
            settle(t, t.life.restartOnNewNetwork())
            publishChanged(t)
        }
        engine.forgetConnections()
    }

    /// The system woke up from sleep (logind's `PrepareForSleep(false)`). Connections
    /// made before it may be dead without a word (the server or a NAT on the way gave
    /// up on them meanwhile; the machine may have woken on another network), so it is
    /// taken as a move (`networkMoved`): running transfers start over at once on new
    /// connections, and, on a network that works, those waiting after a failure of the
    /// network go now. Where NetworkManager follows the sleep it reports the network
    /// gone and back, which does the same; without it this is what does, and the
    /// network may not be back yet: failures of the network for a while after count
    /// for nothing (`failedJustAfterWaking`).
    public func systemWoke() {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        wokeAt = environment.now()
        mutate {
            networkMoved("the system woke up")
            retryNetworkFailuresNow("the system woke up")
        }
    }

    /// What the core currently assumes about the network.
    public var networkState: NetworkConditions {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return network
    }

    /// Why the network keeps `t` from running now, nil when it does not.
    /// Power and the schedule (discretionary transfers) come after the network's own
    /// reasons (`TransferCoordinator+Discretionary.swift`).
    func networkBlocker(_ t: TransferRecord) -> WaitingReason? {
        if !network.online { return .offline }
        let configuration = sessions[t.session]?.configuration
        if network.metered, !(configuration?.allowMetered ?? true) { return .metered }
        return discretionaryBlocker(t, configuration: configuration)
    }

    /// Moves queued and running transfers the network holds back to `waiting`, and
    /// queues again those whose network wait is over.
    func applyNetworkPolicy(to ids: [TransferID]) {
        for id in ids {
            // A dedupe follower waits with its leader (`mirror`), never on its own; one
            // copying its leader's file needs no network.
            guard let t = transfers[id], !dedupe.isFollower(id), !t.life.isCopying else { continue }
            let blocker = networkBlocker(t)
            switch t.state {
            case .queued, .running:
                guard let reason = blocker else { continue }
                if t.isPOSTAwaitingItsAnswer {
                    // Its body is out: stopped and sent again later, the server could
                    // act on it twice. It runs to its end; a retry waits.
                    logger.info("transfer \(t.id): a POST awaiting its answer goes on although \(reason.rawValue)")
                    continue
                }
                waitForNetwork(t, reason)
            case .waiting where t.isWaitingForNetwork:
                if let reason = blocker {
                    // Metered became offline or back: the reason follows.
                    if t.life.waitingReason != reason {
                        settle(t, t.life.waitForNetwork(reason))
                        publishChanged(t)
                    }
                } else {
                    t.life.networkAllows()
                    settle(t)
                    publishChanged(t)
                }
            default:
                continue
            }
        }
    }

    /// Judges the transfers that became queued since the last round.
    func judgeNewlyQueued() {
        for id in schedulingDue.takeNewlyQueued() {
            guard let t = transfers[id], t.state == .queued, !dedupe.isFollower(id), let reason = networkBlocker(t) else { continue }
            waitForNetwork(t, reason)
        }
    }

    /// A queued or running transfer waits for the network (a running one is stopped at
    /// a resumable point).
    func waitForNetwork(_ t: TransferRecord, _ reason: WaitingReason) {
        if t.state == .running {
            logger.info("transfer \(t.id): stopping; waiting (\(reason.rawValue))")
        }
        // Waits for the network, not for a time: no wake-up may queue it.
        settle(t, t.life.waitForNetwork(reason))
        publishChanged(t)
    }
}
