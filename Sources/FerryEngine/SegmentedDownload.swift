import CCurl
import Crypto
import FerryCore
import Foundation

/// A download over up to `connections` range requests at once into one part file
/// (`pwrite` at each range's offset), validated: every range request carries
/// `If-Range`, and every 206 must match the range asked for, the length and the
/// validator. An answer that does not match makes the whole file start over from 0
/// on one connection within the attempt: never a file stitched from two versions.
///
/// A fresh download starts with one plain request; once its answer shows a length,
/// `Accept-Ranges: bytes` and a strong validator, the rest of the file is split among
/// more connections. A download continued from a `SegmentMap` requests only the
/// missing ranges. Engine thread only; callbacks change state and ask for `service()`
/// for anything that adds or removes handles.
final class SegmentedDownload: EngineAttempt {
    static let maximumConnections = 16
    /// No range is split below this.
    static let minimumRange: Int64 = 1 << 20
    /// Answers that say "not now" to a range request (busy, too many requests, took too
    /// long): its range goes back to the pool; any other refusal is `rangesRefused`.
    static let busyStatuses: Set<Int> = [408, 429, 503]
    /// Connection failures in a row (without a byte in between) before the attempt fails.
    static let failuresAllowed = 3

    /// Its headers are dropped once a redirect leads to another origin.
    private(set) var request: EngineRequest
    let attempt: UInt64
    var id: TransferID { request.id }
    unowned let loop: EngineLoop
    let pacer: Pacer

    var file: PartFile?
    var connections: [RangeConnection] = []
    var maxConnections: Int
    /// The ranges on disk from connections that have ended (busy ones add their own);
    /// nil while the length is unknown and when the attempt runs on one connection.
    var done: SegmentMap?
    var total: Int64 = -1
    /// Sent as `If-Range` with every range request.
    var validator: String?
    /// Range requests go here (the first answer's URL, after redirects).
    var rangeURL: String
    /// One connection for the whole file: not allowed, or started over.
    var single = false
    var singleReason: String?
    var responded = false
    var unreportedBytes: Int64 = 0
    var progressPace = ProgressPace()
    var lastReportedMap: SegmentMap?
    private var failuresInARow = 0
    var pendingFailure: CoreError?
    var pendingRestart: String?
    /// A redirect to another origin, followed here (in a new first connection, without
    /// the caller's headers) rather than by curl, which would take them there.
    var pendingRedirect: (url: String, from: Int64)?
    private var redirectsFollowed = 0
    /// Where a first request goes: the URL, or where a redirect to another origin led
    /// (a start-over goes there too, as the headers no longer go to the first origin).
    private var firstURL: String
    var restarts = 0
    /// The attempt began with an empty part file (neither a range map nor an offset).
    var beganFresh = false
    /// Without a map: the prefix on disk that the last connection to leave kept (what an
    /// outcome reports once no connection is left to ask).
    var prefixKept: Int64 = 0
    var flushing = false
    var completed = false
    /// The whole file's SHA-256 as far as it is hashed (when asked for).
    var prefixHash: PrefixHash?
    /// Bumped when the file starts over (`restartHash`): a part-file sync of an older
    /// writing is void.
    var partEpoch = 0
    /// Starts disk write-out while the download goes on, so the final fdatasync is short.
    var writeback: PartFileWriteback?
    /// The file's blocks reserved once its length is known (`DiskSpaceGuard.reserve`):
    /// a disk without room fails at once, and the writes then fill reserved blocks
    /// instead of allocating as they go (on ext4 about half the kernel's work per byte).
    var space = DiskSpaceGuard()
    private var writtenSinceWriteback: Int64 = 0

    /// (Mirrors) Where range requests go, and which were dropped.
    var sources: DownloadSources
    /// (Pieces) Every piece is checked as it completes; `done` then holds verified
    /// pieces only, and `pending` the pieces being checked.
    let pieces: PieceList?
    enum PieceState: UInt8 { case missing, checking, verified }
    var pieceStates: [PieceState] = []
    var pending: SegmentMap?
    var piecesChecking = 0
    /// Pieces fetched whole again after failing their check.
    var piecesRefetched = 0
    /// The source the first request goes to (`firstURL`): the URL, else a mirror once
    /// the sources before it refused the first request or could not be reached.
    private var firstSource = 0
    /// The first request failed at a source that was dropped: it goes to this one next.
    var pendingFirstSource: Int?

