import Dispatch
import FerryMetalink
import Foundation

/// Reads fetched Metalink documents off the core's queue: a document of up to 4 MiB
/// (tens of thousands of piece hashes) takes the XML parser a good part of a second, and
/// the core's queue answers every client meanwhile. ferryd's is a `MetalinkReadQueue`;
/// core tests put in one they can hold.
public protocol MetalinkReading: AnyObject, Sendable {
    /// Parses `data`, off the caller's thread, then calls `done` once (on any thread).
    func read(_ data: Data, done: @escaping @Sendable (Result<Metalink, MetalinkError>) -> Void)
}

/// ferryd's `MetalinkReading`: each document is read by `ferry-metalink-reader`, a
/// process of its own, one document after another on a serial queue (not a concurrent
/// one: see `FileJobQueues` in FerryEngine on libdispatch's worker pool).
///
/// The document comes from a server, and the XML parser is C (libxml2): parsed in a
/// process that ends with it, a memory-safety flaw a document finds in the parser cannot
/// corrupt the daemon's memory, and the daemon does not load the parser's libraries
/// (FoundationXML, libxml2, ICU's `libicuuc`: 1.3 MiB of every ferryd). The reader runs
/// as the same user, with an empty environment; once it has read the document a seccomp
/// filter lets it only compute and answer on its standard streams (no open, socket,
/// fork, exec, signal to another process or change on disk: see the reader's
/// `confine()`). What it answers is checked again as the parser would
/// (`Metalink.problem`), so a reader gone wrong can make ferryd use nothing a document
/// could not say.
///
/// The reader gets `timeLimit` seconds (and sets itself 30 s of CPU) and may answer with
/// at most `maxOutputBytes`; a reader that cannot be started, is stopped, dies or answers
/// something else fails the transfer as `InvalidMetalink`, saying which. Writing the
/// document to a reader that died first needs SIGPIPE ignored, as ferryd has it.
public final class MetalinkReadQueue: MetalinkReading {
    private let queue = DispatchQueue(label: "org.ferry.metalink-documents", qos: .utility)
    /// The reader's path; nil when none was found.
    public let reader: String?
    let timeLimit: Double
    /// The JSON of 4 MiB of piece hashes is about as large; well beyond that is no answer of a reader.
    static let maxOutputBytes = 4 * MetalinkLimits.maxDocumentBytes

    public init(reader: String? = MetalinkReadQueue.installedReader(), timeLimit: Double = 60) {
        self.reader = reader
        self.timeLimit = timeLimit
    }

    public func read(_ data: Data, done: @escaping @Sendable (Result<Metalink, MetalinkError>) -> Void) {
        queue.async { [reader, timeLimit] in done(Self.run(reader, on: data, timeLimit: timeLimit)) }
    }

    /// The reader's name, in the same folder as the running executable (a build, `make
    /// demo`) or in `../libexec/ferry` from it (`make install`).
    public static let readerName = "ferry-metalink-reader"

    /// Where this process's reader is, if anywhere: beside the running executable, else
    /// in `../libexec/ferry` from it.
    public static func installedReader() -> String? {
        guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        let folder = (executable as NSString).deletingLastPathComponent
        for candidate in [folder + "/" + readerName, folder + "/../libexec/ferry/" + readerName] where access(candidate, X_OK) == 0 {
            return candidate
        }
        return nil
    }

