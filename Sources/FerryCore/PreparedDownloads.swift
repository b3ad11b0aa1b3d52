/// Downloads checked and named but not added yet (`prepareDownload`), in the order
/// they were prepared, with how many each session has and their final and `.part`
/// paths (taken for other downloads meanwhile).
///
/// Rules: the counts and paths are always those of the downloads held; taking them
/// (to add, or to drop) leaves nothing behind, the folders they found writable included.
struct PreparedDownloads {
    private var records: [TransferRecord] = []
    private var perSession: [SessionID: Int] = [:]
    private var paths: Set<String> = []
    /// Folders found existing and writable while these were prepared: the next
    /// download of the same batch into one is not checked again (a `DownloadGroup` of
    /// 1,000 URLs into one folder asked the disk 3,000 times the same thing, a third of
    /// the time to its first download). Only while downloads are held: a new batch looks again.
    private(set) var writableDirectories: Set<String> = []

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

    /// `directory` was found to exist and to be writable for one of them.
    mutating func foundWritable(_ directory: String) {
        writableDirectories.insert(directory)
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
