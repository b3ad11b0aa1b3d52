/// One transfer as the core keeps it: the public snapshot plus what the core needs to
/// run, resume and rename it.
final class TransferRecord {
    let id: TransferID
    let session: SessionID
    /// Always current, including the progress fields.
    var snapshot: TransferSnapshot
    /// A digest of the signalled fields as last sent with transferChanged (a digest,
    /// not a copy: ten thousand transfers would otherwise keep two snapshots each).
    var publishedDigest: Int?
    var options: DownloadOptions
    /// Lowercased host of the URL, for per-host limits.
    /// The running attempt's body is complete and its file is being flushed: it holds
    /// no connection (`EngineEvent.connectionsFreed`); reset as each attempt starts.
    var connectionsFreed = false
    var host: String
    /// The directory the file goes to.
    var directory: String
    /// Content-Disposition may still rename it: the client gave a directory and no
    /// response has fixed the name yet.
    var serverMayName: Bool
    var etag: String?
    var lastModified: String?
    /// Cancelled because a `ResumeDownload` took its partial file over: the file is
    /// no longer its to delete.
    var partFileHandedOver = false
    /// `Pause` gave its client resume data that names the partial file: in an
    /// ephemeral session the file then outlives the daemon, for `ResumeDownload`.
    var resumeDataGiven = false
    /// Its state with the data each state carries; changed only through its inputs
    /// (the coordinator applies the result with `settle`).
    var life: TransferLife

    // Retries and the resource timeout.
    /// Retries made since a client last started or resumed the transfer.
    var retriesUsed: UInt32 = 0
    /// When the session's resource-timeout started counting (µs; 0 = at the next start).
    var resourceStarted: UInt64 = 0
    /// The resource deadline last put on the coordinator's timeline (µs; 0 = none).
    var deadlineOnTimeline: UInt64 = 0
    /// What the coordinator's index last recorded of this transfer.
    var indexed: TransferIndex.Facts?

    // Persistence.
    /// A digest of what the store holds for this transfer, as last written; nil when
    /// nothing is (an ephemeral session's transfer). A digest rather than a copy, for
    /// memory; a 64-bit collision would only skip one rewrite of an unchanged-looking record.
    var persistedDigest: Int?
    /// When the offset was last checkpointed (µs).
    var lastCheckpoint: UInt64 = 0

    /// What only transfers that ran, or that are uploads, segmented or descriptor
    /// downloads, need: in a box made on the first change, so a queued transfer (most
    /// of ten thousand) does not carry ~300 bytes of defaults.
    private var extrasBox: TransferExtras?
    private var extras: TransferExtras {
        if let box = extrasBox { return box }
        let box = TransferExtras()
        extrasBox = box
        return box
    }

