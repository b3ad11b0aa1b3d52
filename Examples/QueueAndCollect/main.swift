// A small command-line app on FerryClient, written as an iOS app is with a background
// URLSession: it queues downloads and exits (or is killed); started again, it opens
// the same session by its identifier and collects what finished while it was away.
//
//   ferry-queue-and-collect queue DIR URL...   make the downloads into DIR, start them, print their ids, exit
//   ferry-queue-and-collect collect            deliver what was kept for the session, wait until
//                                              nothing runs any more, print each downloaded file, exit
//
// FERRY_EXAMPLE_ADDRESS names a D-Bus address (the tests' private bus); default: the session bus.

import FerryClient
import Foundation

/// The session's delegate: prints the events, one line each, and tells `collect` when
/// what was kept is delivered and when nothing runs any more.
final class Printer: FerrySessionDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var waiting: [String: CheckedContinuation<Void, Never>] = [:]
    private var seen: Set<String> = []

    func ferrySession(_ session: FerrySession, downloadTask: FerryTask, didFinishDownloadingTo location: URL) {
        say("finished \(downloadTask.id) \(location.path)")
    }

    func ferrySession(_ session: FerrySession, task: FerryTask, didCompleteWithError error: FerryError?) {
        say("completed \(task.id) " + (error.map { "failed: \($0.message)" } ?? "ok"))
    }

    /// URLSession's `urlSessionDidFinishEvents(forBackgroundURLSession:)`: everything kept
    /// for the session while the app was away has been delivered.
    func ferrySessionDidFinishEvents(forBackgroundSession session: FerrySession) {
        say("delivered what was kept")
        happened("kept")
    }

    /// Nothing is queued, waiting or running in the session any more.
    func ferrySessionDidBecomeIdle(_ session: FerrySession) {
        say("idle")
        happened("idle")
    }

    func wait(for what: String) async {
        await withCheckedContinuation { c in
            lock.lock()
            if seen.contains(what) { lock.unlock(); c.resume() } else { waiting[what] = c; lock.unlock() }
        }
    }

    private func happened(_ what: String) {
        let c: CheckedContinuation<Void, Never>? = lock.withLock {
            seen.insert(what)
            return waiting.removeValue(forKey: what)
        }
        c?.resume()
    }

    func say(_ s: String) {
        FileHandle.standardOutput.write(Data((s + "\n").utf8)) // unbuffered: a test reads it as it comes
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
            // As with URLSession: the task is made suspended, then resumed.
            let task = try await session.downloadTask(with: u, to: directory)
            try await task.resume()
            printer.say("queued \(task.id)")
        }
        // The downloads belong to Ferry, not to this process: it may go now.
        session.detach()
    case "collect":
        // The same identifier finds the session again; the delegate gets what was kept.
        let session = FerrySession(configuration: configuration(), delegate: printer)
        try await session.attach()
        let tasks = try await session.allTasks()
        // `state` is what the session last heard: no call to the service per task.
        if tasks.contains(where: { !$0.state.isFinal }) { await printer.wait(for: "idle") }
        for task in tasks where task.state == .completed {
            let file = task.destination?.path ?? "?"
            printer.say("file \(task.id) \(file) \(task.countOfBytesReceived) bytes")
            try await task.remove() // collected: the service forgets it (the file stays)
        }
        session.detach()
    default:
        FileHandle.standardError.write(Data("usage: ferry-queue-and-collect queue DIR URL... | collect\n".utf8))
        exit(64)
    }
} catch {
    FileHandle.standardError.write(Data("ferry-queue-and-collect: \(error)\n".utf8))
    exit(1)
}
