import Foundation
internal import DBus
internal import FerryBusClient
internal import FerryInterface

/// A Ferry session: Apple's background `URLSession`, on the Linux session bus.
///
/// The session is found again by its configuration's identifier: an app that
/// exits (or crashes) and starts again makes a `FerrySession` with the same
/// identifier and gets, through its delegate, what happened while it was away.
/// The transfers belong to the Ferry service (`ferryd`), not to the app.
///
/// ```swift
/// let session = FerrySession(configuration: .background(identifier: "com.example.Podcasts"),
///                            delegate: MyDelegate())
/// let task = try await session.download(from: URL(string: "https://example.com/ep1.mp3")!)
/// let result = try await task.value
/// ```
public final class FerrySession: @unchecked Sendable {
    public let configuration: Configuration
    public let delegate: FerrySessionDelegate?
    /// The queue the delegate is called on, as given; nil: a serial queue of the
    /// session's own.
    public let delegateQueue: OperationQueue?
    let core: SessionCore

    /// Makes the session and starts attaching to it in the background: the
    /// delegate gets the pending events of an earlier run without any further call.
    /// Use ``attach()`` to wait for that (and to see an error, if the service
    /// cannot be reached).
    ///
    /// `delegateQueue`, as `URLSession`'s: the delegate's methods run as operations on
    /// it (`OperationQueue.main` for an app whose state lives on the main thread, and
    /// whose main thread runs the main queue: a `RunLoop` or `dispatchMain()`). They
    /// still come one at a time and in order, even on a queue that runs several
    /// operations at once. A completion is acknowledged to the service once its
    /// method has returned. nil (the default): a serial queue of the session's own,
    /// the event being handled when its method is called.
    public init(configuration: Configuration, delegate: FerrySessionDelegate? = nil, delegateQueue: OperationQueue? = nil) {
        self.configuration = configuration
        self.delegate = delegate
        self.delegateQueue = delegateQueue
        core = SessionCore(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue)
        core.session = self
        let core = core
        Task { _ = try? await core.attach() }
    }

    deinit { core.close() }

    /// Waits until the session is open and the events kept for it were delivered
    /// (and acknowledged).
    public func attach() async throws { try await core.attach() }

    /// Successful attaches so far (for tests that wait for a re-attach).
    var attachCount: Int { core.attachCount }

    /// Queues a download and returns at once: it starts without a `resume()` (unless
    /// `options.startsSuspended`). `destination`: a file path, or an
    /// existing directory (the name then comes from the server or the URL; a URL with
    /// `hasDirectoryPath` is always taken for a directory, and `invalidDestination`
    /// when there is none); nil puts it in the session's download directory.
    public func download(from url: URL, to destination: URL? = nil, options: DownloadOptions = DownloadOptions()) async throws -> FerryTask {
        let r = try await core.callSession(FerryInterface.SessionMethod.download, [.string(url.absoluteString), .vardict(options.busValue(destination: destination))])
        return core.handOut(r.first?.string ?? "/", upload: false, seed: Self.seed("download", url, suspended: options.startsSuspended))
    }

    /// Makes a download suspended, as `URLSession.downloadTask(with:)` does: nothing
    /// is asked of the server until ``FerryTask/resume()``; its ``FerryTask/state`` is
    /// `.paused` until then. The task is the service's at once (it is kept across an
    /// exit of the app and restarts of the service, suspended). ``download(from:to:options:)``
    /// is the one that starts at once.
    public func downloadTask(with url: URL, to destination: URL? = nil, options: DownloadOptions = DownloadOptions()) async throws -> FerryTask {
        var o = options
        o.startsSuspended = true
        return try await download(from: url, to: destination, options: o)
    }

    /// Makes an upload suspended, as `URLSession.uploadTask(with:fromFile:)` does:
    /// ``FerryTask/resume()`` starts it.
    public func uploadTask(with url: URL, fromFile file: URL, options: UploadOptions = UploadOptions()) async throws -> FerryTask {
        var o = options
        o.startsSuspended = true
        return try await upload(file: file, to: url, options: o)
    }

    /// What a creating call knows of its task before the service says more.
    private static func seed(_ kind: String, _ url: URL, suspended: Bool) -> [String: DBusValue] {
        typealias T = FerryInterface.TransferProperty
        return [T.kind.name: .string(kind), T.url.name: .string(url.absoluteString), T.state.name: .string(suspended ? "paused" : "queued")]
    }

    /// Queues a download written into an open, writable file (a regular file, a pipe or
    /// a connected stream socket) instead of a path: how a sandboxed (Flatpak) app saves
    /// where the file chooser portal let it, outside its own directories. The service
    /// copies the file into it once complete and verified; the result's `location` is
    /// then nil. The session passes a copy of the descriptor: keep `fileHandle` open
    /// until this returns, then it is the caller's to close. Not a file opened for appending (the copy starts at
    /// its beginning). A pipe's reader sees its end only once the service is done and
    /// the app has closed its own write end; the service makes the pipe non-blocking,
    /// which the app's copy shares.
    public func download(from url: URL, into fileHandle: FileHandle, options: DownloadOptions = DownloadOptions()) async throws -> FerryTask {
        var o = options.busValue(destination: nil)
        o[FerryInterface.DownloadOption.destinationFD.name] = .unixFD(fileHandle.fileDescriptor)
        defer { withExtendedLifetime(fileHandle) {} } // open until the call is sent
        let r = try await core.callSession(FerryInterface.SessionMethod.download, [.string(url.absoluteString), .vardict(o)])
        return core.handOut(r.first?.string ?? "/", upload: false, seed: Self.seed("download", url, suspended: options.startsSuspended))
    }

