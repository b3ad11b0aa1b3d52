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
    private static let busyStatuses: Set<Int> = [408, 429, 503]
    /// Connection failures in a row (without a byte in between) before the attempt fails.
    static let failuresAllowed = 3

    /// Its headers are dropped once a redirect leads to another origin.
    private(set) var request: EngineRequest
    let attempt: UInt64
    var id: TransferID { request.id }
    private unowned let loop: EngineLoop
    let pacer: Pacer

    private var file: PartFile?
    private var connections: [RangeConnection] = []
    private var maxConnections: Int
    /// The ranges on disk from connections that have ended (busy ones add their own);
    /// nil while the length is unknown and when the attempt runs on one connection.
    private var done: SegmentMap?
    private var total: Int64 = -1
    /// Sent as `If-Range` with every range request.
    private var validator: String?
    /// Range requests go here (the first answer's URL, after redirects).
    private var rangeURL: String
    /// One connection for the whole file: not allowed, or started over.
    private var single = false
    private var singleReason: String?
    private var responded = false
    private var unreportedBytes: Int64 = 0
    private var nextProgressAt: UInt64 = 0
    private var lastReportedMap: SegmentMap?
    private var failuresInARow = 0
    private var pendingFailure: FerryError?
    private var pendingRestart: String?
    /// A redirect to another origin, followed here (in a new first connection, without
    /// the caller's headers) rather than by curl, which would take them there.
    private var pendingRedirect: (url: String, from: Int64)?
    private var redirectsFollowed = 0
    /// Where a first request goes: the URL, or where a redirect to another origin led
    /// (a start-over goes there too, as the headers no longer go to the first origin).
    private var firstURL: String
    private var restarts = 0
    /// The attempt began with an empty part file (neither a range map nor an offset).
    private var beganFresh = false
    /// Without a map: the prefix on disk that the last connection to leave kept (what an
    /// outcome reports once no connection is left to ask).
    private var prefixKept: Int64 = 0
    private var flushing = false
    private var completed = false
    /// SHA-256 of the file's first `hashedUpTo` bytes (when asked for), advanced in the
    /// background as the contiguous prefix grows, so little is left at the end.
    private var hasher: SHA256?
    private var hashedUpTo: Int64 = 0
    private var hashing = false
    /// Bumped when the file starts over: an older hash job's result is void.
    private var hashEpoch = 0
    /// Bumped with it, hash or not: a part-file sync of an older writing is void.
    private var partEpoch = 0
    private var completeAfterHash = false
    /// Prefix bytes worth a background hash job.
    private static let hashStep: Int64 = 8 << 20
    /// Starts disk write-out while the download goes on, so the final fdatasync is short.
    private var writeback: PartFileWriteback?
    /// The file's blocks reserved once its length is known (`DiskSpaceGuard.reserve`):
    /// a disk without room fails at once, and the writes then fill reserved blocks
    /// instead of allocating as they go (on ext4 about half the kernel's work per byte).
    private var space = DiskSpaceGuard()
    private var writtenSinceWriteback: Int64 = 0

    /// (Mirrors) One place range requests go: the URL (index 0, after redirects
    /// `rangeURL`) or a mirror.
    private struct Source {
        var url: String
        /// Shown in the log and in errors: without credentials.
        var shown: String
        /// The caller's headers go to the URL's origin only.
        var sendsHeaders: Bool
        /// Why it was dropped for this attempt; nil while it is used.
        var dropped: String?
        /// Bad pieces it sent.
        var badPieces = 0
    }
    private var sources: [Source]
    /// (Pieces) Every piece is checked as it completes; `done` then holds verified
    /// pieces only, and `pending` the pieces being checked.
    private let pieces: PieceList?
    private enum PieceState: UInt8 { case missing, checking, verified }
    private var pieceStates: [PieceState] = []
    private var pending: SegmentMap?
    private var piecesChecking = 0
    /// Pieces fetched whole again after failing their check.
    private var piecesRefetched = 0
    /// The source the first request goes to (`firstURL`): the URL, else a mirror once
    /// the sources before it refused the first request or could not be reached.
    private var firstSource = 0
    /// The first request failed at a source that was dropped: it goes to this one next.
    private var pendingFirstSource: Int?

    init(request: EngineRequest, attempt: UInt64, loop: EngineLoop) {
        self.request = request
        self.attempt = attempt
        self.loop = loop
        self.pacer = Pacer(limit: request.speedLimit)
        self.maxConnections = min(max(request.connections, 1), Self.maximumConnections)
        self.rangeURL = request.url
        self.firstURL = request.url
        if request.computeSHA256 { hasher = SHA256() }
        self.pieces = request.pieces
        self.sources = ([request.url] + request.mirrors).enumerated().map { i, url in
            Source(url: url, shown: Redaction.urlWithoutCredentials(url),
                   sendsHeaders: i == 0 || CrossOriginRedirect.target(of: url, from: request.url) == nil)
        }
    }

    deinit {
        for connection in connections { connection.release(from: loop) }
    }

    // MARK: - Start

    /// Where an attempt starts in its part file, decided from the request and the
    /// file's size when opened.
    struct Plan {
        /// Continue these ranges (their validator is the request's `ifRange`).
        var map: SegmentMap?
        /// Else the first request starts here; 0 cuts the file to nothing first.
        var from: Int64 = 0
        /// The request's validator still holds for what is on disk.
        var keepsValidator = true

        init(request: EngineRequest, sizeOnDisk: Int64) {
            let validator = request.ifRange
            // Continue from a map only with its validator and a part file that holds its ranges.
            if let map = request.segments, validator != nil, sizeOnDisk >= (map.done.last?.upperBound ?? 0),
               request.pieces?.fits(total: map.total) ?? true {
                self.map = map
                return
            }
            if request.pieces != nil {
                // Only checked pieces are kept (as a map): a prefix without one starts over.
                keepsValidator = request.segments == nil && request.offset == 0
                return
            }
            if request.offset > 0, validator != nil, sizeOnDisk >= request.offset {
                from = request.offset
            } else if request.segments != nil || request.offset > 0 {
                // No validator, or a part file shorter than claimed: nothing on disk can be trusted.
                keepsValidator = false
            }
        }

        /// The file was cut to nothing (or is new) for this attempt.
        var isFresh: Bool { map == nil && from == 0 }
        /// What the file holds for the transfer if the attempt stops before any request.
        var bytesKept: Int64 { map?.contiguousPrefix ?? from }
    }

    /// What the file job that opens a segmented attempt's part file found.
    enum OpenedPart {
        case opened(PartFile, Plan)
        case failed(PartFileError)
        /// Not a regular file (a FIFO, a device): opened for one connection instead.
        case oneConnection(Result<FerryEngine.OpenedPart, FerryEngine.OpenedPart.Failure>)
    }

    /// Opens the part file and, for a fresh start, cuts it to nothing. Runs on a file
    /// job: on a slow or stalled file system (ext4 looking for a free inode, a hung
    /// network or FUSE mount) only this attempt waits.
    static func openPart(for request: EngineRequest) -> OpenedPart {
        if PartFile.existsAsOtherThanRegularFile(request.partPath) {
            return .oneConnection(FerryEngine.OpenedPart.open(for: request))
        }
        let file: PartFile
        switch PartFile.open(request.partPath, within: request.confinedTo) {
        case .success(let opened): file = opened
        case .failure(let error): return .failed(error)
        }
        let plan = Plan(request: request, sizeOnDisk: file.initialSize)
        if plan.isFresh, let error = file.truncate(to: 0) {
            file.close()
            return .failed(error)
        }
        return .opened(file, plan)
    }

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
        if nextProgressAt == 0 { nextProgressAt = monotonicNanoseconds() + CurlTransfer.progressInterval }
    }

    // MARK: - Answers (in libcurl's header callback: no handle changes here)

    /// Judges a connection's final response head. Returns false to end the connection.
    func accept(_ connection: RangeConnection, _ head: ResponseHead) -> Bool {
        let status = head.status
        if !connection.isFirst, sources.count > 1, !(Self.busyStatuses.contains(status) && connections.count > 1),
           let problem = sourceAnswerProblem(connection, head), otherSourceAlive(than: connection.source) {
            // A source that answers wrongly is dropped; its range goes back to the pool.
            dropSource(connection.source, because: problem)
            connection.refused = true
            loop.requestService(self)
            return false
        }
        if connection.isFirst, status >= 300, !(status == 416 && connection.start > 0),
           let next = nextFirstSource(after: connection, because: "it answered \(head.statusDescription)") {
            connection.refused = true
            pendingFirstSource = next
            loop.requestService(self)
            return false
        }
        if status >= 300 && !(status == 416 && connection.isFirst && connection.start > 0) {
            if !connection.isFirst && connection.requestedEnd != nil && Self.busyStatuses.contains(status) && connections.count > 1 {
                // Busy: fewer connections, and its range goes back to the pool.
                connection.refused = true
                maxConnections = max(1, connections.count - 1)
                return false
            }
            if !connection.isFirst && connection.requestedEnd != nil && status == 416 {
                return restart(because: "the file changed on the server (a range it had is gone)", connection)
            }
            if !connection.isFirst, connection.requestedEnd != nil, !Self.busyStatuses.contains(status),
               let handled = rangesRefused(connection, head) {
                return handled
            }
            emitResponse(head, connection: connection, startOffset: connection.start)
            if status >= 400 {
                fail(.http(status: status, head.statusDescription), connection)
            } else {
                fail(.network("The server answered \(head.statusDescription) instead of sending the file"), connection)
            }
            return false
        }
        if connection.isFirst { return acceptFirst(connection, head) }
        if status == 206 { return acceptRange(connection, head) }
        return adoptWholeFile(connection, head)
    }

    /// A range request refused (403, 500…) by a server that sent the file to the first
    /// request: one connection goes on, as it would with `connections` 1. The first
    /// connection, whose answer is the rest of the file, takes all of it when it is still
    /// under way; when it has ended, a download begun from nothing starts over on one
    /// connection (what is lost is the first connection's share, just fetched). nil: a
    /// refusal no connection of this attempt can make up for (the attempt fails with it).
    private func rangesRefused(_ connection: RangeConnection, _ head: ResponseHead) -> Bool? {
        let reason = "the server refused a range request (\(head.statusDescription))"
        if single { return false } // one connection goes on already: this one was cut
        if total >= 0, let first = connections.first(where: {
            $0.isFirst && $0.accepted && !$0.cancelled && !$0.reachedEnd && $0.failure == nil
        }) {
            loop.log(id, "one connection from here: \(reason)")
            maxConnections = 1
            first.end = total
            cancelAll(except: first)
            // From here the download is one connection's, as with a server that accepts
            // no ranges: no map (the other connections' bytes no longer count), and
            // nothing to resume (a range request would be refused again).
            single = true
            singleReason = reason
            done = nil
            var word = EngineResponse(status: first.start > 0 ? 206 : 200, expectedTotal: total, startOffset: first.position,
                                      effectiveURL: rangeURL)
            word.connections = 1
            word.singleConnectionReason = reason
            word.rangesRefused = true
            loop.emit(.response(id, word))
            return false
        }
        if beganFresh { return restart(because: reason, connection) }
        return nil
    }

    private func acceptFirst(_ connection: RangeConnection, _ head: ResponseHead) -> Bool {
        guard let file else { return false }
        if head.status == 416 {
            guard head.showsCompleteFile(offset: connection.start, validator: validator, knownTotal: request.knownTotal) else {
                // Past the end of the file the server has now: it changed, or what
                // arrived before was cut short.
                return restart(because: "the file changed on the server (a range from byte \(connection.start) got 416 and \(head.contentRange ?? "no Content-Range"))", connection)
            }
            // The part file is already complete.
            total = connection.start
            done = SegmentMap(total: total, done: [0..<total])
            connection.end = total
            connection.reachedEnd = true
            if let error = file.truncate(to: total) { fail(.disk(error.message), connection); return false }
            emitResponse(head, connection: connection, startOffset: total, acceptsRanges: true)
            return false
        }
        if head.status == 206 {
            guard connection.start > 0 || connection.requestedEnd != nil, let text = head.contentRange,
                  let range = ContentRange(text), range.first == connection.start, validatorMatches(head),
                  connection.requestedEnd.map({ end in range.last.map { $0 + 1 == min(end, range.total ?? -1) } ?? false }) ?? true else {
                return restart(because: "the server sent a range that does not match the one asked for", connection)
            }
            total = range.total ?? -1
            if let error = file.truncate(to: connection.start) { fail(.disk(error.message), connection); return false }
        } else {
            if connection.start > 0 {
                // Range ignored, or the validator no longer matches: the whole file comes.
                connection.restart(at: 0)
                if let error = file.truncate(to: 0) { fail(.disk(error.message), connection); return false }
                restartHash()
            }
            total = head.contentLength ?? -1
        }
        if let pieces {
            guard pieces.fits(total: total) else {
                fail(.checksumMismatch(total < 0 ? "\(EasyHandleSetup.hostDescription(request.url)) sent no length, which pieces need"
                    : "The file is \(total) bytes; its \(pieces.count) pieces of \(pieces.length) bytes describe \(Int64(pieces.count - 1) * pieces.length + 1) to \(pieces.maximumTotal) bytes"), connection)
                return false
            }
            preparePieces()
        }
        if total > 0, let error = space.reserve(file, from: connection.start, to: total) {
            fail(.disk(error.message), connection)
            return false
        }
        let strong = head.strongValidator
        var reason: String?
        if single {
            reason = singleReason
        } else if total < 0 {
            reason = "the server did not send the file's length"
        } else if !(head.acceptsByteRanges || head.status == 206) {
            reason = "the server does not accept range requests (no Accept-Ranges: bytes)"
        } else if strong == nil && pieces == nil {
            reason = "the server sent no strong validator (ETag or Last-Modified) to check ranges against"
        }
        rangeURL = EasyHandleSetup.effectiveURL(connection.easy, fallback: request.url)
        if reason == nil {
            validator = strong
            var map = SegmentMap(total: total)
            map.insert(0..<connection.start)
            done = map
            connection.end = total
            if let requestedEnd = connection.requestedEnd {
                connection.end = min(requestedEnd, total) // pieces: the range it asked for
            } else {
                let left = total - connection.start
                let parts = max(1, min(Int64(maxConnections), left / Self.minimumRange))
                if parts > 1 { connection.end = connection.start + left / parts }
            }
            singleReason = nil
            loop.requestService(self) // the other connections start outside this callback
        } else {
            single = true
            singleReason = maxConnections > 1 || request.segments != nil ? reason : nil
            done = nil
            connection.end = total >= 0 ? total : Int64.max
        }
        connection.accepted = true
        emitResponse(head, connection: connection, startOffset: connection.start,
                     acceptsRanges: head.acceptsByteRanges || head.status == 206)
        return true
    }

    private func acceptRange(_ connection: RangeConnection, _ head: ResponseHead) -> Bool {
        guard let text = head.contentRange, let range = ContentRange(text), range.first == connection.start,
              let last = range.last, last + 1 == connection.requestedEnd, range.total == total else {
            return restart(because: "the server sent a range that does not match the one asked for (\(head.contentRange ?? "no Content-Range"))", connection)
        }
        guard connection.source != 0 || validatorMatches(head) else {
            return restart(because: "the file changed on the server (its validator is now \(head.etag ?? head.lastModified ?? "missing"))", connection)
        }
        connection.accepted = true
        if !responded {
            if connection.source == 0 {
                emitResponse(head, connection: connection, startOffset: keptBytes(), acceptsRanges: true)
            } else {
                // A mirror's validator is its own: the transfer keeps the URL's.
                emitKeptValidator(startOffset: keptBytes(), connections: maxConnections)
            }
        }
        return true
    }

    /// A 200 to a range request: the server ignored the range, or the file changed
    /// (If-Range did not match). The answer is the whole file: it becomes the only
    /// connection, from byte 0.
    private func adoptWholeFile(_ connection: RangeConnection, _ head: ResponseHead) -> Bool {
        guard let file else { return false }
        let changed = validator != nil && head.strongValidator != validator
        cancelAll(except: connection)
        if let error = file.truncate(to: 0) { fail(.disk(error.message), connection); return false }
        restartHash()
        single = true
        singleReason = changed ? "the file changed on the server; it started over on one connection"
            : "the server ignored a range request; it started over on one connection"
        done = nil
        total = head.contentLength ?? -1
        unreportedBytes = 0
        if let pieces {
            guard pieces.fits(total: total) else {
                fail(.checksumMismatch("The file is now \(total) bytes, which its pieces do not describe"), connection)
                return false
            }
            preparePieces()
        }
        connection.restart(at: 0)
        connection.end = total >= 0 ? total : Int64.max
        connection.accepted = true
        emitResponse(head, connection: connection, startOffset: 0, acceptsRanges: head.acceptsByteRanges)
        return true
    }

    /// A 206 that does not fit: everything stops and the file starts over on one
    /// connection (once: a server whose answers never fit fails the attempt).
    private func restart(because reason: String, _ connection: RangeConnection) -> Bool {
        guard restarts == 0 else {
            fail(.network("The server's answers do not fit together: \(reason)"), connection)
            return false
        }
        restarts += 1
        cancelAll(except: nil)
        pendingRestart = reason
        loop.requestService(self)
        return false
    }

    /// Called for each redirect curl is about to follow; false stops the connection.
    func redirected(_ connection: RangeConnection, to location: String) -> Bool {
        guard !request.headers.isEmpty, let easy = connection.easy,
              let next = CrossOriginRedirect.target(of: location, from: EasyHandleSetup.effectiveURL(easy, fallback: request.url))
        else { return true }
        guard connection.isFirst else {
            // A range request sent elsewhere: not followed with the caller's headers.
            fail(.network("A range request was redirected to another origin (\(EasyHandleSetup.hostDescription(next))); "
                + "the download's headers are not sent there"), connection)
            return false
        }
        connection.cancelled = true
        pendingRedirect = (next, connection.start)
        loop.requestService(self)
        return false
    }

    func refusedRedirect(_ connection: RangeConnection, scheme: String) -> Bool {
        fail(.network("Redirected to a \(scheme): URL; only http and https are allowed"), connection)
        return false
    }

    private func fail(_ error: FerryError, _ connection: RangeConnection) {
        connection.failure = error
        if pendingFailure == nil { pendingFailure = error }
        loop.requestService(self)
    }

    private func cancelAll(except keep: RangeConnection?) {
        for connection in connections where connection !== keep { connection.cancelled = true }
        loop.requestService(self)
    }

    private func validatorMatches(_ head: ResponseHead) -> Bool {
        validator.map(head.isSameFile(as:)) ?? true
    }

    private func emitResponse(_ head: ResponseHead, connection: RangeConnection, startOffset: Int64, acceptsRanges: Bool = false) {
        responded = true
        var response = EngineResponse(
            status: head.status, etag: head.etag, lastModified: head.usableLastModified, expectedTotal: total,
            startOffset: startOffset, contentDisposition: head.contentDisposition, acceptsRanges: acceptsRanges,
            effectiveURL: EasyHandleSetup.effectiveURL(connection.easy, fallback: request.url), retryAfter: head.retryAfter)
        response.connections = head.status >= 300 || single ? 1 : maxConnections
        response.singleConnectionReason = singleReason
        response.spaceReserved = head.status < 300 && space.covers(upTo: total)
        loop.emit(.response(id, response))
        if let map = currentMap(), head.status < 300 { reportMap(map) }
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
        if now >= nextProgressAt {
            nextProgressAt = now + CurlTransfer.progressInterval
            reportProgress()
        }
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
        var error: FerryError?
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
    private func connectionEnded(at index: Int, finishedRange: Bool, error: FerryError?) {
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

    // MARK: - The end

    private func alreadyComplete() {
        emitKeptValidator(startOffset: total, connections: 0)
        complete()
    }

    /// A response that keeps the validator the bytes on disk were fetched under (the
    /// file was complete on disk, or a mirror answered first: its validator is its own).
    private func emitKeptValidator(startOffset: Int64, connections: Int) {
        var response = EngineResponse(status: 206, etag: validator.flatMap { $0.hasPrefix("\"") ? $0 : nil },
                                      lastModified: validator.flatMap { $0.hasPrefix("\"") ? nil : $0 },
                                      expectedTotal: total, startOffset: startOffset, acceptsRanges: true, effectiveURL: request.url)
        response.connections = connections
        responded = true
        loop.emit(.response(id, response))
        if let map = currentMap() { reportMap(map) }
    }

    /// Every byte is on disk: trim, flush, hash (if asked) off the engine thread.
    private func complete() {
        guard let file else { return }
        if hashing {
            completeAfterHash = true // the running hash job's result is needed first
            return
        }
        flushing = true
        if let map = currentMap() { reportMap(map) }
        reportProgress()
        loop.emit(.connectionsFreed(id)) // the next transfer need not wait for the sync
        if file.isRegular, ftruncate(file.fd, off_t(total)) != 0 {
            let error = PartFileError(code: errno, action: "truncating", path: file.path)
            flushing = false
            return finish(.failed(.disk(error.message), bytesOnDisk: bytesForOutcome()))
        }
        let reader = hasher != nil ? file.openForReading() : -1
        let (fd, path, isRegular) = (file.handOver(), file.path, file.isRegular)
        let writebackFD = writeback?.handOver() ?? -1
        writeback = nil
        let (id, attempt, length, hasher, hashedUpTo) = (self.id, self.attempt, total, self.hasher, self.hashedUpTo)
        let loop = self.loop
        loop.fileJobs.async {
            PartFileWriteback.close(afterQueuedWriteback: writebackFD)
            var result: Result<String?, PartFileError>
            if let error = PartFile.flushAndClose(fd: fd, path: path, isRegular: isRegular) {
                if reader >= 0 { close(reader) }
                result = .failure(error)
            } else if let hasher {
                result = PartFile.hashRange(reader, path: path, from: hashedUpTo, to: length, continuing: hasher).map { hasher in
                    hasher.finalize().map { String(format: "%02x", $0) }.joined() as String?
                }
            } else {
                result = .success(nil)
            }
            loop.post(.fileJob(result), to: id, attempt: attempt)
        }
    }

    func jobDone(_ job: AttemptJob) {
        switch job {
        case .fileJob(let result): flushed(result)
        case .hashed(let epoch, let upTo, let result): prefixHashed(epoch: epoch, upTo: upTo, result)
        case .pieceChecked(let epoch, let index, let source, let matches):
            pieceChecked(epoch: epoch, index: index, source: source, matches: matches)
        case .synced(let part, let epoch): if !completed && epoch == partEpoch { loop.emit(.durable(id, part)) }
        default: break
        }
    }

    private func flushed(_ result: Result<String?, PartFileError>) {
        guard flushing else { return }
        flushing = false
        switch result {
        case .success(let digest): finish(.succeeded(bytesOnDisk: total, sha256: digest))
        case .failure(let error): finish(.failed(.disk(error.message), bytesOnDisk: total))
        }
    }

    func stop() {
        guard !flushing else { return }
        finish(.stopped(bytesOnDisk: bytesForOutcome()))
    }

    func setSpeedLimit(_ bytesPerSecond: UInt64) {
        pacer.setLimit(bytesPerSecond)
    }

    func abandon() {
        writeHeldBytes()
        completed = true
        for connection in connections { connection.release(from: loop) }
        connections.removeAll()
        file?.releaseReservation()
        file?.close()
    }

    /// Ends the attempt. The outcome is read once the connections' held bytes are
    /// written, so the bytes it counts are those on disk.
    private func finish(_ outcome: @autoclosure () -> EngineOutcome) {
        guard !completed else { return }
        writeHeldBytes()
        var outcome = outcome()
        if case .failed(let error, let bytes) = outcome { outcome = .failed(namingDroppedSources(error), bytesOnDisk: bytes) }
        // What busy connections wrote stays on disk: it belongs in the final map.
        if !single, pieces == nil {
            for connection in connections where !connection.cancelled { done?.insert(connection.start..<connection.position) }
        }
        for connection in connections { connection.release(from: loop) }
        connections.removeAll()
        completed = true
        file?.releaseReservation() // blocks reserved past the file's end go back
        file?.close()
        reportProgress(endingAt: outcome.bytesOnDisk)
        if let map = currentMap(), responded { reportMap(map, force: true) }
        loop.attemptEnded(self, outcome)
    }

    /// What an offset resume may keep: the contiguous prefix (see `EngineOutcome`).
    private func bytesForOutcome() -> Int64 {
        if let map = currentMap() { return map.contiguousPrefix }
        return connections.first.map(Self.prefixOnDisk) ?? prefixKept
    }

    /// The prefix on disk as a connection leaves it. A first connection not answered
    /// yet has cut nothing: the prefix it was to continue from is still there.
    private static func prefixOnDisk(_ connection: RangeConnection) -> Int64 {
        connection.accepted ? connection.position : connection.isFirst ? connection.start : 0
    }

    // MARK: - Mirrors

    /// What is wrong with a range connection's answer, for a download with mirrors
    /// (any source, the URL too): nil when it is the range asked for.
    private func sourceAnswerProblem(_ connection: RangeConnection, _ head: ResponseHead) -> String? {
        if head.status >= 300 { return "it answered \(head.statusDescription)" }
        if head.status != 206 { return "it sent the whole file instead of a range" }
        guard let text = head.contentRange, let range = ContentRange(text), range.first == connection.start,
              let last = range.last, last + 1 == connection.requestedEnd, range.total == total else {
            return "it sent a range that does not match the one asked for (\(head.contentRange ?? "no Content-Range"))"
        }
        if connection.source == 0, !validatorMatches(head) { return "its file changed (its validator is now \(head.etag ?? head.lastModified ?? "missing"))" }
        return nil
    }

    /// Where the first request goes after it failed at `connection`'s source (which is
    /// then dropped): nil when there is no other source, or when the request continued
    /// a prefix on disk (checked by the URL's validator only) without pieces.
    private func nextFirstSource(after connection: RangeConnection, because why: String) -> Int? {
        guard sources.count > 1, connection.start == 0 || pieces != nil, otherSourceAlive(than: connection.source) else { return nil }
        dropSource(connection.source, because: why)
        return pickSource()
    }

    /// A failure of a download with mirrors also names the sources dropped before it
    /// (and why), so that `Error` says what each did.
    private func namingDroppedSources(_ error: FerryError) -> FerryError {
        let dropped = sources.filter { $0.dropped != nil }
        guard sources.count > 1, !dropped.isEmpty, !error.message.hasPrefix("Every source") else { return error }
        let note = "; sources dropped before: " + dropped.map { "\($0.shown) (\($0.dropped ?? ""))" }.joined(separator: "; ")
        switch error {
        case .network(let m): return .network(m + note)
        case .timeout(let m): return .timeout(m + note)
        case .http(let status, let m): return .http(status: status, m + note)
        case .tls(let m): return .tls(m + note)
        case .tooManyRedirects(let m): return .tooManyRedirects(m + note)
        case .checksumMismatch(let m): return .checksumMismatch(m + note)
        default: return error
        }
    }

    private func otherSourceAlive(than index: Int) -> Bool {
        sources.indices.contains { $0 != index && sources[$0].dropped == nil }
    }

    /// No more requests go to source `index` in this attempt (connections under way
    /// finish their ranges: their pieces are checked all the same).
    private func dropSource(_ index: Int, because why: String) {
        guard sources.indices.contains(index), sources[index].dropped == nil else { return }
        sources[index].dropped = why
        loop.log(id, "source \(sources[index].shown) dropped: \(why)")
    }

    /// The source with the fewest connections under way (the URL first on a tie); nil
    /// when every one was dropped.
    private func pickSource() -> Int? {
        var best: (index: Int, busy: Int)?
        for (index, source) in sources.enumerated() where source.dropped == nil {
            let busy = connections.reduce(0) { $0 + ($1.source == index && !$1.cancelled ? 1 : 0) }
            if best == nil || busy < best!.busy { best = (index, busy) }
        }
        return best?.index
    }

    /// Every source was dropped: `ChecksumMismatch` when bad pieces were among the
    /// reasons, naming each source and why.
    private func everySourceFailed() -> FerryError {
        let list = sources.map { "\($0.shown) (\($0.dropped ?? "not used"))" }.joined(separator: "; ")
        if sources.contains(where: { $0.badPieces > 0 }) {
            return .checksumMismatch("Every source failed a piece: \(list)")
        }
        return .network("Every source failed: \(list)")
    }

    // MARK: - Pieces

    /// The bytes on disk this attempt continues from: with pieces, those verified and
    /// those being checked again.
    private func keptBytes() -> Int64 {
        (currentMap()?.bytesDone ?? 0) + (pending?.bytesDone ?? 0)
    }

    /// The file's length is known and fits the pieces: nothing is checked yet.
    private func preparePieces() {
        guard let pieces else { return }
        pieceStates = Array(repeating: .missing, count: pieces.count)
        pending = SegmentMap(total: total)
        piecesChecking = 0
    }

    /// A resumed attempt checks the pieces its map kept again before counting them
    /// (read from the disk, not fetched); those that fail are fetched.
    private func recheckPieces(of map: SegmentMap) {
        guard let pieces, let file else { return }
        preparePieces()
        done = SegmentMap(total: total)
        for range in map.done {
            for index in pieces.pieces(within: range, total: total) where pieceStates[index] == .missing {
                checkPiece(index, source: -1, file: file)
            }
        }
        loop.log(id, "checking \(piecesChecking) of \(pieces.count) pieces kept on disk")
        service()
    }

    /// Hands the whole pieces a connection has written since last time to be checked.
    private func handPieces(of connection: RangeConnection) {
        guard let pieces, total > 0, !pieceStates.isEmpty, connection.accepted, !connection.cancelled, let file else { return }
        let from = connection.piecesHandedUpTo ?? connection.start
        guard connection.position > from else { return }
        let indices = pieces.pieces(within: from..<connection.position, total: total)
        guard !indices.isEmpty else { return }
        connection.piecesHandedUpTo = pieces.range(of: indices.upperBound - 1, total: total).upperBound
        for index in indices where pieceStates[index] == .missing {
            checkPiece(index, source: connection.source, file: file)
        }
    }

    /// Hashes piece `index` from the part file on a file job (`pieceChecked` follows).
    private func checkPiece(_ index: Int, source: Int, file: PartFile) {
        guard let pieces else { return }
        let range = pieces.range(of: index, total: total)
        pieceStates[index] = .checking
        pending?.insert(range)
        piecesChecking += 1
        let expected = pieces.digests[index]
        let (id, attempt, epoch, path, loop) = (self.id, self.attempt, partEpoch, file.path, self.loop)
        let reader = file.openForReading()
        loop.fileJobs.async {
            let result = PartFile.hashRange(reader, path: path, from: range.lowerBound, to: range.upperBound, continuing: SHA256())
            let matches: Bool? = (try? result.get()).map { Array($0.finalize()) == expected }
            loop.post(.pieceChecked(epoch: epoch, index: index, source: source, matches: matches), to: id, attempt: attempt)
        }
    }

    /// A piece's check is back: a good piece joins the map, a bad one is fetched again
    /// (and its source dropped where another is left).
    private func pieceChecked(epoch: Int, index: Int, source: Int, matches: Bool?) {
        guard epoch == partEpoch, !completed, let pieces, pieceStates.indices.contains(index),
              pieceStates[index] == .checking else { return }
        piecesChecking -= 1
        let range = pieces.range(of: index, total: total)
        pending?.remove(range)
        switch matches {
        case true?:
            pieceStates[index] = .verified
            done?.insert(range)
            if let map = currentMap() { reportMap(map) }
        case false?:
            pieceStates[index] = .missing
            badPiece(index, from: source)
        case nil:
            pieceStates[index] = .missing // unreadable: fetched again
        }
        if !flushing { service() }
    }

    private func badPiece(_ index: Int, from source: Int) {
        guard sources.indices.contains(source) else {
            loop.log(id, "piece \(index) kept on disk failed its SHA-256; it is fetched again")
            return
        }
        piecesRefetched += 1
        sources[source].badPieces += 1
        let why = "piece \(index) failed its SHA-256"
        if single {
            pendingFailure = .checksumMismatch("Piece \(index) from \(sources[source].shown) failed its SHA-256, and the server sends only whole files: it cannot be fetched again alone")
            return
        }
        if otherSourceAlive(than: source) || sources[source].badPieces > 1 {
            dropSource(source, because: why)
        } else {
            loop.log(id, "\(why) (from \(sources[source].shown), the only source left); it is fetched again")
        }
        if pickSource() == nil { pendingFailure = everySourceFailed() }
    }

    // MARK: - Hashing the prefix

    private func restartHash() {
        partEpoch += 1 // the file starts over (or is hashed anew): syncs in flight are void
        guard hasher != nil else { return }
        hasher = SHA256()
        hashedUpTo = 0
        hashEpoch += 1
    }

    /// Hands the contiguous prefix not hashed yet to a background job, in steps.
    private func hashPrefixIfDue() {
        guard let hasher, !hashing, !flushing, let file else { return }
        let frontier: Int64
        if let map = currentMap() {
            frontier = map.contiguousPrefix
        } else if single, let first = connections.first, first.accepted {
            frontier = first.position
        } else {
            return
        }
        guard frontier - hashedUpTo >= Self.hashStep else { return }
        hashing = true
        let (id, attempt, epoch, path, from, loop) = (self.id, self.attempt, hashEpoch, file.path, hashedUpTo, self.loop)
        let reader = file.openForReading()
        loop.fileJobs.async {
            let result = PartFile.hashRange(reader, path: path, from: from, to: frontier, continuing: hasher)
            loop.post(.hashed(epoch: epoch, upTo: frontier, result), to: id, attempt: attempt)
        }
    }

    /// A background hash job is back (on the engine thread).
    private func prefixHashed(epoch: Int, upTo: Int64, _ result: Result<SHA256, PartFileError>) {
        hashing = false
        if epoch == hashEpoch, hasher != nil {
            switch result {
            case .success(let advanced):
                hasher = advanced
                hashedUpTo = upTo
            case .failure:
                restartHash() // the final job hashes everything instead
            }
        }
        if completeAfterHash && !completed {
            completeAfterHash = false
            complete()
        } else {
            hashPrefixIfDue()
        }
    }

    // MARK: - Reporting

    /// Writes what every connection holds (`BodyBuffer`), before their positions are
    /// read as bytes on disk: the range map, progress, the outcome, the end.
    private func writeHeldBytes() {
        for connection in connections { writeHeld(connection) }
    }

    /// Writes what one connection holds; a write that fails fails the download. A
    /// cancelled connection's bytes are dropped, as it would have written no more (its
    /// range may be another's by now, or the file cut to start over).
    private func writeHeld(_ connection: RangeConnection) {
        if connection.cancelled { return connection.body.discard() }
        guard let file, let error = connection.writeHeld(to: file) else { return }
        fail(.disk(error.message), connection)
    }

    /// The ranges on disk now, busy connections included; nil when not segmented.
    private func currentMap() -> SegmentMap? {
        guard var map = done, !single else { return nil }
        if pieces != nil { return map } // verified pieces only
        for connection in connections where !connection.cancelled && connection.position > connection.start {
            map.insert(connection.start..<connection.position)
        }
        return map
    }

    private func reportMap(_ map: SegmentMap, force: Bool = false) {
        guard force || map != lastReportedMap else { return }
        lastReportedMap = map
        loop.emit(.segments(id, map))
    }

    func reportProgressIfDue(now: UInt64) -> UInt64? {
        guard unreportedBytes > 0, responded else { return nil }
        if now >= nextProgressAt {
            nextProgressAt = now + CurlTransfer.progressInterval
            reportProgress()
            return nil
        }
        return nextProgressAt
    }

    /// `endingAt`: the bytes on disk once the connections are gone (the attempt's end),
    /// for a download on one connection, which has no map to count.
    private func reportProgress(endingAt end: Int64? = nil) {
        guard unreportedBytes > 0, responded else { return }
        writeHeldBytes() // what the map and the count below say is on disk
        if pieces != nil { for connection in connections { handPieces(of: connection) } }
        let written = unreportedBytes
        unreportedBytes = 0
        let onDisk: Int64
        if let map = currentMap() {
            reportMap(map)
            onDisk = map.bytesDone
            if let writeback {
                let (loop, id, attempt, epoch) = (loop, id, attempt, partEpoch)
                writeback.syncIfDue(now: monotonicNanoseconds()) { loop.post(.synced(.ranges(map), epoch: epoch), to: id, attempt: attempt) }
            }
        } else {
            onDisk = connections.first?.position ?? end ?? total
            if single, let first = connections.first, first.accepted, let writeback {
                let (loop, id, attempt, prefix, epoch) = (loop, id, attempt, first.position, partEpoch)
                writeback.syncIfDue(now: monotonicNanoseconds()) { loop.post(.synced(.prefix(prefix), epoch: epoch), to: id, attempt: attempt) }
            }
        }
        loop.emit(.progress(id, bytesWritten: written, totalOnDisk: onDisk, expected: total))
        hashPrefixIfDue()
    }
}