    /// The first line the reader wrote to `fd` (non-blocking), without its program name,
    /// control characters or more than 200 characters: it goes into a transfer's error.
    static func firstLine(_ fd: Int32) -> String {
        var bytes = [UInt8](repeating: 0, count: 4096)
        let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return "" }
        var line = String(decoding: bytes[0..<n], as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        if line.hasPrefix(readerName + ": ") { line.removeFirst(readerName.count + 2) }
        line = String(line.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        return line.count > 200 ? String(line.prefix(200)) + "…" : line
    }

    static func run(_ reader: String?, on data: Data, timeLimit: Double) -> Result<Metalink, MetalinkError> {
        func failed(_ why: String) -> Result<Metalink, MetalinkError> {
            .failure(MetalinkError(.malformed, "Ferry's Metalink reader \(why); the document was not used"))
        }
        guard let reader else {
            return .failure(MetalinkError(.malformed, "Ferry's Metalink reader (\(readerName)) is not installed beside ferryd; the document could not be read"))
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: reader)
        process.environment = [:]
        let input = Pipe(), output = Pipe(), errors = Pipe()
        // Close-on-exec, so that no other process this daemon starts meanwhile holds an
        // end open (the reader gets its ends as its standard streams all the same).
        for pipe in [input, output, errors] {
            for fd in [pipe.fileHandleForReading.fileDescriptor, pipe.fileHandleForWriting.fileDescriptor] {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            }
        }
        // What the reader says on standard error is read after it ends (it says one line
        // at most; one that fills the pipe only holds itself up until it is stopped).
        _ = fcntl(errors.fileHandleForReading.fileDescriptor, F_SETFL, O_NONBLOCK)
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        do {
            try process.run()
        } catch {
            return .failure(MetalinkError(.malformed, "Ferry's Metalink reader (\(reader)) could not be started: \(error)"))
        }
        let deadline = Date().addingTimeInterval(timeLimit)
        let limit = String(format: "%g", timeLimit)
        // Written from another thread: the reader answers only once it has it all, and
        // a pipe holds 64 KiB. A reader that dies first makes the write fail (EPIPE).
        let writer = input.fileHandleForWriting
        DispatchQueue.global(qos: .utility).async {
            try? writer.write(contentsOf: data)
            try? writer.close()
        }
        // Read until the reader closes its output, says too much, or the time is up; it is
        // killed (before it is waited for, so its pid is still its own) in the last two cases.
        let reading = output.fileHandleForReading
        var answer = Data()
        var stopped: String?
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while stopped == nil {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else {
                stopped = "took more than \(limit) s"
                break
            }
            var ready = pollfd(fd: reading.fileDescriptor, events: Int16(POLLIN), revents: 0)
            let n = poll(&ready, 1, Int32(min(left * 1000, 1000).rounded(.up)))
            if n < 0 && errno == EINTR { continue }
            if n == 0 { continue }
            let got = buffer.withUnsafeMutableBytes { Glibc.read(reading.fileDescriptor, $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            answer.append(contentsOf: buffer[0..<got])
            if answer.count > maxOutputBytes { stopped = "answered with more than \(maxOutputBytes) bytes" }
        }
        // A reader that closed its output but goes on is given what is left of its time.
        while stopped == nil, process.isRunning {
            if deadline.timeIntervalSinceNow <= 0 { stopped = "took more than \(limit) s" } else { usleep(10_000) }
        }
        if stopped != nil, process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? reading.close()
        process.waitUntilExit()
        let said = Self.firstLine(errors.fileHandleForReading.fileDescriptor)
        try? errors.fileHandleForReading.close()
        if let stopped { return failed("\(stopped) and was stopped") }
        if process.terminationReason == .uncaughtSignal {
            return failed(process.terminationStatus == SIGXCPU ? "used its 30 s of CPU" : "crashed (signal \(process.terminationStatus))")
        }
        guard process.terminationStatus == 0 else {
            return failed("ended with status \(process.terminationStatus)" + (said.isEmpty ? "" : " (\(said))"))
        }
        guard let outcome = try? JSONDecoder().decode(MetalinkReadOutcome.self, from: answer) else {
            return failed("answered something that is not a reading of a document")
        }
        switch outcome {
        case .read(let metalink):
            if let problem = metalink.problem { return failed("answered with \(problem)") }
            return .success(metalink)
        case .refused(var error):
            if error.message.count > MetalinkLimits.maxMessageCharacters {
                error.message = String(error.message.prefix(MetalinkLimits.maxMessageCharacters)) + "…"
            }
            return .failure(error)
        }
    }
}
