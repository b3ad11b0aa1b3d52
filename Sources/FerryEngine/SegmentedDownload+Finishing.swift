import CCurl
import Crypto
import FerryCore
import Foundation

/// The end of an attempt: the file trimmed, flushed and hashed off the engine thread,
/// stop and abandon, and the outcome with the bytes it keeps.
extension SegmentedDownload {
    // MARK: - The end

    func alreadyComplete() {
        emitKeptValidator(startOffset: total, connections: 0)
        complete()
    }

    /// A response that keeps the validator the bytes on disk were fetched under (the
    /// file was complete on disk, or a mirror answered first: its validator is its own).
    func emitKeptValidator(startOffset: Int64, connections: Int) {
        var response = EngineResponse(status: 206, etag: validator.flatMap { $0.hasPrefix("\"") ? $0 : nil },
                                      lastModified: validator.flatMap { $0.hasPrefix("\"") ? nil : $0 },
                                      expectedTotal: total, startOffset: startOffset, acceptsRanges: true, effectiveURL: request.url)
        response.connections = connections
        response.answeredOnConnection = false
        responded = true
        loop.emit(.response(id, response))
        if let map = currentMap() { reportMap(map) }
    }

    /// Every byte is on disk: trim, flush, hash (if asked) off the engine thread.
    func complete() {
        guard let file else { return }
        if prefixHash?.running == true {
            prefixHash?.completeAfter = true // the running hash job's result is needed first
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
        let reader = prefixHash != nil ? file.openForReading() : -1
        let (fd, path, isRegular) = (file.handOver(), file.path, file.isRegular)
        let writebackFD = writeback?.handOver() ?? -1
        writeback = nil
        let (id, attempt, length, mailbox) = (self.id, self.attempt, total, loop.mailbox)
        let hashing = prefixHash.map { (digest: $0.digest, from: $0.upTo) }
        loop.fileJobs.async {
            PartFileWriteback.close(afterQueuedWriteback: writebackFD)
            var result: Result<String?, PartFileError>
            if let error = PartFile.flushAndClose(fd: fd, path: path, isRegular: isRegular) {
                if reader >= 0 { close(reader) }
                result = .failure(error)
            } else if let hashing {
                if let error = hashing.digest.advance(reader, path: path, from: hashing.from, to: length) {
                    result = .failure(error)
                } else {
                    result = .success(hashing.digest.hex())
                }
            } else {
                result = .success(nil)
            }
            mailbox.post(.fileJob(result), to: id, attempt: attempt)
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
    func finish(_ outcome: @autoclosure () -> EngineOutcome) {
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
    func bytesForOutcome() -> Int64 {
        if let map = currentMap() { return map.contiguousPrefix }
        return connections.first.map(Self.prefixOnDisk) ?? prefixKept
    }

    /// The prefix on disk as a connection leaves it. A first connection not answered
    /// yet has cut nothing: the prefix it was to continue from is still there.
    static func prefixOnDisk(_ connection: RangeConnection) -> Int64 {
        connection.accepted ? connection.position : connection.isFirst ? connection.start : 0
    }
}