    init(request: EngineRequest, attempt: UInt64, loop: EngineLoop) {
        self.request = request
        self.attempt = attempt
        self.loop = loop
        self.pacer = Pacer(limit: request.speedLimit)
        self.maxConnections = min(max(request.connections, 1), Self.maximumConnections)
        self.rangeURL = request.url
        self.firstURL = request.url
        if request.computeSHA256 { prefixHash = PrefixHash() }
        self.pieces = request.pieces
        self.sources = DownloadSources(url: request.url, mirrors: request.mirrors)
    }

    deinit {
        for connection in connections { connection.release(from: loop) }
    }

    // MARK: - Start

    /// Starts with the part file a file job opened (`openPart`).
    func begin(with opened: PartFile, plan: Plan) {
        file = opened
        validator = plan.keepsValidator ? request.ifRange : nil
        if opened.isRegular { writeback = PartFileWriteback(fd: opened.fd, from: 0) }
        if let map = plan.map {
            done = map
            total = map.total
            if pieces != nil { return recheckPieces(of: map) }
            if map.isComplete { return alreadyComplete() }
            return service()
        }
        beganFresh = plan.isFresh
        startFirst(from: plan.from)
    }

    /// The first request of a fresh download: the whole file (or the rest after `from`).
    private func startFirst(from: Int64) {
        if let pieces, from == 0, !single {
            // Whole pieces from the start, and no more: the length comes with the answer,
            // and the server is not asked for bytes another connection will fetch.
            let share = Int64((pieces.count + maxConnections - 1) / maxConnections) * pieces.length
            let end = min(share, pieceChunk(pieces), pieces.maximumTotal)
            let connection = RangeConnection(download: self, start: 0, end: end, requestedEnd: end,
                                             sentIfRange: false, isFirst: true)
            connection.source = firstSource
            return launch(connection, url: firstURL)
        }
        let connection = RangeConnection(download: self, start: from, end: Int64.max, requestedEnd: nil,
                                         sentIfRange: from > 0 && validator != nil && firstSource == 0, isFirst: true)
        connection.source = firstSource
        launch(connection, url: firstURL)
    }

    /// (Pieces) The longest range one request asks for: whole pieces, about 4 MiB.
    private func pieceChunk(_ pieces: PieceList) -> Int64 {
        max(pieces.length, (4 << 20) / pieces.length * pieces.length)
    }

    private func launch(_ connection: RangeConnection, url: String) {
        let perConnection = pacer.limit > 0 ? Int(clamping: pacer.limit / 4 / UInt64(maxConnections)) : CurlTransfer.bufferSize
        var request = self.request
        if !sources[connection.source].sendsHeaders { request.headers = [] }
        let rc = connection.makeHandle(request: request, url: url, validator: connection.source == 0 ? validator : nil,
                                       receiveBuffer: perConnection, cookies: loop.cookies,
                                       separateConnection: maxConnections > 1)
        connection.lastDataAt = monotonicNanoseconds()
        connections.append(connection)
        guard rc == CURLE_OK, let easy = connection.easy else {
            let why = String(cString: curl_easy_strerror(rc))
            pendingFailure = .network("Could not set up the download: \(why)")
            return loop.requestService(self)
        }
        let added = loop.add(easy, owner: self)
        if added != CURLM_OK {
            pendingFailure = .network("Could not start the download: \(String(cString: curl_multi_strerror(added)))")
            loop.requestService(self)
        }
        if !progressPace.started { progressPace.start(at: monotonicNanoseconds()) }
    }

    // MARK: - Body (the hot path)

