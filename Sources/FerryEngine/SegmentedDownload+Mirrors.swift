import CCurl
import Crypto
import FerryCore
import Foundation

/// (Mirrors) Choosing and dropping the sources range requests go to.
extension SegmentedDownload {
    // MARK: - Mirrors

    /// What is wrong with a range connection's answer, for a download with mirrors
    /// (any source, the URL too): nil when it is the range asked for.
    func sourceAnswerProblem(_ connection: RangeConnection, _ head: ResponseHead) -> String? {
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
    func nextFirstSource(after connection: RangeConnection, because why: String) -> Int? {
        guard sources.count > 1, connection.start == 0 || pieces != nil, otherSourceAlive(than: connection.source) else { return nil }
        dropSource(connection.source, because: why)
        return pickSource()
    }

    /// A failure of a download with mirrors also names the sources dropped before it.
    func namingDroppedSources(_ error: CoreError) -> CoreError {
        sources.naming(error)
    }

    func otherSourceAlive(than index: Int) -> Bool {
        sources.otherAlive(than: index)
    }

    /// No more requests go to source `index` in this attempt (connections under way
    /// finish their ranges: their pieces are checked all the same).
    func dropSource(_ index: Int, because why: String) {
        guard sources.drop(index, because: why) else { return }
        loop.log(id, "source \(sources[index].shown) dropped: \(why)")
    }

    /// The source with the fewest connections under way (the URL first on a tie); nil
    /// when every one was dropped.
    func pickSource() -> Int? {
        sources.pick { index in connections.reduce(0) { $0 + ($1.source == index && !$1.cancelled ? 1 : 0) } }
    }

    /// Every source was dropped: `ChecksumMismatch` when bad pieces were among the
    /// reasons, naming each source and why.
    func everySourceFailed() -> CoreError {
        sources.everyFailed()
    }
}
