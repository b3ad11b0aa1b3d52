import CCurl
import Crypto
import FerryCore
import Foundation

/// (Pieces) Every piece checked against its SHA-256 as it completes, on file jobs.
extension SegmentedDownload {
    // MARK: - Pieces

    /// The bytes on disk this attempt continues from: with pieces, those verified and
    /// those being checked again.
    func keptBytes() -> Int64 {
        (currentMap()?.bytesDone ?? 0) + (pending?.bytesDone ?? 0)
    }

    /// The file's length is known and fits the pieces: nothing is checked yet.
    func preparePieces() {
        guard let pieces else { return }
        pieceStates = Array(repeating: .missing, count: pieces.count)
        pending = SegmentMap(total: total)
        piecesChecking = 0
    }

    /// A resumed attempt checks the pieces its map kept again before counting them
    /// (read from the disk, not fetched); those that fail are fetched.
    func recheckPieces(of map: SegmentMap) {
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
    func handPieces(of connection: RangeConnection) {
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
        let (id, attempt, epoch, path, mailbox) = (self.id, self.attempt, partEpoch, file.path, loop.mailbox)
        let reader = file.openForReading()
        loop.fileJobs.async {
            let result = PartFile.hashRange(reader, path: path, from: range.lowerBound, to: range.upperBound, continuing: SHA256())
            let matches: Bool? = (try? result.get()).map { Array($0.finalize()) == expected }
            mailbox.post(.pieceChecked(epoch: epoch, index: index, source: source, matches: matches), to: id, attempt: attempt)
        }
    }

    /// A piece's check is back: a good piece joins the map, a bad one is fetched again
    /// (and its source dropped where another is left).
    func pieceChecked(epoch: Int, index: Int, source: Int, matches: Bool?) {
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
        let badPieces = sources.countBadPiece(from: source)
        let why = "piece \(index) failed its SHA-256"
        if single {
            pendingFailure = .checksumMismatch("Piece \(index) from \(sources[source].shown) failed its SHA-256, and the server sends only whole files: it cannot be fetched again alone")
            return
        }
        if otherSourceAlive(than: source) || badPieces > 1 {
            dropSource(source, because: why)
        } else {
            loop.log(id, "\(why) (from \(sources[source].shown), the only source left); it is fetched again")
        }
        if pickSource() == nil { pendingFailure = everySourceFailed() }
    }
}
