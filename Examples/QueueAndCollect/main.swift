// A small command-line app on FerryClient: queues downloads in a background
// session and may be killed at any moment; started again, it collects what
// happened while it was gone.
//
//   ferry-queue-and-collect queue DIR URL...   queue the URLs into DIR, print the task ids, then wait forever
//   ferry-queue-and-collect collect            print the events kept for the session, then wait until it is idle
//
// FERRY_EXAMPLE_ADDRESS names a D-Bus address (the tests' private bus); default: the session bus.

import FerryClient
import Foundation

/// Prints the session's events, one line each, and says when the session is idle.
final class Printer: FerrySessionDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var idle: CheckedContinuation<Void, Never>?
    private var wasIdle = false

    func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL) {
        say("finished \(downloadTask.id) \(location.path)")
    }

    func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
        say("completed \(task.id) " + (error.map { "failed: \($0.message)" } ?? "ok"))
    }

    func ferrySessionDidFinishEvents(_ session: FerrySession) {
        say("idle")
        lock.lock()
        wasIdle = true
        let c = idle
        idle = nil
        lock.unlock()
        c?.resume()
    }

    func waitUntilIdle() async {
        await withCheckedContinuation { c in
            lock.lock()
            if wasIdle { lock.unlock(); c.resume() } else { idle = c; lock.unlock() }
        }
    }

    func say(_ s: String) {
        print(s)
        fflush(stdout)
    }
}

func configuration() -> FerrySession.Configuration {
    var c = FerrySession.Configuration.background(identifier: "org.ferry.example.QueueAndCollect")
    c.busAddress = ProcessInfo.processInfo.environment["FERRY_EXAMPLE_ADDRESS"]
    return c
}

let args = Array(CommandLine.arguments.dropFirst())
let printer = Printer()
do {
    switch args.first {
    case "queue" where args.count >= 3:
        let session = FerrySession(configuration: configuration(), delegate: printer)
        let directory = URL(fileURLWithPath: args[1], isDirectory: true)
        for url in args.dropFirst(2) {
            guard let u = URL(string: url) else { throw FerryError.invalidURL("not a URL: \(url)") }
            let task = try await session.download(from: u, to: directory)
            printer.say("queued \(task.id)")
        }
        // Until killed: the downloads belong to Ferry, not to this process.
        while true { try await Task.sleep(nanoseconds: 3_600_000_000_000) }
    case "collect":
        let session = FerrySession(configuration: configuration(), delegate: printer)
        try await session.attach()
        let open = try await session.allTasks().asyncFilter { try await !$0.state.isFinal }
        if !open.isEmpty { await printer.waitUntilIdle() }
    default:
        FileHandle.standardError.write(Data("usage: ferry-queue-and-collect queue DIR URL... | collect\n".utf8))
        exit(64)
    }
} catch {
    FileHandle.standardError.write(Data("ferry-queue-and-collect: \(error)\n".utf8))
    exit(1)
}

extension Array {
    func asyncFilter(_ keep: (Element) async throws -> Bool) async rethrows -> [Element] {
        var out: [Element] = []
        for e in self where try await keep(e) { out.append(e) }
        return out
    }
}