    /// The `.part` path the engine was given for the current or last attempt (it differs
    /// from `partPath` after a Content-Disposition rename when the engine had not
    /// created the file yet).
    var enginePartPath: String? {
        get { extrasBox?.enginePartPath }
        set { if newValue != nil || extrasBox != nil { extras.enginePartPath = newValue } }
    }
    /// Offset the current attempt asked for.
    var attemptOffset: Int64 {
        get { extrasBox?.attemptOffset ?? 0 }
        set { if newValue != 0 || extrasBox != nil { extras.attemptOffset = newValue } }
    }
    var rate: RateEstimator {
        get { extrasBox?.rate ?? RateEstimator() }
        _modify { yield &extras.rate }
    }
    /// (total, expected) of the last transferProgress, nil when none this attempt.
    var lastProgress: (total: Int64, expected: Int64)? {
        get { extrasBox?.lastProgress }
        set { if newValue != nil || extrasBox != nil { extras.lastProgress = newValue } }
    }
    /// Speed limit the engine has for the running attempt.
    var appliedSpeedLimit: UInt64 {
        get { extrasBox?.appliedSpeedLimit ?? 0 }
        set { if newValue != 0 || extrasBox != nil { extras.appliedSpeedLimit = newValue } }
    }
    /// `Retry-After` of the current attempt's failing response, in seconds.
    var retryAfter: Double? {
        get { extrasBox?.retryAfter }
        set { if newValue != nil || extrasBox != nil { extras.retryAfter = newValue } }
    }
    /// Status of the current attempt's failing response, when the engine reported one.
    var failedResponseStatus: Int? {
        get { extrasBox?.failedResponseStatus }
        set { if newValue != nil || extrasBox != nil { extras.failedResponseStatus = newValue } }
    }
    /// The final path the verified `.part` is being moved to (see `StoredTransfer`).
    var finishingPath: String? {
        get { extrasBox?.finishingPath }
        set { if newValue != nil || extrasBox != nil { extras.finishingPath = newValue } }
    }
    /// Where a `destination-fd` download goes (memory only; closed with the record).
    var destinationFD: DestinationDescriptor? {
        get { extrasBox?.destinationFD }
        set { if newValue != nil || extrasBox != nil { extras.destinationFD = newValue } }
    }
    /// The copy of a finished `destination-fd` download into its descriptor, while it
    /// runs (off the core's queue; see `DestinationDescriptor`).
    var delivery: DescriptorDelivery? {
        get { extrasBox?.delivery }
        set { if newValue != nil || extrasBox != nil { extras.delivery = newValue } }
    }
    /// A dedupe follower's copy of its leader's file while it is made (off the core's
    /// queue; see `leaderFinished`): cancelled when the follower stops waiting for it.
    var fetchedCopy: CopyCancellation? {
        get { extrasBox?.fetchedCopy }
        set { if newValue != nil || extrasBox != nil { extras.fetchedCopy = newValue } }
    }
    /// The batches (manager's, session's) whose `failed` count holds this transfer's
    /// failure: a `Resume` within them takes it back out (one transfer, one outcome).
    var failureCountedIn: (manager: UInt64, session: UInt64)? {
        get { extrasBox?.failureCountedIn }
        set { if newValue != nil || extrasBox != nil { extras.failureCountedIn = newValue } }
    }
    /// Its present run was started by resuming it after it failed: that run adds a
    /// completion event the room (`eventRoom`) counted when it began. In memory only.
    var runFromFailure: Bool {
        get { extrasBox?.runFromFailure ?? false }
        set { if newValue || extrasBox != nil { extras.runFromFailure = newValue } }
    }
    /// An upload's settings (nil for a download).
    var upload: UploadSpec? {
        get { extrasBox?.upload }
        set { if newValue != nil || extrasBox != nil { extras.upload = newValue } }
    }
    /// An upload's open source file (memory only: reopened from its path after a
    /// restart; a `source-fd` one cannot be). Closed when the transfer no longer needs it.
    var uploadSource: EngineUpload? {
        get { extrasBox?.uploadSource }
        set { if newValue != nil || extrasBox != nil { extras.uploadSource = newValue } }
    }
    /// A segmented download's ranges on disk, fetched under `validator` (nil: none, or
    /// a plain download whose bytes are the `.part` file's prefix).
    var segments: SegmentMap? {
        get { extrasBox?.segments }
        _modify {
            if extrasBox == nil {
                var none: SegmentMap?
                yield &none
                if none != nil { extras.segments = none }
            } else {
                yield &extras.segments
            }
        }
    }

    /// A download asked to use several connections whose last attempt ran on one (no
    /// length, no range support, a host limit of one): its part file is a plain prefix,
    /// which a resume may continue. Stored; after a restart it holds only while the file
    /// is no longer than the bytes checkpointed with it (`restoredTransfer`): a file
    /// written by several connections may have holes its size hides.
    var partIsPrefix: Bool {
        get { extrasBox?.partIsPrefix ?? false }
        set { if newValue || extrasBox != nil { extras.partIsPrefix = newValue } }
    }

