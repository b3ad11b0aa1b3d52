import DBus
import FerryCore

/// What a sandboxed caller may ask for, checked at the bus boundary (on the core's
/// queue, inside the handlers). Which objects it sees is the `CallerRegistry`'s part;
/// this is the rest: its own sessions in the manager's lists and manager-wide
/// actions, and paths only inside its own app directory.
extension FerryBusService {
    /// `Manager.Watch` (`on`) and `Unwatch`: an unconfined caller hears, unicast, the
    /// private signals of every session from now on (until it undoes it or leaves the
    /// bus); a sandboxed one may not. Answered on the bus queue, so every signal sent
    /// after the reply reaches it.
    func watch(_ inv: MethodInvocation, _ on: Bool) {
        guard inv.sandboxAppID == nil else {
            return inv.fail(Self.busError(CoreError.accessDenied("a sandboxed application cannot watch other applications' signals")))
        }
        guard let sender = inv.sender, sender.hasPrefix(":") else { return inv.reply([]) }
        if on { callers.signalRecipients.watch(sender) } else { callers.signalRecipients.unwatch(sender) }
        inv.reply([])
    }

    /// The sessions the caller may see, oldest first.
    func visibleSessions(_ inv: MethodInvocation, _ core: TransferCoordinator) -> [SessionID] {
        guard let app = inv.sandboxAppID else { return core.sessionIDs }
        return core.sessionIDs(ownedBy: app)
    }

    /// The transfers the caller may see, oldest first.
    func visibleTransfers(_ inv: MethodInvocation, _ core: TransferCoordinator) throws -> [TransferID] {
        guard let app = inv.sandboxAppID else { return try core.transferIDs() }
        return try core.sessionIDs(ownedBy: app).flatMap { try core.transferIDs(session: $0) }.sorted()
    }

    /// Runs a manager-wide action (PauseAll, ResumeAll, CancelAll) over what the caller
    /// may control: everything for an unconfined caller, its own sessions for a
    /// sandboxed one.
    func acrossVisibleSessions(_ inv: MethodInvocation, _ core: TransferCoordinator,
                               _ action: (SessionID?) throws -> Void) throws {
        guard let app = inv.sandboxAppID else { return try action(nil) }
        for session in core.sessionIDs(ownedBy: app) { try action(session) }
    }

    /// A sandboxed caller's session configuration: its `directory` inside its area, and
    /// no `application-id` but its own (it may not have ferryd wake another app).
    func confine(_ inv: MethodInvocation, configuration: SessionConfigurationUpdate) throws {
        guard let app = inv.sandboxAppID else { return }
        if let directory = configuration.directory, let refusal = SandboxArea(appID: app).refusal(directory, role: "directory") {
            throw refusal
        }
        if let wake = configuration.applicationID, !wake.isEmpty, wake != app {
            throw CoreError.accessDenied("a sandboxed application may set 'application-id' only to its own id '\(app)'")
        }
    }

    /// A sandboxed caller's download goes inside its area: its `destination`, or else
    /// the session's directory (the user's download folder is not its to write).
    func confineDownload(_ inv: MethodInvocation, _ core: TransferCoordinator, session: SessionID,
                         destination: String?) throws {
        guard let app = inv.sandboxAppID else { return }
        let area = SandboxArea(appID: app)
        if let destination {
            if let refusal = area.refusal(destination, role: "destination") { throw refusal }
            return
        }
        guard let directory = core.session(session)?.configuration.directory else {
            throw CoreError.invalidDestination("a sandboxed application must give a 'destination' inside '\(area.root)/' "
                + "(or set the session's 'directory' there): the user's download folder is not open to it")
        }
        if let refusal = area.refusal(directory, role: "session directory") { throw refusal }
    }

    /// The `destination-fd` option (`h`), kept for the download; nil when absent. A
    /// value of another type is refused and any descriptor in it closed.
    func destinationDescriptor(_ value: DBusValue?) throws -> DestinationDescriptor? {
        guard let value else { return nil }
        guard value.signature == "h", case .unixFD(let fd) = value.unwrapped else { // no variant inside the variant
            // The invocation closes any descriptor in it when it answers (once).
            throw CoreError.invalidArgument("option 'destination-fd' must be of D-Bus type 'h', not '\(value.signature)'")
        }
        return DestinationDescriptor(fd: fd)
    }

    /// `ResumeDownload` names its file inside the resume data: the same rule applies.
    /// A sandboxed caller must pass sealed data (`FRD2`, from this daemon's `Pause`):
    /// the older readable format can be written by anyone, naming any file.
    func confineResume(_ inv: MethodInvocation, resumeData: [UInt8]) throws {
        guard let app = inv.sandboxAppID else { return }
        guard resumeData.starts(with: ResumeDataSeal.magic) else {
            throw CoreError.invalidResumeData("a sandboxed application must pass the resume data Pause returned, unchanged")
        }
        guard let data = try? core.openResumeData(resumeData) else { return }
        // A destination-fd download's file is ferryd's own, in its state folder: the
        // core lets only the app whose download it was continue it.
        if TransferCoordinator.isDescriptorDownloadPath(data.destination) { return }
        if let refusal = SandboxArea(appID: app).refusal(data.destination, role: "destination") { throw refusal }
    }

    /// The `source-fd` option (`h`); nil when absent. A value of another type is refused
    /// (any descriptor in it is closed by the invocation when it answers: closing it here
    /// too could close a descriptor opened meanwhile under the same number).
    func sourceDescriptor(_ value: DBusValue?) throws -> Int32? {
        guard let value else { return nil }
        guard value.signature == "h", case .unixFD(let fd) = value.unwrapped else { // no variant inside the variant
            throw CoreError.invalidArgument("option 'source-fd' must be of D-Bus type 'h', not '\(value.signature)'")
        }
        return fd
    }

    /// A sandboxed caller's `response-destination` goes inside its area.
    func confineResponseDestination(_ inv: MethodInvocation, _ path: String?) throws {
        guard let app = inv.sandboxAppID, let path else { return }
        if let refusal = SandboxArea(appID: app).refusal(path, role: "response-destination") { throw refusal }
    }

    /// An upload's source outside the caller's area is refused the same way whether or
    /// not it exists, so the answer tells nothing about files it may not see.
    func confineUpload(_ inv: MethodInvocation, file: String) throws {
        guard let app = inv.sandboxAppID else { return }
        let area = SandboxArea(appID: app)
        guard area.contains(file) else {
            throw CoreError.accessDenied("a sandboxed application may upload only files inside its own directory "
                + "'\(area.root)/'; pass the file as 'source-fd' instead")
        }
    }
}
