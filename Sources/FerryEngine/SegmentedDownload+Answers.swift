import CCurl
import Crypto
import FerryCore
import Foundation

/// Judging each connection's response head: the first request's answer decides the
/// length, the validator and whether the file is split; range answers must fit it.
extension SegmentedDownload {
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
    func rangesRefused(_ connection: RangeConnection, _ head: ResponseHead) -> Bool? {
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
            word.multiplexed = EasyHandleSetup.isMultiplexed(first.easy)
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

    func fail(_ error: CoreError, _ connection: RangeConnection) {
        connection.failure = error
        if pendingFailure == nil { pendingFailure = error }
        loop.requestService(self)
    }

    private func cancelAll(except keep: RangeConnection?) {
        for connection in connections where connection !== keep { connection.cancelled = true }
        loop.requestService(self)
    }

    func validatorMatches(_ head: ResponseHead) -> Bool {
        validator.map(head.isSameFile(as:)) ?? true
    }

    private func emitResponse(_ head: ResponseHead, connection: RangeConnection, startOffset: Int64, acceptsRanges: Bool = false) {
        responded = true
        var response = EngineResponse(
            status: head.status, etag: head.etag, lastModified: head.usableLastModified, expectedTotal: total,
            startOffset: startOffset, contentDisposition: head.contentDisposition, acceptsRanges: acceptsRanges,
            effectiveURL: EasyHandleSetup.effectiveURL(connection.easy, fallback: request.url), retryAfter: head.retryAfter)
        response.connections = head.status >= 300 || single ? 1 : maxConnections
        // On one connection a range request may go as an HTTP/2 stream (several
        // connections are HTTP/1.1, `RangeConnection`).
        response.multiplexed = EasyHandleSetup.isMultiplexed(connection.easy)
        response.singleConnectionReason = singleReason
        response.spaceReserved = head.status < 300 && space.covers(upTo: total)
        loop.emit(.response(id, response))
        if let map = currentMap(), head.status < 300 { reportMap(map) }
    }
}
