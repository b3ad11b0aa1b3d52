import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One incoming method call, to be answered once with `reply` or `fail`.
///
/// The file descriptors in `arguments` belong to the invocation: when it is
/// answered, every one the handler did not `keepUnixFD` is closed, so a refused
/// call (or one that ignores a descriptor) leaks none.
///
/// Sendable: the fields are immutable but for `answered` and `kept`, which a `Mutex`
/// guards (`answered` is only used on the connection's queue, `kept` from any thread).
public final class MethodInvocation: Sendable {
    public let arguments: [DBusValue]
    public let sender: String?
    public let path: String
    public let interface: String
    public let member: String
    /// Who called, as the connection's `CallerGate` identified them (nil without a gate).
    public let caller: (any Sendable)?
    let call: BusMessage
    let connection: BusConnection
    /// Answered yet, and the descriptors the handler kept (`keepUnixFD`).
    private let state = Mutex((answered: false, kept: Set<Int32>()))

    init(call: BusMessage, arguments: [DBusValue], path: String, interface: String, member: String, connection: BusConnection,
         caller: (any Sendable)? = nil) {
        self.call = call
        self.caller = caller
        self.arguments = arguments
        self.sender = call.sender
        self.path = path
        self.interface = interface
        self.member = member
        self.connection = connection
    }

    /// Sends the method return with these values (from any thread).
    public func reply(_ values: [DBusValue] = []) {
        connection.queue.async { [self] in
            replyBuilt {
                let m = try call.makeReturn()
                try m.append(values)
                return m
            }
        }
    }

    /// Sends the method return `make` builds (on the connection's queue), or the
    /// connection's oversize error when it would be too large for the bus.
    func replyBuilt(_ make: () throws -> BusMessage) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        guard take() else { return }
        do {
            connection.sendOnQueue(try make())
        } catch let e as BusError where e.name == StandardErrors.limitsExceeded {
            sendError(connection.tooLarge("the reply to \(interface).\(member) on \(path)", e))
        } catch let e as BusError {
            sendError(e)
        } catch {
            sendError(BusError(name: StandardErrors.failed, message: "could not build the reply: \(error)"))
        }
    }

    /// Sends an error reply (from any thread).
    public func fail(_ error: BusError) {
        connection.queue.async { [self] in
            guard take() else { return }
            sendError(error)
        }
    }

    public func fail(name: String, message: String) { fail(BusError(name: name, message: message)) }

    /// Takes over `fd` (one of the arguments' descriptors): the handler now owns it
    /// and closes it. Call before answering.
    public func keepUnixFD(_ fd: Int32) {
        state.withLock { _ = $0.kept.insert(fd) }
    }

    private func take() -> Bool {
        let first = state.withLock { state in
            defer { state.answered = true }
            return !state.answered
        }
        guard first else { return false }
        closeUnkeptFDs()
        return !call.noReplyExpected
    }

    /// Closes the received descriptors nobody kept. Once, when the call is answered.
    private func closeUnkeptFDs() {
        let keep = state.withLock { $0.kept }
        for v in arguments {
            for fd in v.unixFDs where fd >= 0 && !keep.contains(fd) { Glibc.close(fd) }
        }
    }

    private func sendError(_ e: BusError) {
        if let m = try? call.makeError(name: e.name, message: e.message) { connection.sendOnQueue(m) }
    }
}
