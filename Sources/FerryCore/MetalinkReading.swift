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
/// process that ends with it, a flaw the document finds reaches nothing of the daemon's,
/// and the daemon does not load the parser's libraries (libxml2, ICU, liblzma: 1.2 MiB of
/// every ferryd's memory). The reader gets `timeLimit` seconds and may answer with at most
/// `maxOutputBytes`; a reader that cannot be started, dies or says something else fails
/// the transfer as `InvalidMetalink`, naming what went wrong.
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

    static func run(_ reader: String?, on data: Data, timeLimit: Double) -> Result<Metalink, MetalinkError> {
        guard let reader else {
            return .failure(MetalinkError(.malformed, "Ferry's Metalink reader (\(readerName)) is not installed beside ferryd; the document could not be read"))
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: reader)
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return .failure(MetalinkError(.malformed, "Ferry's Metalink reader (\(reader)) could not be started: \(error)"))
        }
        // Past the time limit the reader is killed, which ends the read below.
        let watchdog = DispatchWorkItem { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + timeLimit, execute: watchdog)
        // Written from another thread: the reader answers only once it has it all, and
        // a pipe holds 64 KiB. A reader that dies first makes the write fail (EPIPE), not ferryd.
        let writer = input.fileHandleForWriting
        DispatchQueue.global(qos: .utility).async {
            try? writer.write(contentsOf: data)
            try? writer.close()
        }
        var answer = Data()
        var tooLong = false
        let reading = output.fileHandleForReading
        while let chunk = try? reading.read(upToCount: 1 << 16), !chunk.isEmpty {
            answer.append(chunk)
            if answer.count > maxOutputBytes {
                tooLong = true
                kill(process.processIdentifier, SIGKILL)
                break
            }
        }
        try? reading.close()
        process.waitUntilExit()
        watchdog.cancel()
        if tooLong {
            return .failure(MetalinkError(.malformed, "Ferry's Metalink reader answered with more than \(maxOutputBytes) bytes; the document was not used"))
        }
        guard process.terminationReason == .exit, process.terminationStatus == 0,
              let outcome = try? JSONDecoder().decode(MetalinkReadOutcome.self, from: answer) else {
            let how = process.terminationReason == .uncaughtSignal
                ? "was stopped by signal \(process.terminationStatus) (over its \(Int(timeLimit)) s, or it crashed)"
                : "ended with status \(process.terminationStatus) without an answer"
            return .failure(MetalinkError(.malformed, "Ferry's Metalink reader \(how); the document was not used"))
        }
        switch outcome {
        case .read(let metalink): return .success(metalink)
        case .refused(let error): return .failure(error)
        }
    }
}