    /// Queues an upload of a local file.
    public func upload(file: URL, to url: URL, options: UploadOptions = UploadOptions()) async throws -> FerryTask {
        let r = try await core.callSession(FerryInterface.SessionMethod.upload, [.string(url.absoluteString), .string(file.path), .vardict(options.busValue)])
        return core.handOut(r.first?.string ?? "/", upload: true, source: file.path,
                            seed: Self.seed("upload", url, suspended: options.startsSuspended))
    }

    /// Queues an upload of an open, readable file (a sandboxed app's file from the file
    /// chooser portal). The result's `location` is nil. The session passes a copy of the
    /// descriptor: keep `fileHandle` open until this returns, then it is the caller's to
    /// close. Such an upload cannot be
    /// carried across a restart of the service (it fails, asking for a new upload).
    public func upload(from fileHandle: FileHandle, to url: URL, options: UploadOptions = UploadOptions()) async throws -> FerryTask {
        var o = options.busValue
        o[FerryInterface.UploadOption.sourceFD.name] = .unixFD(fileHandle.fileDescriptor)
        defer { withExtendedLifetime(fileHandle) {} } // open until the call is sent
        let r = try await core.callSession(FerryInterface.SessionMethod.upload, [.string(url.absoluteString), .string(""), .vardict(o)])
        return core.handOut(r.first?.string ?? "/", upload: true, source: "", seed: Self.seed("upload", url, suspended: options.startsSuspended))
    }

    /// A new download that continues from `FerryTask.pause()`'s resume data. The
    /// paused task the data came from (when the service still has it) ends: its
    /// `value` throws `.cancelled`, naming the new task, which carries on its bytes.
    /// To go on with the same task, `resume()` it instead. Resume data outlives a
    /// `cancel()` no more than the partial file does (`invalidResumeData` then).
    public func resumeDownload(with resumeData: Data, to destination: URL? = nil,
                               options: DownloadOptions = DownloadOptions()) async throws -> FerryTask {
        let r = try await core.callSession(FerryInterface.SessionMethod.resumeDownload, [.bytes([UInt8](resumeData)), .vardict(options.busValue(destination: destination))])
        return core.handOut(r.first?.string ?? "/", upload: false, seed: [FerryInterface.TransferProperty.kind.name: .string("download")])
    }

    /// Every task of the session, oldest first (`getAllTasks`).
    public func allTasks() async throws -> [FerryTask] {
        try await core.attach()
        return core.allTasks()
    }

    /// The configuration the service holds for the session now: what this and earlier
    /// runs set, and the service's defaults for the rest (every property is set).
    /// Secrets do not come back: each header's value reads `"(hidden)"`, and the proxy
    /// comes without its user and password; a session made with this configuration
    /// keeps the service's real ones unless they are changed: a header whose value
    /// still reads `"(hidden)"` keeps its real value when another header is added or
    /// changed, and the proxy its credentials unless the proxy is changed. ``Configuration/busAddress``
    /// is this session's own.
    public func storedConfiguration() async throws -> Configuration {
        let path = try await core.attach()
        let r = try await core.call(path, StandardNames.properties, "Get",
                                    [.string(BusClient.sessionInterface), .string(FerryInterface.SessionProperty.configuration.name)])
        guard let stored = r.first?.vardict else {
            throw FerryError.other(name: StandardErrors.failed, message: "the session's Configuration was not a dictionary")
        }
        var c = Configuration(identifier: configuration.identifier, stored: stored)
        c.busAddress = configuration.busAddress
        return c
    }

    public func suspendAll() async throws { _ = try await core.callSession(FerryInterface.SessionMethod.pauseAll) }
    public func resumeAll() async throws { _ = try await core.callSession(FerryInterface.SessionMethod.resumeAll) }
    public func cancelAll() async throws { _ = try await core.callSession(FerryInterface.SessionMethod.cancelAll) }

    /// Forgets the session once its transfers have finished (`finishTasksAndInvalidate`).
    /// The session object stays alive and keeps delivering its tasks' events (to the
    /// delegate and `FerryTask.value`/`events`) until the last has ended, then leaves the
    /// bus. (A paused task never ends until it is resumed.)
    public func finishTasksAndInvalidate() async throws {
        _ = try await core.callSession(FerryInterface.SessionMethod.close, [.boolean(false)])
        core.closeOnceTasksEnd(keeping: self)
    }

    /// Cancels the session's transfers and forgets it (`invalidateAndCancel`). Tasks
    /// whose cancellation had not arrived yet end with an error.
    public func invalidateAndCancel() async throws {
        _ = try await core.callSession(FerryInterface.SessionMethod.close, [.boolean(true)])
        core.close()
    }

    /// Leaves the bus; the session and its transfers go on in the service. Its tasks
    /// that had not ended end with an error here (``FerryError/detached(_:)``): open the session
    /// again to follow them.
    public func detach() { core.close() }
}
