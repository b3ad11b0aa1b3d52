import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// `destination-fd` downloads of sandboxed apps: the verified file reaches the descriptor, and only the app resumes its own.
extension SandboxedCallerTests {
    /// A sandboxed app receives a file where it may not name a path through a
    /// descriptor it passes (`destination-fd`): the file arrives complete and verified,
    /// no partial file appears beside it, and ferryd's private copy is gone. A
    /// descriptor not open for writing, open for appending, or of the wrong type, is refused.
    func testDestinationFDReceivesTheVerifiedFile() async throws {
        let body = serve("/report.pdf", size: 300_000)
        let evil = try await sandboxedClient(appID)
        let s = try await evil.openSession("\(appID).Documents")
        let documents = home + "/Documents"
        try FileManager.default.createDirectory(atPath: documents, withIntermediateDirectories: true)
        let target = documents + "/report.pdf"
        try "old contents that are longer than nothing\n".write(toFile: target, atomically: false, encoding: .utf8)
        let fd = open(target, O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }

        let t = try await s.download(server.url("/report.pdf"), options: ["destination-fd": .unixFD(fd),
                                                                       "sha256": .string(TestData.sha256Hex(body))])
        let info = try await finish(t)
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, "", "there is no path to show")
        assertFile(target, equals: body)
        XCTAssertEqual(partFiles(in: documents), [])
        let state = environment()["XDG_STATE_HOME"] ?? home + "/.local/state"
        let privateCopies = (try? FileManager.default.contentsOfDirectory(atPath: state + "/ferry/fd-downloads")) ?? []
        XCTAssertEqual(privateCopies, [], "ferryd's private copy is deleted")

        let readOnly = open(target, O_RDONLY | O_CLOEXEC)
        defer { close(readOnly) }
        await assertBusError(ok + "InvalidDestination", "a read-only descriptor") {
            try await s.download(self.server.url("/report.pdf"), options: ["destination-fd": .unixFD(readOnly)])
        }
        let appending = open(target, O_WRONLY | O_APPEND | O_CLOEXEC)
        defer { close(appending) }
        await assertBusError(ok + "InvalidDestination", "a descriptor open for appending (the file would be written after its old contents)") {
            try await s.download(self.server.url("/report.pdf"), options: ["destination-fd": .unixFD(appending)])
        }
        await assertBusError(ok + "InvalidArgument", "destination-fd as a string") {
            try await s.download(self.server.url("/report.pdf"), options: ["destination-fd": .string(target)])
        }
        await assertBusError(ok + "InvalidArgument", "both destination and destination-fd") {
            try await s.download(self.server.url("/report.pdf"), options: ["destination-fd": .unixFD(fd),
                                                                          "destination": .string(self.home + "/.var/app/\(self.appID)/x")])
        }
        assertFile(target, equals: body)

        // Before it completes too, Destination shows no path (the private copy's is ferryd's).
        let paused = try await s.download(server.url("/report.pdf"), options: ["destination-fd": .unixFD(fd), "start": .boolean(false)])
        let pausedInfo = try await paused.info()
        XCTAssertEqual(pausedInfo.state, "paused")
        XCTAssertEqual(pausedInfo.destination, "", "ferryd's private copy is not shown")
    }

    /// A sandboxed app's `destination-fd` download of `path` into a new file of its
    /// `~/Documents` (the descriptor stays open until `closing` says), paused once the
    /// server has stalled: its session, the transfer, the resume data, the served bytes
    /// and the descriptor.
    func pausedDescriptorDownload(_ path: String, session name: String) async throws
        -> (BusSession, FerryTransfer, [UInt8], [UInt8], Int32) {
        let body = serve(path, size: stalledSize, etag: "\"\(path)\"")
        server.set(.stallAfter(bytes: stalledCut, times: 1), on: path)
        let s = try await sandboxedClient(appID).openSession("\(appID).\(name)")
        let documents = home + "/Documents"
        try FileManager.default.createDirectory(atPath: documents, withIntermediateDirectories: true)
        let fd = open(documents + path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let t = try await s.download(server.url(path), options: ["destination-fd": .unixFD(fd)])
        try await signals.wait("a Progress with the bytes received before the stall", timeout: 10) { sigs in
            sigs.contains { $0.path == t.path && $0.member == "Progress" && ($0.args[1].int64 ?? 0) >= Int64(self.stalledCut) }
        }
        let data = try await t.pause()
        try await waitForState(t, "paused")
        return (s, t, data, body, fd)
    }

    /// A sandboxed app pauses its own `destination-fd` download and continues it from
    /// the resume data `Pause` gave it, into the descriptor the paused transfer holds.
    /// Another app with the same data is refused, and no answer names ferryd's private
    /// partial file.
    func testASandboxedAppResumesItsOwnDestinationFDDownload() async throws {
        let (s, t, data, body, fd) = try await pausedDescriptorDownload("/movie.bin", session: "Films")
        defer { close(fd) }

        // Another application holding the same bytes gets nothing from them.
        let o = try await sandboxedClient("com.example.Other").openSession("com.example.Other.Films")
        do {
            _ = try await o.resumeDownload(data)
            XCTFail("another app continued this app's destination-fd download")
        } catch let error as BusError {
            XCTAssertEqual(error.name, ok + "InvalidResumeData", error.message)
            XCTAssertFalse(error.message.contains("fd-downloads"), "no private path: \(error.message)")
        }

        // The app itself continues it, into the descriptor it gave first.
        let info = try await finish(try await s.resumeDownload(data))
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        XCTAssertEqual(info.destination, "")
        assertFile(home + "/Documents/movie.bin", equals: body)
        let ranged = server.requests(for: "/movie.bin").compactMap { $0.header("Range") }
        XCTAssertEqual(ranged, ["bytes=\(stalledCut)-"], "continued where it stopped, with a range")
        let old = try await t.info()
        XCTAssertEqual(old.state, "cancelled", "the paused transfer handed its download over")
    }

    /// After ferryd lost the descriptor (a restart), the app passes a new one with
    /// `ResumeDownload`; without one it is told to.
    func testASandboxedAppResumesADestinationFDDownloadIntoANewDescriptor() async throws {
        let (_, _, data, body, first) = try await pausedDescriptorDownload("/song.bin", session: "Music")
        close(first)
        try await stopFerryd()
        try await startFerryd()

        let s = try await sandboxedClient(appID).openSession("\(appID).Music")
        do {
            _ = try await s.resumeDownload(data)
            XCTFail("resumed into a descriptor ferryd no longer has")
        } catch let error as BusError {
            XCTAssertEqual(error.name, ok + "InvalidResumeData", error.message)
            XCTAssertTrue(error.message.contains("destination-fd"), error.message)
            XCTAssertFalse(error.message.contains("fd-downloads"), "no private path: \(error.message)")
        }
        let target = home + "/Documents/song-again.bin"
        let second = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(second, 0)
        defer { close(second) }
        let info = try await finish(try await s.resumeDownload(data, options: ["destination-fd": .unixFD(second)]))
        XCTAssertEqual(info.state, "completed", info.errorMessage)
        assertFile(target, equals: body)
    }
}
