import Foundation

/// Cookie jars: one per session, never shared. A persistent session's lives in
/// `$XDG_STATE_HOME/ferry/cookies/<session id>` (the engine creates it with mode 0600,
/// in a 0700 folder), so cookies survive a restart; an ephemeral session's lives in
/// the engine's memory only. Session ids are never reused, so a jar never passes to
/// another session. The core never reads a jar: cookie values stay between the engine
/// and the servers.
extension TransferCoordinator {
    /// The jar of a session's requests; nil when its `cookies` setting is off.
    func cookieJar(for session: SessionID) -> EngineCookieJar? {
        guard let s = sessions[session], s.configuration.cookies else { return nil }
        guard s.configuration.persistent else { return .memory(session) }
        guard let directory = Self.cookieDirectory() else { return .memory(session) }
        return .file(directory + "/\(session)")
    }

    /// A session goes: its cookies go with it (from the engine's memory, and its file).
    func discardCookies(of s: SessionRecord) {
        if !s.configuration.persistent {
            engine.discardCookies(.memory(s.id))
            return
        }
        guard let directory = Self.cookieDirectory(create: false) else { return }
        let path = directory + "/\(s.id)"
        engine.discardCookies(.file(path))
        _ = FileSystemChecks.removeIfPresent(path, fileManager: fileManager)
    }

    /// ferryd's folder of cookie jars (0700), nil when it cannot be made.
    static func cookieDirectory(create: Bool = true) -> String? {
        let directory = StateDirectories.cookies
        guard create else { return directory }
        do {
            try StateDirectories.make(directory)
        } catch {
            return nil
        }
        return directory
    }
}
