import FerryCore

/// (Mirrors) The places a segmented download's range requests go: the URL (index 0;
/// after redirects the download's `rangeURL`) and its mirrors, each with why it was
/// dropped for this attempt, if it was. Which source a request goes to, and what an
/// error says of the dropped ones, is decided here; the download logs and acts.
struct DownloadSources {
    /// One place range requests go.
    struct Source {
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

    private var list: [Source]

    init(url: String, mirrors: [String]) {
        list = ([url] + mirrors).enumerated().map { i, each in
            Source(url: each, shown: Redaction.urlWithoutCredentials(each),
                   sendsHeaders: i == 0 || CrossOriginRedirect.target(of: each, from: url) == nil)
        }
    }

    var count: Int { list.count }
    var indices: Range<Int> { list.indices }
    subscript(index: Int) -> Source { list[index] }

    /// A source other than `index` is still used.
    func otherAlive(than index: Int) -> Bool {
        list.indices.contains { $0 != index && list[$0].dropped == nil }
    }

    /// No more requests go to source `index`; false when it was dropped already (or is
    /// none).
    mutating func drop(_ index: Int, because why: String) -> Bool {
        guard list.indices.contains(index), list[index].dropped == nil else { return false }
        list[index].dropped = why
        return true
    }

    /// Counts a bad piece against source `index`; returns how many it has sent.
    mutating func countBadPiece(from index: Int) -> Int {
        list[index].badPieces += 1
        return list[index].badPieces
    }

    /// The source with the fewest connections under way (`busy(index)`; the URL first
    /// on a tie); nil when every one was dropped.
    func pick(busy: (Int) -> Int) -> Int? {
        var best: (index: Int, busy: Int)?
        for (index, source) in list.enumerated() where source.dropped == nil {
            let count = busy(index)
            if best == nil || count < best!.busy { best = (index, count) }
        }
        return best?.index
    }

    /// Every source was dropped: `ChecksumMismatch` when bad pieces were among the
    /// reasons, naming each source and why.
    func everyFailed() -> CoreError {
        let names = list.map { "\($0.shown) (\($0.dropped ?? "not used"))" }.joined(separator: "; ")
        if list.contains(where: { $0.badPieces > 0 }) {
            return .checksumMismatch("Every source failed a piece: \(names)")
        }
        return .network("Every source failed: \(names)")
    }

    /// A failure of a download with mirrors also names the sources dropped before it
    /// (and why), so that `Error` says what each did.
    func naming(_ error: CoreError) -> CoreError {
        let dropped = list.filter { $0.dropped != nil }
        guard list.count > 1, !dropped.isEmpty, !error.message.hasPrefix("Every source") else { return error }
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
}
