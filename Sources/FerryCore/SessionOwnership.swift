import Dispatch

/// Which sessions belong to which sandboxed application. A session opened by a
/// sandboxed caller carries its app id (`SessionRecord.owner`, stored with it); one
/// opened by an unconfined caller carries none. Unconfined callers may use every
/// session; a sandboxed caller only those it owns.
enum SessionOwnership {
    /// A sandboxed caller's session identifiers are its app id or start with it and a
    /// dot: any other name may be one an unconfined client (the `ferry` CLI's
    /// `org.ferry.cli`, another app before it is installed) opens later, which would then
    /// join the sandboxed app's session and hand it its transfers and headers.
    /// Ferry's own names (`org.ferry.*`: the CLI's `org.ferry.cli`) are never a
    /// sandboxed caller's, whatever its app id says: an app installed as `org.ferry.cli`
    /// would otherwise open the CLI's session first.
    static func checkIdentifier(_ identifier: String, by owner: String?) throws {
        guard let owner else { return }
        if identifier == reservedPrefix.dropLast() || identifier.hasPrefix(reservedPrefix) {
            throw CoreError.accessDenied("session identifiers starting with '\(reservedPrefix)' are Ferry's own clients'; "
                + "a sandboxed application cannot open '\(identifier)'")
        }
        guard identifier != owner, !identifier.hasPrefix(owner + ".") else { return }
        throw CoreError.accessDenied("a sandboxed application's session identifiers start with its app id: "
            + "use '\(owner)' or '\(owner).NAME', not '\(identifier)'")
    }

    /// Identifiers only unconfined callers may open.
    static let reservedPrefix = "org.ferry."

    /// A sandboxed caller may not take over another application's session identifier:
    /// the identifier is taken, which is said plainly (answering `NoSuchSession` would
    /// invite it to open it, and opening a new one under the same name is impossible).
    static func checkReopen(_ existing: SessionRecord, by owner: String?) throws {
        guard let owner, existing.owner != owner else { return }
        throw CoreError.accessDenied("the session identifier '\(existing.identifier)' is in use by another application; "
            + "a sandboxed application can open only its own sessions (use an identifier of your own, e.g. starting with '\(owner).')")
    }
}

extension TransferCoordinator {
    /// The app id owning the session, nil when unconfined (or no such session).
    public func sessionOwner(_ id: SessionID) -> String? {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        return sessions[id]?.owner
    }

    /// Whether `OpenSession(identifier)` would re-open a session rather than make one:
    /// one of that identifier that is not closing (a closing session no longer answers
    /// to its identifier).
    public func hasOpenSession(identifier: String) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return sessions.values.contains { $0.identifier == identifier && !$0.isClosing }
    }

    /// Whether a caller (nil = unconfined, else its app id) may see and use the session.
    public func session(_ id: SessionID, isVisibleTo caller: String?) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let s = sessions[id] else { return false }
        return caller == nil || s.owner == caller
    }

    /// The sessions a sandboxed application owns, oldest first.
    public func sessionIDs(ownedBy owner: String) -> [SessionID] {
        dispatchPrecondition(condition: .onQueue(queue))
        return sessions.values.filter { $0.owner == owner }.map(\.id).sorted()
    }
}