    /// The most of the part file's prefix a resume may keep, until a response takes
    /// the file from there: the offset of the resume data a `ResumeDownload` was made
    /// from (the file may have grown since, by ranges with holes between). nil: all.
    /// Stored; its own resume data (`Pause` before that response) says no more.
    var prefixLimit: Int64? {
        get { extrasBox?.prefixLimit }
        set { if newValue != nil || extrasBox != nil { extras.prefixLimit = newValue } }
    }

    /// What of the part file was last known to be on the disk itself (the engine's
    /// `.durable`); nil: nothing yet. Stored. After the machine restarted (not only the
    /// daemon) the part file is trusted only this far: the rest may be holes a power
    /// cut left under the file's length.
    var durablePart: DurablePart? {
        get { extrasBox?.durablePart }
        set { if newValue != nil || extrasBox != nil { extras.durablePart = newValue } }
    }

    /// The current attempt of a POST upload was answered with success (2xx): the server
    /// took it, so a failure after (its answer cut) is not sent again.
    var postAccepted: Bool {
        get { extrasBox?.postAccepted ?? false }
        set { if newValue || extrasBox != nil { extras.postAccepted = newValue } }
    }

    /// A POST upload that was running when the daemon stopped (restored from the store,
    /// until `start()` counts that attempt as failed): the server may have taken it.
    var postCutByRestart: Bool {
        get { extrasBox?.postCutByRestart ?? false }
        set { if newValue || extrasBox != nil { extras.postCutByRestart = newValue } }
    }

    /// The current attempt is a stream of a shared (HTTP/2) connection: sent to an origin
    /// whose last answer came over HTTP/2, or answered over one.
    var onSharedConnection: Bool {
        get { extrasBox?.onSharedConnection ?? false }
        set { if newValue || extrasBox != nil { extras.onSharedConnection = newValue } }
    }

    /// Attempts whose shared connection went away under them, tried again at once
    /// without counting as retries (`attemptFailed`).
    var sharedConnectionLosses: Int {
        get { extrasBox?.sharedConnectionLosses ?? 0 }
        set { if newValue != 0 || extrasBox != nil { extras.sharedConnectionLosses = newValue } }
    }

    /// Failed attempts while the network wanted a sign-in (`waitForSignIn`), in a row;
    /// nonzero while it waits for one.
    var signInWaits: Int {
        get { extrasBox?.signInWaits ?? 0 }
        set { if newValue != 0 || extrasBox != nil { extras.signInWaits = newValue } }
    }

    /// The current attempt began while the network wanted a sign-in (`waitForSignIn`).
    var attemptBehindPortal: Bool {
        get { extrasBox?.attemptBehindPortal ?? false }
        set { if newValue || extrasBox != nil { extras.attemptBehindPortal = newValue } }
    }

    /// Paused by its session's `on-client-exit` policy (stored): a client opening the
    /// session again resumes it; any other start or end clears it.
    var pausedByClientExit: Bool {
        get { extrasBox?.pausedByClientExit ?? false }
        set { if newValue || extrasBox != nil { extras.pausedByClientExit = newValue } }
    }

    /// How much of a part file of `size` bytes may be continued: all of it, or no more
    /// than `prefixLimit`.
    func continuableBytes(ofPartSize size: Int64) -> Int64 { min(size, prefixLimit ?? size) }

    /// The bytes a download keeps for its next attempt: the sum of its ranges when they
    /// are mapped (several connections), else `prefix` (what an offset resume keeps).
    /// What `BytesTransferred` and a paused download's last `Progress` show.
    func keptBytes(prefix: Int64) -> Int64 { segments?.bytesDone ?? prefix }

    /// What is in the part file can be continued: its ranges are mapped, or it is a
    /// prefix (one connection wrote it).
    var partIsContinuable: Bool { segments != nil || options.connections <= 1 || partIsPrefix }

    init(snapshot: TransferSnapshot, life: TransferLife, options: DownloadOptions, host: String, directory: String,
         serverMayName: Bool) {
        self.id = snapshot.id; self.session = snapshot.session; self.snapshot = snapshot; self.life = life
        self.options = options; self.host = host; self.directory = directory; self.serverMayName = serverMayName
        if !options.mirrors.isEmpty { self.snapshot.mirrors = options.mirrors.map { Redaction.urlWithoutCredentials($0) } }
        if let pieces = options.pieces {
            self.snapshot.pieceLength = UInt64(pieces.length)
            self.snapshot.pieceCount = UInt32(pieces.count)
        }
        syncState()
    }

