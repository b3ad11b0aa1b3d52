import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A pipe (or socket) given as `destination-fd` is the client's: its reader may be slow,
/// never read at all, or go away. None of that may hold up or end ferryd for anyone else.
final class DestinationPipeTests: FerryTestCase {
    private let size = 1 << 20 // well over a pipe's 64 KiB

    /// Bytes waiting in the pipe behind `fd` (its read end).
    private func unread(_ fd: Int32) -> Int32 {
        var count: Int32 = 0
        return ioctl(fd, UInt(FIONREAD), &count) == 0 ? count : -1
    }

    /// Reads `fd` to its end on a thread of its own; the bytes, once the writers are gone.
    private func readToEnd(_ fd: Int32) async -> [UInt8] {
        await withCheckedContinuation { (done: CheckedContinuation<[UInt8], Never>) in
            Thread.detachNewThread {
                var all: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = read(fd, &chunk, chunk.count)
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { break }
                    all += chunk[0..<n]
                }
                done.resume(returning: all)
            }
        }
    }

    /// The reader takes nothing while the pipe is full: other clients' calls are
    /// answered and their downloads complete meanwhile; once it reads, it gets the
    /// whole verified file and the transfer completes.
    func testAPipeNobodyReadsHoldsUpNoOneElse() async throws {
        let body = serve("/piped.bin", size: size)
        let other = serve("/other.bin", size: 50_000, seed: 2)
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let (reader, writer) = (ends[0], ends[1])
        defer { close(reader) }
        let s = try await session()
        let t = try await s.download(server.url("/piped.bin"), options: ["destination-fd": .unixFD(writer),
                                                                      "sha256": .string(TestData.sha256Hex(body))])
        close(writer) // ferryd has its own copy
        let capacity = fcntl(reader, 1032 /* F_GETPIPE_SZ */)
        XCTAssertGreaterThan(capacity, 0)
        // Verified and being copied: the pipe fills up and the copy waits for the reader.
        let deadline = Date().addingTimeInterval(20)
        while unread(reader) < capacity {
            guard Date() < deadline else { return XCTFail("the pipe never filled (\(unread(reader)) of \(capacity) bytes)") }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        let state = try await t.info().state
        XCTAssertEqual(state, "running", "it completes only once the reader has the file")

        let listed = try await call(BusClient.managerPath, BusClient.managerInterface, "ListTransfers", timeout: 5)
        XCTAssertEqual(listed.first?.arrayElements?.count, 1, "ferryd answers while the reader waits")
        let b = try await (try await session("com.example.Other")).download(
            server.url("/other.bin"), options: ["destination": .string(work + "/other.bin")])
        let otherInfo = try await finish(b, timeout: 10)
        XCTAssertEqual(otherInfo.state, "completed", otherInfo.errorMessage)
        assertFile(work + "/other.bin", equals: other)

        let received = await readToEnd(reader)
        XCTAssertEqual(received.count, body.count)
        XCTAssertEqual(TestData.sha256Hex(received), TestData.sha256Hex(body), "the reader gets the whole file")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.bytesTransferred, Int64(body.count))
    }

    /// Whether every writer of the pipe behind `reader` is gone (a read says end of
    /// file), polled within `timeout`; the read end is made non-blocking for it.
    private func writersGone(_ reader: Int32, timeout: TimeInterval = 10) async throws -> Bool {
        _ = fcntl(reader, F_SETFL, fcntl(reader, F_GETFL) | O_NONBLOCK)
        let deadline = Date().addingTimeInterval(timeout)
        var byte: UInt8 = 0
        while Date() < deadline {
            if read(reader, &byte, 1) == 0 { return true }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return false
    }

    /// A cancelled download's descriptor is closed at once (not kept until `Remove`),
    /// and every descriptor a caller holds in ferryd counts against one budget (here
    /// 64: the open-file limit, 320, less 256): past it `destination-fd` is refused
    /// with LimitExceeded, and a cancelled one makes room again.
    func testDestinationDescriptorsAreCappedAndClosedWhenCancelled() async throws {
        serve("/fd.bin", size: 1000)
        try await stopFerryd()
        try await startFerryd(wrapper: ["/usr/bin/prlimit", "--nofile=100:320", "--"])
        let s = try await session()

        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let (reader, writer) = (ends[0], ends[1])
        defer { close(reader) }
        let piped = try await s.download(server.url("/fd.bin"), options: ["destination-fd": .unixFD(writer), "start": .boolean(false)])
        close(writer) // ferryd holds the only writer now
        try await piped.cancel()
        let gone = try await writersGone(reader)
        XCTAssertTrue(gone, "the cancelled download's descriptor was closed before Remove")

        let target = work + "/fd-target.bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: nil))
        let fd = open(target, O_WRONLY | O_CLOEXEC)
        defer { close(fd) }
        let held = try await fillTheDescriptorBudget(refusalNaming: "destination-fd") { _ in
            try await s.download(server.url("/fd.bin"), options: ["destination-fd": .unixFD(fd), "start": .boolean(false)])
        }

        try await held[0].cancel()
        let more = try await s.download(server.url("/fd.bin"), options: ["destination-fd": .unixFD(fd)])
        let info = try await finish(more)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        await assertDaemonAlive()
    }

    /// A connected stream socket takes the file as a pipe does; a datagram socket (which
    /// would cut it into messages) and a listening one (no peer) are refused at the call,
    /// by name, and create nothing.
    func testAStreamSocketReceivesTheFileAndOtherSocketsAreRefused() async throws {
        let body = serve("/socket.bin", size: size, seed: 4)
        let s = try await session()
        var pair: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair), 0)
        let (reader, writer) = (pair[0], pair[1])
        defer { close(reader) }
        let t = try await s.download(server.url("/socket.bin"), options: ["destination-fd": .unixFD(writer)])
        shutdown(reader, Int32(SHUT_WR))
        close(writer)
        let received = await readToEnd(reader)
        XCTAssertEqual(TestData.sha256Hex(received), TestData.sha256Hex(body), "the reader gets the whole file (\(received.count) bytes)")
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)

        let before = try await s.listTransfers()
        var datagram: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0, &datagram), 0)
        defer { close(datagram[0]); close(datagram[1]) }
        let listening = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(listening, 0)
        defer { close(listening) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        XCTAssertEqual(withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, socklen_t(MemoryLayout<sa_family_t>.size)) }
        }, 0, "bound to an autobound abstract address")
        XCTAssertEqual(listen(listening, 1), 0)
        for (what, fd, words) in [("a datagram socket", datagram[1], "datagram"), ("a listening socket", listening, "listening")] {
            let e = await assertBusError("org.ferry.Ferry1.Error.InvalidDestination", "destination-fd of \(what)") {
                try await s.download(server.url("/socket.bin"), options: ["destination-fd": .unixFD(fd)])
            }
            XCTAssertTrue(e?.message.contains(words) ?? false, e?.message ?? "")
        }
        let after = try await s.listTransfers()
        XCTAssertEqual(after.count, before.count, "refused calls create nothing")
    }

    /// The reader closes its end before the file arrives: that transfer fails with a
    /// named error, ferryd lives on, and the next download works.
    func testAReaderThatLeavesFailsOnlyItsTransfer() async throws {
        serve("/gone.bin", size: size)
        let next = serve("/next.bin", size: 20_000, seed: 3)
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let s = try await session()
        let t = try await s.download(server.url("/gone.bin"), options: ["destination-fd": .unixFD(ends[1])])
        var st = stat()
        XCTAssertEqual(fstat(ends[1], &st), 0)
        close(ends[1])
        close(ends[0]) // nobody will read
        let info = try await finish(t)
        XCTAssertEqual(info.state, "failed")
        XCTAssertEqual(info.errorName, "org.ferry.Ferry1.Error.Disk", info.errorMessage)
        XCTAssertTrue(info.errorMessage.contains("destination-fd"), info.errorMessage)
        await assertDaemonAlive()
        // No copy can reach a pipe whose reader left: ferryd closed it, before Remove.
        let pid = try XCTUnwrap(ferryd?.pid)
        func holdsThePipe() -> Bool {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []).contains {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == "pipe:[\(st.st_ino)]"
            }
        }
        try await waitUntilAsync("ferryd closes the pipe", timeout: 5) { !holdsThePipe() }

        let n = try await s.download(server.url("/next.bin"), options: ["destination": .string(work + "/next.bin")])
        let nextInfo = try await finish(n)
        XCTAssertEqual(nextInfo.state, "completed", nextInfo.errorMessage)
        assertFile(work + "/next.bin", equals: next)
    }
}
