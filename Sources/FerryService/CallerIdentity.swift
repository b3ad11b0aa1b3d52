import DBus
import FerryCore
import Foundation
import Logging
import FerryInterface

/// Who a bus caller is, from its connection's credentials.
public enum CallerIdentity: Sendable, Equatable {
    /// A process of our user outside any sandbox: trusted with everything.
    case unconfined
    /// A Flatpak application (its app id) or a snap (`snap:NAME`): its own sessions
    /// only, files only in its own area.
    case sandboxed(appID: String)
    /// Not identified (credentials unavailable, another user, an unreadable
    /// `.flatpak-info`): every call is refused with `AccessDenied`.
    case refused(String)

    /// The app id of a sandboxed caller, nil otherwise.
    public var appID: String? {
        if case .sandboxed(let id) = self { return id }
        return nil
    }
}

extension MethodInvocation {
    /// The sandboxed application calling, nil for an unconfined caller.
    var sandboxAppID: String? { (caller as? CallerIdentity)?.appID }
}

/// Identifies callers (`GetConnectionCredentials`: uid and pid; the Flatpak app id
/// from `/proc/PID/root/.flatpak-info`; a snap's from its AppArmor label, `SnapLabel`)
/// and keeps each sandboxed caller to its own
/// objects. Identities are cached per unique bus name and forgotten when the name
/// leaves the bus; the look-up is asynchronous, so the bus queue never waits.
///
/// `@unchecked Sendable`: the two tables are only touched under `lock`.
final class CallerRegistry: CallerGate, @unchecked Sendable {
    private let bus: BusConnection
    private let logger: Logger
    /// Who hears private signals: learns each sandboxed app's connections here.
    let signalRecipients = SignalRecipients()
    private let lock = NSLock()
    private var known: [String: CallerIdentity] = [:]
    /// Object path -> the app id owning it; absent: owned by unconfined callers.
    private var owners: [String: String] = [:]

    init(bus: BusConnection, logger: Logger) {
        self.bus = bus
        self.logger = logger
    }

    // MARK: Ownership of objects (set before an object is exported)

    func setOwner(of path: String, to appID: String?) {
        lock.lock(); defer { lock.unlock() }
        owners[path] = appID
    }

    func forgetOwner(of path: String) {
        lock.lock(); defer { lock.unlock() }
        owners[path] = nil
    }

    // MARK: CallerGate

    func knownCaller(_ sender: String) -> (any Sendable)? {
        lock.lock(); defer { lock.unlock() }
        return known[sender]
    }

    func lookUp(_ sender: String, done: @escaping @Sendable ((any Sendable)) -> Void) {
        credentials(of: sender) { [self] result in
            switch result {
            case .failure(let failure):
                done(CallerIdentity.refused(failure.reason)) // not cached: most likely the caller is gone
            case .success(let (uid, pid, label)):
                guard uid == getuid() else {
                    return finish(sender, .refused("the caller runs as another user (uid \(uid))"), done)
                }
                // Off the bus queue: the file is opened in the caller's own mount
                // namespace, which it may have built to answer slowly (a FUSE root).
                // A queue of its own (serial queues stay off libdispatch's monitored
                // worker pool), so one slow caller holds up no other.
                DispatchQueue(label: "org.ferry.callers.proc").async { [self] in
                    let identity: CallerIdentity
                    switch FlatpakInfo.finding(forProcess: pid) {
                    case .unconfined:
                        // Not a Flatpak: a snap, by its AppArmor label, else unconfined.
                        identity = label.flatMap(SnapLabel.appID(fromLabel:)).map { .sandboxed(appID: $0) } ?? .unconfined
                    case .app(let id): identity = .sandboxed(appID: id)
                    case .unreadable(let why): identity = .refused("the caller could not be identified: \(why)")
                    }
                    confirm(sender, pid: pid, identity, done)
                }
            }
        }
    }