    var state: TransferState { life.state }
    /// An attempt was told to stop and its end has not come yet.
    var stopInFlight: Bool { life.stopping }
    /// While waiting for a time: not before this moment (µs).
    var notBefore: UInt64 { life.notBefore }
    var isWaitingForNetwork: Bool { life.isWaitingForNetwork }
    var destination: String { snapshot.destination }
    /// An upload has none ("": its destination is the source, never to be touched).
    var partPath: String { isUpload ? "" : snapshot.destination + ".part" }
    var isUpload: Bool { snapshot.kind == .upload }
    /// Running, it has moved bytes that a stop would lose: its next attempt would start
    /// from the first byte (an upload; a download with no validator, or whose server
    /// takes no ranges).
    var wouldStartOverIfStopped: Bool {
        // All its bytes count: a download that resumed and got the whole file again
        // (no ranges) counts from 0, its offset notwithstanding.
        guard snapshot.bytesTransferred > 0 else { return false }
        if isUpload { return true }
        return validator == nil || (segments == nil && !(snapshot.resumable && partIsContinuable))
    }
    /// A POST upload: each one sent, the server may act on (not idempotent, RFC 9110
    /// §9.2.2), so it is not sent again where the server may have taken it.
    var isPOST: Bool { upload?.method == "POST" }
    /// A running POST upload the server may be acting on: this attempt's progress says
    /// its whole body went to libcurl (the engine reports the last bytes at once).
    /// Stopped now and sent again later, it could be acted on twice; before that, the
    /// server has not had the whole request. (An empty body reports no progress: it is
    /// never taken for one.)
    var isPOSTAwaitingItsAnswer: Bool {
        guard state == .running, !stopInFlight, isPOST, let progress = lastProgress else { return false }
        return progress.expected >= 0 && progress.total >= progress.expected
    }
    /// What its `metalink` document said, once read this run (memory only: after a
    /// restart the document is fetched again before the file goes on).
    var metalink: ResolvedMetalink? {
        get { extrasBox?.metalink }
        set { if newValue != nil || extrasBox != nil { extras.metalink = newValue } }
    }
    /// A `metalink` download whose document is not read yet: its attempt fetches the
    /// document, not the file.
    var isAwaitingMetalink: Bool { options.metalink != nil && !isUpload && metalink == nil }
    /// The SHA-256 the file must have: the `sha256` option's, else the Metalink document's.
    var expectedSHA256: String? { options.sha256?.lowercased() ?? metalink?.document.sha256 }
    /// The `If-Range` validator (`RangeValidator.strong`).
    var validator: String? { RangeValidator.strong(etag: etag, lastModified: lastModified) }

    /// Whether `data` came from this download (a `Pause` of it) and its part file still
    /// holds bytes under the same validators.
    func madeResumeData(_ data: ResumeData) -> Bool {
        snapshot.created == data.created && partPath == data.partPath && etag == data.etag && lastModified == data.lastModified
    }

    /// Its `Error` property: the last failure (nil: none). Set when it fails for good,
    /// is cancelled or waits to try again; cleared when it completes or is resumed
    /// after failing.
    func showError(_ error: CoreError?) {
        snapshot.errorName = error?.name ?? ""
        snapshot.errorMessage = error?.message ?? ""
    }

    /// Until it is completed, cancelled or removed a transfer owns its final path and
    /// `.part` (a failed one may be resumed, but see `claimsNames`).
    var holdsClaim: Bool { state != .completed && state != .cancelled }