    @inline(__always)
    func write(_ connection: RangeConnection, _ data: UnsafeRawPointer, _ count: Int) -> Int {
        guard connection.accepted, !connection.cancelled, connection.failure == nil, let file else { return 0 }
        let room = connection.end - connection.received
        if room <= 0 {
            connection.reachedEnd = true
            return 0
        }
        let now = monotonicNanoseconds()
        let n = Int(min(Int64(count), room))
        if !pacer.admit(n, now: now) {
            connection.isThrottled = true
            loop.throttled(connection)
            return Int(CURL_WRITEFUNC_PAUSE)
        }
        if let error = connection.take(data, n, into: file) {
            fail(.disk(error.message), connection)
            return 0
        }
        unreportedBytes += Int64(n)
        writtenSinceWriteback += Int64(n)
        if writtenSinceWriteback >= PartFileWriteback.step, let writeback {
            writtenSinceWriteback = 0
            writeback.requestAll()
        }
        failuresInARow = 0
        if progressPace.isDue(at: now) { reportProgress() }
        if connection.received >= connection.end, connection.end != connection.requestedEnd || n < count {
            // Its range was split (or the answer runs on): this connection is done.
            connection.reachedEnd = true
            return 0
        }
        return count
    }

    // MARK: - Connections ending

    func handleDone(_ easy: UnsafeMutableRawPointer, code: CURLcode) {
        guard let index = connections.firstIndex(where: { $0.easy == easy }) else { return }
        let connection = connections[index]
        writeHeld(connection) // its position is then where its bytes on disk end
        let finishedRange = connection.reachedEnd
            || (code == CURLE_OK && connection.accepted && connection.failure == nil
                && (connection.position == connection.end || (connection.end == Int64.max && single)))
        var error: CoreError?
        if !finishedRange && !connection.cancelled && !connection.refused {
            if let failure = connection.failure {
                error = failure
            } else if code != CURLE_OK {
                let context = HandleFailureContext(
                    easy: easy, request: request, url: rangeURL, errorBuffer: connection.errorBuffer,
                    expectedTotal: total, bytesOnDisk: connection.position, lastLocation: connection.reader.lastLocation,
                    writtenPath: request.partPath)
                error = CurlFailure.error(for: code, in: context)
            } else if !connection.accepted {
                error = .network("\(EasyHandleSetup.hostDescription(rangeURL)) ended the response before its headers were complete")
            } else {
                error = .network("\(EasyHandleSetup.hostDescription(rangeURL)) sent \(connection.position - connection.start) of \(connection.end - connection.start) bytes of a range")
            }
        }
        connectionEnded(at: index, finishedRange: finishedRange, error: error)
    }

    /// Whichever connection will first have brought nothing for `request-timeout`
    /// (curl's own low-speed check averages over 5 s and fired up to 3× late).
    var stallDue: UInt64? {
        guard !completed, !flushing else { return nil }
        let timeout = UInt64(CurlTransfer.stallSeconds(request) * 1_000_000_000)
        return connections.lazy.compactMap { $0.stallDue(after: timeout) }.min()
    }

    /// The silent connections end as failed with a timeout, as curl's check would end
    /// them: their ranges go back to be fetched again, or the download fails.
    func stalled(now: UInt64) {
        let timeout = UInt64(CurlTransfer.stallSeconds(request) * 1_000_000_000)
        let silent = connections.filter { ($0.stallDue(after: timeout) ?? .max) <= now }
        for connection in silent {
            guard !completed, let index = connections.firstIndex(where: { $0 === connection }) else { return }
            connectionEnded(at: index, finishedRange: false,
                            error: CurlFailure.stalled(host: EasyHandleSetup.hostDescription(rangeURL), request: request))
        }
    }

    /// A connection is over: what it fetched counts, it leaves the multi, and its error
    /// (if any) fails the download or goes against the failures allowed in a row.
    private func connectionEnded(at index: Int, finishedRange: Bool, error: CoreError?) {
        let connection = connections[index]
        writeHeld(connection)
        handPieces(of: connection)
        if single, connection.accepted, finishedRange, connection.end == Int64.max {
            total = connection.position // the length was unknown: the connection's end is the file's
        }
        // With pieces, only checked pieces go in the map (`pieceChecked`).
        if !connection.cancelled, pieces == nil { done?.insert(connection.start..<connection.position) }
        if done == nil, connections.count == 1 { prefixKept = Self.prefixOnDisk(connection) }
        connection.release(from: loop)
        connections.remove(at: index)
        if let error, connection.isFirst, !connection.accepted, connection.failure == nil,
           let next = nextFirstSource(after: connection, because: error.message) {
            pendingFirstSource = next // another source is asked for the file instead
        } else if let error {
            if !single, done != nil, connection.failure == nil, otherSourceAlive(than: connection.source) {
                // A source that cuts its answers short or stalls is dropped; others go on.
                dropSource(connection.source, because: error.message)
            } else if single || done == nil || connection.failure != nil {
                // One connection for the whole file, or a failure no other connection can mend.
                if pendingFailure == nil { pendingFailure = error }
            } else {
                failuresInARow += 1
                if failuresInARow >= Self.failuresAllowed { pendingFailure = error }
            }
        }
        service()
    }

