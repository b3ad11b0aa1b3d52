import CCurl
import Crypto
import FerryCore
import Foundation

/// Reporting: held bytes written, the range map and progress events, part-file syncs.
extension SegmentedDownload {
    // MARK: - Reporting

    /// Writes what every connection holds (`BodyBuffer`), before their positions are
    /// read as bytes on disk: the range map, progress, the outcome, the end.
    func writeHeldBytes() {
        for connection in connections { writeHeld(connection) }
    }

    /// Writes what one connection holds; a write that fails fails the download. A
    /// cancelled connection's bytes are dropped, as it would have written no more (its
    /// range may be another's by now, or the file cut to start over).
    func writeHeld(_ connection: RangeConnection) {
        if connection.cancelled { return connection.body.discard() }
        guard let file, let error = connection.writeHeld(to: file) else { return }
        fail(.disk(error.message), connection)
    }

    /// The ranges on disk now, busy connections included; nil when not segmented.
    func currentMap() -> SegmentMap? {
        guard var map = done, !single else { return nil }
        if pieces != nil { return map } // verified pieces only
        for connection in connections where !connection.cancelled && connection.position > connection.start {
            map.insert(connection.start..<connection.position)
        }
        return map
    }

    func reportMap(_ map: SegmentMap, force: Bool = false) {
        guard force || map != lastReportedMap else { return }
        lastReportedMap = map
        loop.emit(.segments(id, map))
    }

    func reportProgressIfDue(now: UInt64) -> UInt64? {
        guard unreportedBytes > 0, responded else { return nil }
        if let due = progressPace.wait(at: now) { return due }
        reportProgress()
        return nil
    }

    /// `endingAt`: the bytes on disk once the connections are gone (the attempt's end),
    /// for a download on one connection, which has no map to count.
    func reportProgress(endingAt end: Int64? = nil) {
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
                let (mailbox, id, attempt, epoch) = (loop.mailbox, id, attempt, partEpoch)
                writeback.syncIfDue(now: monotonicNanoseconds()) { mailbox.post(.synced(.ranges(map), epoch: epoch), to: id, attempt: attempt) }
            }
        } else {
            onDisk = connections.first?.position ?? end ?? total
            if single, let first = connections.first, first.accepted, let writeback {
                let (mailbox, id, attempt, prefix, epoch) = (loop.mailbox, id, attempt, first.position, partEpoch)
                writeback.syncIfDue(now: monotonicNanoseconds()) { mailbox.post(.synced(.prefix(prefix), epoch: epoch), to: id, attempt: attempt) }
            }
        }
        loop.emit(.progress(id, bytesWritten: written, totalOnDisk: onDisk, expected: total))
        hashPrefixIfDue()
    }
}