    /// Shows the life's state in the snapshot (the bus properties).
    func syncState() {
        snapshot.state = life.state
        snapshot.waitingReason = life.waitingReason?.rawValue ?? ""
        // A time it waits for (not the network's `.max`).
        snapshot.nextAttempt = life.state == .waiting && life.notBefore != .max ? life.notBefore : 0
        // A completed transfer has no last failure to show (a retry's is cleared).
        if life.state == .completed { showError(nil) }
        if life.state != .running {
            snapshot.rate = 0
            snapshot.expectedEnd = 0
        }
    }

    /// The record as the store keeps it.
    var stored: StoredTransfer {
        var s = snapshot
        s.rate = 0
        s.expectedEnd = 0
        // Not stored: the next try's time comes from `notBefore` again, the reason for one
        // connection from the next attempt.
        s.nextAttempt = 0
        s.singleConnectionReason = ""
        s.connectionLimitReason = ""
        return StoredTransfer(snapshot: s, options: options, directory: directory, serverMayName: serverMayName,
                              partPath: enginePartPath ?? partPath, etag: etag, lastModified: lastModified,
                              notBefore: notBefore, retriesUsed: retriesUsed, resourceStarted: resourceStarted,
                              finishingPath: finishingPath, upload: upload, segments: segments,
                              partIsPrefix: partIsPrefix, prefixLimit: prefixLimit, durablePart: durablePart,
                              pausedByClientExit: pausedByClientExit)
    }

    /// Rebuilds a stored transfer as it was (the caller decides what a restart changes).
    convenience init(stored: StoredTransfer) {
        let host = (try? RequestURL.validate(stored.snapshot.url))?.host ?? ""
        let life = TransferLife(restoring: stored.snapshot.state, waitingReason: stored.snapshot.waitingReason,
                                notBefore: stored.notBefore)
        self.init(snapshot: stored.snapshot, life: life, options: stored.options, host: host, directory: stored.directory,
                  serverMayName: stored.serverMayName)
        etag = stored.etag
        lastModified = stored.lastModified
        retriesUsed = stored.retriesUsed
        resourceStarted = stored.resourceStarted
        finishingPath = stored.finishingPath
        upload = stored.upload
        segments = stored.segments
        partIsPrefix = stored.partIsPrefix
        prefixLimit = stored.prefixLimit
        durablePart = stored.durablePart
        pausedByClientExit = stored.pausedByClientExit
        // Kept only when it differs from the usual `.part` path (one string less each).
        if stored.partPath != partPath { enginePartPath = stored.partPath }
        persistedDigest = stored.hashValue
    }

    /// The snapshot without the fields that change without a transferChanged.
    static func signalled(_ s: TransferSnapshot) -> TransferSnapshot {
        var s = s
        s.bytesTransferred = 0; s.rate = 0; s.expectedEnd = 0
        return s
    }

    /// The digest `publishedDigest` compares.
    var signalledDigest: Int { Self.signalled(snapshot).hashValue }

    /// Marks the current snapshot as announced.
    func markPublished() { publishedDigest = signalledDigest }
}

/// The rarely needed part of a `TransferRecord` (see `extrasBox`).
final class TransferExtras {
    var enginePartPath: String?
    var attemptOffset: Int64 = 0
    var rate = RateEstimator()
    var lastProgress: (total: Int64, expected: Int64)?
    var appliedSpeedLimit: UInt64 = 0
    var retryAfter: Double?
    var failedResponseStatus: Int?
    var finishingPath: String?
    var destinationFD: DestinationDescriptor?
    var delivery: DescriptorDelivery?
    var fetchedCopy: CopyCancellation?
    var upload: UploadSpec?
    var failureCountedIn: (manager: UInt64, session: UInt64)?
    var runFromFailure = false
    var uploadSource: EngineUpload?
    var segments: SegmentMap?
    var partIsPrefix = false
    var prefixLimit: Int64?
    var durablePart: DurablePart?
    var onSharedConnection = false
    var postAccepted = false
    var postCutByRestart = false
    var sharedConnectionLosses = 0
    var signInWaits = 0
    var attemptBehindPortal = false
    var pausedByClientExit = false
    var metalink: ResolvedMetalink?
}
