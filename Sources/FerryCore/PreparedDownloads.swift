/// Downloads checked and named but not added yet (`prepareDownload`), in the order
/// they were prepared, with how many each session has and their final and `.part`
/// paths (taken for other downloads meanwhile).
///
/// Rules: the counts and paths are always those of the downloads held; taking them
/// (to add, or to drop) leaves nothing behind.
struct PreparedDownloads {
    private var records: [TransferRecord] = []
    private var perSession: [SessionID: Int] = [:]
    private var paths: Set<String> = []

    var isEmpty: Bool { records.isEmpty }
    var count: Int { records.count }

    mutating func add(_ t: TransferRecord) {
        records.append(t)
        perSession[t.session, default: 0] += 1
        paths.insert(t.destination)
        paths.insert(t.partPath)
    }

    /// How many of them belong to `session`.
    func count(session: SessionID) -> Int {
        perSession[session] ?? 0
    }

    /// Whether one of them will write `path`.
    func holds(_ path: String) -> Bool {
        paths.contains(path)
    }

    /// All of them, oldest first; none is held afterwards.
    mutating func takeAll() -> [TransferRecord] {
        defer { self = PreparedDownloads() }
        return records
    }
}
