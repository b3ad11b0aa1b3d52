import Foundation
import XCTest
@testable import FerryCore

#if canImport(Glibc)
import Glibc
#endif

/// Copying a finished download into a client's pipe (`destination-fd`): a reader that
/// takes nothing, a copy called off, and a second copy into a pipe that already had
/// part of the file.
final class DescriptorDeliveryTests: XCTestCase {
    private var directory: String!

    override func setUp() {
        directory = NSTemporaryDirectory() + "/ferry-delivery-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A file of `size` bytes to copy.
    private func source(_ size: Int) -> String {
        let path = directory + "/file.part"
        FileManager.default.createFile(atPath: path, contents: Data((0..<size).map { UInt8($0 % 251) }))
        return path
    }

    private func makePipe() -> (reader: Int32, writer: Int32) {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        return (ends[0], ends[1])
    }

    func testAReaderThatTakesNothingFailsTheCopyAfterTheLimit() throws {
        let (reader, writer) = makePipe()
        defer { close(reader) }
        let descriptor = DestinationDescriptor(fd: writer)
        let started = Date()
        XCTAssertThrowsError(try descriptor.receive(source(1 << 20), stallLimit: 0.5)) { error in
            XCTAssertTrue((error as? CoreError)?.message.contains("took nothing for 0.5 s") ?? false, "\(error)")
        }
        let took = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(took, 0.5, "it waited for the reader first")
        XCTAssertLessThan(took, 10)
    }

    func testACancelledCopyStopsAndTheSamePipeRefusesAnother() throws {
        let (reader, writer) = makePipe()
        defer { close(reader) }
        let descriptor = DestinationDescriptor(fd: writer)
        let delivery = DescriptorDelivery()
        let path = source(1 << 20)
        let ended = expectation(description: "the copy ended")
        let outcome = Outcome()
        descriptor.deliver(path, delivery, stallLimit: 60) { result in
            outcome.set(result)
            ended.fulfill()
        }
        // The pipe fills up, then the copy is called off.
        var count: Int32 = 0
        let deadline = Date().addingTimeInterval(10)
        while ioctl(reader, UInt(FIONREAD), &count) == 0, count < fcntl(reader, 1032 /* F_GETPIPE_SZ */), Date() < deadline {
            usleep(10_000)
        }
        delivery.cancel()
        wait(for: [ended], timeout: 5)
        guard case .failure(let error)? = outcome.result else { return XCTFail("the copy did not stop: \(String(describing: outcome.result))") }
        XCTAssertTrue(error is CancellationError, "\(error)")
        // Part of the file is in the pipe: starting over would hand the reader those bytes twice.
        XCTAssertThrowsError(try descriptor.receive(path)) { error in
            XCTAssertEqual((error as? CoreError)?.name, CoreError.invalidState("").name, "\(error)")
        }
    }

    func testARegularFileIsCutToTheFileAndWrittenAgainFromTheStart() throws {
        let target = directory + "/target"
        FileManager.default.createFile(atPath: target, contents: Data(repeating: 7, count: 300_000))
        let fd = open(target, O_WRONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let descriptor = DestinationDescriptor(fd: fd)
        let path = source(100_000)
        try descriptor.receive(path)
        try descriptor.receive(path)
        XCTAssertEqual(FileManager.default.contents(atPath: target), FileManager.default.contents(atPath: path))
    }
}

/// The result a copy reported, from its queue.
private final class Outcome: @unchecked Sendable {
    // Guarded by `lock`.
    private let lock = NSLock()
    private var stored: Result<Void, Error>?
    var result: Result<Void, Error>? { lock.withLock { stored } }
    func set(_ result: Result<Void, Error>) { lock.withLock { stored = result } }
}