    /// Adds and removes handles as callbacks asked; finishes the attempt when it is over.
    func service() {
        guard !completed, !flushing else { return }
        for connection in connections where connection.cancelled { connection.release(from: loop) }
        connections.removeAll { $0.cancelled }
        if let error = pendingFailure {
            return finish(.failed(error, bytesOnDisk: bytesForOutcome()))
        }
        if let next = pendingFirstSource, connections.isEmpty {
            pendingFirstSource = nil
            firstSource = next
            firstURL = sources[next].url
            return startFirst(from: 0)
        }
        if let redirect = pendingRedirect {
            pendingRedirect = nil
            redirectsFollowed += 1
            guard redirectsFollowed <= 10 else {
                let host = URLComponents(string: request.url)?.host ?? "the server"
                return finish(.failed(.tooManyRedirects("More than 10 redirects, starting at \(host)"), bytesOnDisk: bytesForOutcome()))
            }
            loop.log(id, "redirect to another origin, followed without the caller's headers")
            request.headers = []
            firstURL = redirect.url
            return startFirst(from: redirect.from)
        }
        if let reason = pendingRestart {
            pendingRestart = nil
            loop.log(id, "starting over on one connection: \(reason)")
            for connection in connections { connection.release(from: loop) }
            connections.removeAll()
            single = true
            singleReason = reason
            done = nil
            validator = nil
            unreportedBytes = 0
            if let error = file?.truncate(to: 0) { return finish(.failed(.disk(error.message), bytesOnDisk: 0)) }
            restartHash()
            pieceStates = []; pending = nil; piecesChecking = 0
            return startFirst(from: 0)
        }
        if let map = done, !single {
            var planner = RangePlanner(minimum: Self.minimumRange)
            var base = map
            if let pieces {
                // Pieces being checked count as fetched; ranges are whole pieces.
                planner.alignment = pieces.length
                planner.maximum = pieceChunk(pieces)
                for range in pending?.done ?? [] { base.insert(range) }
            }
            while connections.count < maxConnections, connections.allSatisfy({ $0.accepted || !$0.isFirst }) {
                let claims = connections.map { RangePlanner.Claim(start: $0.start, position: $0.received, end: $0.end) }
                guard let next = planner.next(done: base, claims: claims, idle: maxConnections - connections.count) else { break }
                guard let source = pickSource() else {
                    pendingFailure = everySourceFailed()
                    return service()
                }
                let range: Range<Int64>
                switch next {
                case .unclaimed(let hole):
                    range = hole
                case .steal(let victim, let at):
                    range = at..<min(connections[victim].end, map.total)
                    connections[victim].end = at
                }
                let connection = RangeConnection(download: self, start: range.lowerBound, end: range.upperBound,
                                                 requestedEnd: range.upperBound, sentIfRange: source == 0, isFirst: false)
                connection.source = source
                launch(connection, url: source == 0 ? rangeURL : sources[source].url)
                if pendingFailure != nil { return service() }
            }
            if connections.isEmpty, piecesChecking > 0 { return } // the checks decide what is left
            if connections.isEmpty, let current = currentMap(), current.isComplete {
                return responded ? complete() : alreadyComplete()
            }
            if connections.isEmpty {
                return finish(.failed(.network("No connection is left to fetch the rest of the file"), bytesOnDisk: bytesForOutcome()))
            }
        } else if connections.isEmpty {
            if single, total >= 0 {
                if pieces != nil {
                    if piecesChecking > 0 { return }
                    if let bad = pieceStates.firstIndex(where: { $0 != .verified }) {
                        return finish(.failed(.checksumMismatch("Piece \(bad) of \(sources[0].shown) could not be verified"), bytesOnDisk: bytesForOutcome()))
                    }
                }
                return complete()
            }
        }
    }
}
