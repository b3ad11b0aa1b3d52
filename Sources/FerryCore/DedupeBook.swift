/// What makes two downloads the same fetch (contract v1.2 "Dedupe"): the caller, the
/// URL, every request header, and every option or session setting that changes the
/// bytes the server sends or what counts as a good answer. Options that only say what
/// happens to the bytes afterwards (destination, overwrite, description, priority,
/// connections, speed limit) are not part of it: two downloads differing only in those
/// are fetched once.
///
/// Downloads that add options changing the bytes fetched (ranges, mirrors, pieces, a
/// request method or body) must add them here, or they would be merged wrongly.
struct FetchKey: Hashable {
    /// The caller: the sandboxed application's id, nil for unconfined callers (all of
    /// them are the session bus's one user; see `SessionOwnership`).
    var caller: String?
    var url: String
    /// Session and transfer headers as sent (`HeaderFields.merge`), sorted by name.
    var headers: [String]
    /// The expected SHA-256 (lowercased): a download with another, or none, judges the
    /// same bytes differently.
    var sha256: String?
    /// The session's proxy (another route may see another answer).
    var proxy: String?
    /// The cookie jar the request sends from: each session has its own (credentials),
    /// so two sessions that keep cookies are never merged; nil when the session sends none.
    var cookieJar: SessionID?
    /// Discretionary downloads wait for conditions others do not: a follower would
    /// wait (or not wait) with a leader it does not resemble.
    var discretionary: Bool
}

/// Which downloads fetch for others (leaders) and which follow them. A follower has no
/// engine attempt of its own: its state and progress mirror its leader's, and it gets
/// its own copy of the leader's verified file when the leader completes.
///
/// Every lookup is by id or key: the cost of an event is O(followers of that leader).
/// Memory only: after a restart the followers are plain downloads again and fetch on
/// their own (nothing is lost; the store needs no new column).
struct DedupeBook {
    /// The leader fetching for each key (queued, waiting or running).
    private var leaders: [FetchKey: TransferID] = [:]
    /// Each leader's key and its followers, oldest first.
    private var led: [TransferID: (key: FetchKey, followers: [TransferID])] = [:]
    /// Each follower's leader.
    private var leaderOf: [TransferID: TransferID] = [:]

    /// The leader fetching `key` now, if any.
    func leader(for key: FetchKey) -> TransferID? { leaders[key] }

    /// The leader `id` follows; nil when it fetches for itself.
    func leader(of id: TransferID) -> TransferID? { leaderOf[id] }

    func isFollower(_ id: TransferID) -> Bool { leaderOf[id] != nil }

    /// The followers of `id`, oldest first (empty when it leads none).
    func followers(of id: TransferID) -> [TransferID] { led[id]?.followers ?? [] }

    var followerCount: Int { leaderOf.count }

    /// `id` fetches `key` for whoever comes later.
    mutating func lead(_ id: TransferID, key: FetchKey) {
        guard leaders[key] == nil, led[id] == nil, leaderOf[id] == nil else { return }
        leaders[key] = id
        led[id] = (key, [])
    }

    /// `id` follows `leader` (which must lead).
    mutating func follow(_ id: TransferID, leader: TransferID) {
        guard led[leader] != nil, leaderOf[id] == nil, led[id] == nil else { return }
        led[leader]!.followers.append(id)
        leaderOf[id] = leader
    }

    /// `id` stops following (paused, cancelled, failed on its own). O(followers of its leader).
    mutating func unfollow(_ id: TransferID) {
        guard let leader = leaderOf.removeValue(forKey: id) else { return }
        led[leader]?.followers.removeAll { $0 == id }
    }

    /// `leader` stops leading: its key is free and its followers follow nobody.
    /// - Returns: the key it led and its followers, oldest first.
    @discardableResult
    mutating func dissolve(_ leader: TransferID) -> (key: FetchKey, followers: [TransferID])? {
        guard let entry = led.removeValue(forKey: leader) else { return nil }
        if leaders[entry.key] == leader { leaders[entry.key] = nil }
        for id in entry.followers { leaderOf[id] = nil }
        return entry
    }
}