    /// The pid was read before /proc was: makes sure it is still the same connection's
    /// process (not a new process that took a freed pid), then caches the identity.
    private func confirm(_ sender: String, pid: UInt32, _ identity: CallerIdentity,
                         _ done: @escaping @Sendable ((any Sendable)) -> Void) {
        credentials(of: sender) { [self] again in
            guard case .success(let (_, stillPid, _)) = again, stillPid == pid else {
                // Not cached: the name is gone (or going), and its departure may
                // already have been seen.
                return done(CallerIdentity.refused("the caller left while being identified"))
            }
            finish(sender, identity, done)
        }
    }

    private func finish(_ sender: String, _ identity: CallerIdentity, _ done: @Sendable ((any Sendable)) -> Void) {
        lock.lock()
        known[sender] = identity
        lock.unlock()
        if let app = identity.appID { signalRecipients.noteConnection(sender, ofApp: app) }
        if identity != .unconfined { logger.info("caller \(sender) is \(identity)") }
        done(identity)
    }

    func refusal(for caller: any Sendable, path: String, object: ExportedObject?,
                 interface: String?, member: String) -> BusError? {
        guard let identity = caller as? CallerIdentity else { return nil }
        switch identity {
        case .unconfined:
            return nil
        case .refused(let why):
            return BusError(name: CoreError.accessDenied("").name, message: why)
        case .sandboxed(let appID):
            if path == FerryInterface.managerPath {
                guard interface == StandardNames.properties && member == "Set" else { return nil }
                return BusError(name: CoreError.accessDenied("").name,
                                message: "a sandboxed application cannot change ferryd's settings")
            }
            let kind: String
            if FerryInterface.id(inPath: path, kind: "session") != nil { kind = "session" }
            else if FerryInterface.id(inPath: path, kind: "transfer") != nil { kind = "transfer" }
            else if FerryInterface.id(inPath: path, kind: "group") != nil { kind = "group" }
            else { return nil }
            lock.lock()
            let owner = owners[path]
            lock.unlock()
            // Another application's object answers exactly as a missing one does.
            guard object != nil, owner == appID else {
                if kind == "group" { return BusError(name: StandardErrors.unknownObject, message: "no group at \(path)") }
                let error = kind == "session" ? CoreError.noSuchSession("no session at \(path)")
                                              : CoreError.noSuchTransfer("no transfer at \(path)")
                return BusError(name: error.name, message: error.message)
            }
            return nil
        }
    }

    // MARK: The bus daemon

    /// Forgets callers when their unique name leaves the bus.
    func watchDepartures() async throws {
        _ = try await bus.subscribeToDepartures { [weak self] name in
            guard let self else { return }
            lock.lock()
            known[name] = nil
            lock.unlock()
            signalRecipients.departed(name)
        }
    }

    /// (uid, pid, security label) of a connection, from the bus daemon; the label only
    /// where the kernel has a security module that labels sockets (AppArmor, SELinux).
    private func credentials(of sender: String,
                             _ done: @escaping @Sendable (Result<(UInt32, UInt32, [UInt8]?), IdentificationFailure>) -> Void) {
        let call: BusMessage
        do {
            call = try BusMessage.methodCall(destination: StandardNames.bus, path: StandardNames.busPath,
                                             interface: StandardNames.bus, member: "GetConnectionCredentials")
            try call.append([.string(sender)])
        } catch {
            return done(.failure(IdentificationFailure("could not ask the bus who the caller is: \(error)")))
        }
        bus.send(call, timeout: 10) { reply in
            switch reply {
            case .failure(let error):
                done(.failure(IdentificationFailure("the bus could not say who the caller is (\(error.name))")))
            case .success(let message):
                guard let values = try? message.arguments(), let dict = values.first?.vardict,
                      let uid = dict["UnixUserID"]?.uint32, let pid = dict["ProcessID"]?.uint32, pid > 0 else {
                    return done(.failure(IdentificationFailure("the bus gave no user and process id for the caller")))
                }
                done(.success((uid, pid, dict["LinuxSecurityLabel"]?.bytes)))
            }
        }
    }
}

/// Why a caller could not be identified.
struct IdentificationFailure: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
