/// Files ferryd holds open for clients — upload sources and `destination-fd`
/// downloads, which share one budget — counted in all and per sandboxed application,
/// and the sources of removed uploads kept until their attempt ends.
///
/// Rules: each application may hold a quarter of the budget, so no app can take every
/// upload's room from the others and the user; an application holding none is not
/// listed; a detached source is handed back once, when its attempt ends.
struct HeldDescriptors {
    /// Open now (held by transfers or detached).
    private(set) var open = 0
    /// The same per sandboxed application.
    private(set) var openByApp: [String: Int] = [:]
    /// Sources of removed uploads whose attempt has not reported its end yet (the
    /// engine may still be duplicating the descriptor), with the application they count
    /// against (nil: none).
    private var detached: [TransferID: (source: EngineUpload, app: String?)] = [:]

    /// The files one sandboxed application may hold open at once, of `limit`.
    static func share(of limit: Int) -> Int {
        max(1, limit / 4)
    }

    /// Counts a file opened (1) or closed (-1) for `app` (nil: an unconfined caller).
    mutating func count(of app: String?, by change: Int) {
        open += change
        guard let app else { return }
        let held = (openByApp[app] ?? 0) + change
        openByApp[app] = held > 0 ? held : nil
    }

    /// Why no further file may be held for `app` within `limit`, nil when one may.
    func roomMissing(for app: String?, limit: Int) -> String? {
        if open >= limit {
            return "\(open) files are held open for clients (uploads waiting or running, and destination-fd "
                + "downloads not ended): as many as ferryd's open-file limit leaves room for"
        }
        if let app, let held = openByApp[app], held >= Self.share(of: limit) {
            return "this application has \(held) files held open (uploads waiting or running, and destination-fd downloads "
                + "not ended): the most one application may (a quarter of what ferryd's open-file limit leaves room for)"
        }
        return nil
    }

    /// Keeps `source` (still counted) until the attempt of transfer `id` ends.
    mutating func detach(_ source: EngineUpload, app: String?, until id: TransferID) {
        detached[id] = (source, app)
    }

    /// The source kept for transfer `id`'s attempt, once: it may close now.
    mutating func takeDetached(_ id: TransferID) -> (source: EngineUpload, app: String?)? {
        detached.removeValue(forKey: id)
    }
}
