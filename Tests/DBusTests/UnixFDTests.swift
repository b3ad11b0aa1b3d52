import DBus
import Dispatch
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// File descriptors (`h`): through a message in memory and over a private bus, in
/// both directions, as logind's `Inhibit` hands one out.
final class UnixFDTests: BusTestCase {
    static let interfaceName = "org.ferry.Test.Pipes1"
    static let path = "/org/ferry/Test/pipes"

    /// A pipe: (read end, write end).
    func makePipe() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TimedOut(description: "pipe: \(String(cString: strerror(errno)))") }
        return (fds[0], fds[1])
    }

    func write(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        XCTAssertEqual(Glibc.write(fd, bytes, bytes.count), bytes.count, "write to fd \(fd)")
    }

    /// Reads until end of file (every write end closed), bounded by `poll`.
    func readToEnd(_ fd: Int32, timeout: TimeInterval = 5) throws -> String {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw TimedOut(description: "fd \(fd) not at end of file within \(timeout) s; read '\(String(decoding: out, as: UTF8.self))'") }
            if poll(&pfd, 1, Int32(remaining * 1000) + 1) <= 0 { continue }
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            out.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }

    func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) != -1 }

    func testValueBasics() {
        let v = DBusValue.structure([.string("x"), .variant(.unixFD(7)), .array(element: "h", [.unixFD(8), .unixFD(9)])])
        XCTAssertEqual(DBusValue.unixFD(3).signature, "h")
        XCTAssertEqual(v.signature, "(svah)")
        XCTAssertEqual(DBusValue.variant(.unixFD(3)).unixFD, 3)
        XCTAssertEqual(v.unixFDs, [7, 8, 9])
        XCTAssertEqual(DBusValue.unixFD(5).description, "handle 5")
    }

    func testRoundTripInMemoryDuplicates() throws {
        let (r, w) = try makePipe()
        defer { close(r) }
        let m = try BusMessage.methodCall(destination: "org.ferry.Test", path: "/", interface: "org.ferry.Test", member: "M")
        try m.append(.unixFD(w), .variant(.unixFD(w)), .vardict(["fd": .unixFD(w)]))
        XCTAssertEqual(m.signature, "hva{sv}")
        let args = try m.arguments()
        let fds = args.flatMap(\.unixFDs)
        XCTAssertEqual(fds.count, 3)
        for fd in fds {
            XCTAssertTrue(isOpen(fd))
            XCTAssertNotEqual(fd, w, "a duplicate of its own")
        }
        // libdbus took duplicates: ours can go.
        close(w)
        write(fds[0], "a")
        write(fds[1], "b")
        write(fds[2], "c")
        DBusValue.closeUnixFDs(in: args)
        for fd in fds { XCTAssertFalse(isOpen(fd), "closeUnixFDs closed \(fd)") }
        XCTAssertEqual(try readBytes(r, count: 3), "abc")
    }

    /// Reads exactly `count` bytes (bounded by `poll`).
    func readBytes(_ fd: Int32, count: Int, timeout: TimeInterval = 5) throws -> String {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: count)
        let deadline = Date().addingTimeInterval(timeout)
        while out.count < count {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw TimedOut(description: "only \(out.count) of \(count) bytes on fd \(fd)") }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, Int32(remaining * 1000) + 1) <= 0 { continue }
            let n = read(fd, &buffer, count - out.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            out.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }

    func testClosedDescriptorIsRefused() throws {
        let (r, w) = try makePipe()
        close(r)
        close(w)
        let m = try BusMessage.methodCall(destination: "org.ferry.Test", path: "/", interface: "org.ferry.Test", member: "M")
        XCTAssertThrowsError(try m.append(.unixFD(w))) { error in
            XCTAssertEqual((error as? BusError)?.name, StandardErrors.invalidArgs)
        }
        XCTAssertThrowsError(try m.append(.unixFD(-1)))
        XCTAssertEqual(m.signature, "", "nothing was appended")
    }

    /// Exports `Open() -> h` (hands out a pipe's write end and keeps the read end,
    /// like logind's Inhibit) and `Fill(h fd, s text)` (writes `text` into the fd it
    /// was given and closes it). `opened` gets the read ends.
    func exportPipes(opened: Mailbox<Int32>) async throws {
        let server = self.server!
        let spec = InterfaceSpec(name: Self.interfaceName, methods: [
            MethodSpec("Open", out: [ArgSpec("fd", "h")]) { inv in
                var fds: [Int32] = [-1, -1]
                guard pipe(&fds) == 0 else { return inv.fail(name: StandardErrors.failed, message: "pipe failed") }
                let (readEnd, writeEnd) = (fds[0], fds[1])
                opened.put(readEnd)
                inv.reply([.unixFD(writeEnd)])
                // The reply is built later on the queue: close ours after that.
                server.perform { close(writeEnd) }
            },
            MethodSpec("Fill", in: [ArgSpec("fd", "h"), ArgSpec("text", "s")]) { inv in
                guard let fd = inv.arguments[0].unixFD, let text = inv.arguments[1].string else { return }
                inv.keepUnixFD(fd)  // closed here, not by the invocation
                let bytes = Array(text.utf8)
                let n = Glibc.write(fd, bytes, bytes.count)
                close(fd) // ours: a duplicate libdbus made for this call
                if n == bytes.count { inv.reply() } else { inv.fail(name: StandardErrors.failed, message: "short write") }
            },
        ])
        server.export(ExportedObject(path: Self.path, interfaces: [spec]))
        let reply = try await server.requestName("org.ferry.Test.Pipes")
        XCTAssertEqual(reply, .primaryOwner)
    }

    func testReceivedDescriptorReachesTheSendersPipe() async throws {
        XCTAssertTrue(client.canPassUnixFDs)
        XCTAssertTrue(server.canPassUnixFDs)
        let opened = Mailbox<Int32>()
        try await exportPipes(opened: opened)
        let reply = try await client.call(destination: "org.ferry.Test.Pipes", path: Self.path, interface: Self.interfaceName,
                                          method: "Open")
        let readEnd = try await opened.next(timeout: 5, "the server's read end")
        defer { close(readEnd) }
        guard let fd = reply.first?.unixFD else { return XCTFail("no fd in \(reply)") }
        XCTAssertTrue(isOpen(fd))
        write(fd, "through the bus")
        // Closing the one we received is what ends the pipe: the server sees EOF.
        close(fd)
        XCTAssertEqual(try readToEnd(readEnd), "through the bus")
    }

    func testSentDescriptorIsWrittenByTheReceiver() async throws {
        let opened = Mailbox<Int32>()
        try await exportPipes(opened: opened)
        let (r, w) = try makePipe()
        defer { close(r) }
        try await client.call(destination: "org.ferry.Test.Pipes", path: Self.path, interface: Self.interfaceName,
                              method: "Fill", arguments: [.unixFD(w), .string("hello, fd")])
        close(w)
        XCTAssertEqual(try readToEnd(r), "hello, fd")
    }

    /// Descriptors a handler does not keep are closed once the call is answered,
    /// refused or not: the sender's pipe sees its end of file.
    func testDescriptorsNotKeptAreClosedWhenAnswered() async throws {
        let spec = InterfaceSpec(name: Self.interfaceName, methods: [
            MethodSpec("Refuse", in: [ArgSpec("options", "a{sv}")]) { inv in
                inv.fail(name: "org.ferry.Test.Error.Refused", message: "no")
            },
            MethodSpec("Ignore", in: [ArgSpec("value", "v")]) { inv in inv.reply() },
        ])
        server.export(ExportedObject(path: Self.path, interfaces: [spec]))
        _ = try await server.requestName("org.ferry.Test.Fds")
        for (method, wrap) in [("Refuse", { (fd: Int32) in DBusValue.vardict(["fd": .unixFD(fd)]) }),
                               ("Ignore", { (fd: Int32) in DBusValue.variant(.unixFD(fd)) })] {
            let (r, w) = try makePipe()
            defer { close(r) }
            _ = try? await client.call(destination: "org.ferry.Test.Fds", path: Self.path, interface: Self.interfaceName,
                                       method: method, arguments: [wrap(w)])
            close(w)
            // Only the server's duplicate could still hold the pipe open.
            XCTAssertEqual(try readToEnd(r), "", "\(method): the server closed the descriptor it was sent")
        }
    }

    func testSignalCarriesADescriptor() async throws {
        let box = try await collect(MatchRule(interface: Self.interfaceName, member: "Handed"))
        let (r, w) = try makePipe()
        defer { close(r) }
        try server.emitSignal(path: Self.path, interface: Self.interfaceName, name: "Handed", arguments: [.unixFD(w)])
        let m = try await box.next(timeout: 5, "the signal")
        // The signal was built (and the fd duplicated) by emitSignal: ours can go.
        close(w)
        let args = try m.arguments()
        guard let fd = args.first?.unixFD else { return XCTFail("no fd in \(args)") }
        write(fd, "signalled")
        close(fd)
        XCTAssertEqual(try readBytes(r, count: 9), "signalled")
    }
}
