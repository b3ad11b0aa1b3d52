import Foundation

/// What the core takes from the world outside it: the clock, the default download
/// directory, the version, the retry policy, free disk space and how often progress is
/// checkpointed. Tests inject a fake clock, temporary directories, tiny backoffs and a
/// fake file system size.
public struct CoreEnvironment {
    /// Microseconds since the Unix epoch.
    public var now: () -> UInt64
    /// Where downloads go when neither the transfer nor its session names a directory.
    public var defaultDownloadDirectory: () -> String
    /// The daemon's version (the Manager's `Version` property).
    public var version: String
    /// Decides whether a failed attempt is tried again, and after how long.
    public var retryPolicy: RetryPolicy
    /// Bytes free for an unprivileged user on the file system holding `path` (a
    /// directory); nil when unknown (then nothing is refused for lack of space).
    public var freeSpace: (_ path: String) -> Int64?
    /// Seconds between two stored checkpoints of a running transfer's offset (the store
    /// is not written per chunk; the `.part` file's real size wins after a restart).
    public var checkpointInterval: Double
    /// Seconds with nothing queued, waiting or running before the manager's batch ends
    /// (`AllFinished` and the notification); 0 ends it at once.
    public var batchSettleTime: Double
    /// Seals the resume data `Pause` hands out (only this key opens it again).
    public var resumeDataSeal: ResumeDataSeal
    /// Seconds a pipe or socket given as `destination-fd` may take nothing of the
    /// finished file before the transfer fails.
    public var descriptorStallLimit: Double
    /// Upload sources (`Upload`'s file or `source-fd`) the core may hold open at once:
    /// each queued, paused or running upload keeps one. Past it `Upload` is refused
    /// with `LimitExceeded`, so the files, sockets and bus of every other transfer
    /// keep the descriptors they need.
    public var uploadSourceLimit: Int
    /// Completion events one session may hold unacknowledged, counting those its
    /// transfers may still add (`TransferCoordinator.checkRoomForEvents`).
    public var pendingEventsPerSession: Int
    /// Seconds within which a change brought by engine events, ending so soon after the
    /// last store write, waits to be written, moved and announced together with the
    /// next ones (`CommitHold`: group commit); 0 writes every change as it ends. ferryd
    /// uses a few milliseconds; 0 by default (tests see every change at once).
    public var commitWindow: Double = 0
    /// The time zone the schedule's `HH:MM` are in (ferryd: `TZ`, else the system's).
    public var timeZone: () -> TimeZone
    /// The machine itself restarted since the state was last written (ferryd compares
    /// the kernel's boot id): a power cut or a crash may have left holes under a part
    /// file's length, so `restore` trusts of each only what was synced (`DurablePart`).
    /// False when unknown, as after `kill -9` of the daemon, where the page cache kept
    /// every byte written.
    public var machineRestarted = false
    /// Makes dedupe followers' copies of their leader's finished file, off the core's
    /// queue (`FetchedCopier`; core tests hold it to see the core answer meanwhile).
    public var fetchedCopier: FetchedCopier = FetchedCopyQueue()
    /// Parses fetched Metalink documents off the core's queue (`MetalinkReading`; core
    /// tests hold it to see what happens meanwhile).
    public var metalinkReader: MetalinkReading = MetalinkReadQueue()

    /// - Parameters:
    ///   - now: the clock; the real wall clock by default.
    ///   - defaultDownloadDirectory: the XDG download directory by default
    ///     (`XDG_DOWNLOAD_DIR` from `user-dirs.dirs`, else `~/Downloads`, created if missing).
    ///   - version: the daemon's version.
    ///   - retryPolicy: `.standard()` by default (exponential backoff from 2 s to 5 min, with jitter).
    ///   - freeSpace: `statvfs` through Foundation by default.
    ///   - checkpointInterval: 5 seconds by default.
    ///   - batchSettleTime: 1 second by default.
    ///   - resumeDataSeal: a key of this process's own by default (ferryd keeps one on disk).
    ///   - descriptorStallLimit: 60 seconds by default.
    ///   - uploadSourceLimit: the process's open-file limit less 256 by default (`uploadSourceBudget`).
    ///   - pendingEventsPerSession: 100,000 by default (`Limits.defaultPendingEventsPerSession`).
    ///   - timeZone: the process's (`TZ`, else the system's) by default.
    public init(now: @escaping () -> UInt64 = CoreEnvironment.systemClock,
                defaultDownloadDirectory: @escaping () -> String = { XDGUserDirectories.downloadDirectory() },
                version: String = "0.1.0",
                retryPolicy: RetryPolicy = .standard(),
                freeSpace: @escaping (String) -> Int64? = CoreEnvironment.systemFreeSpace,
                checkpointInterval: Double = 5,
                batchSettleTime: Double = 1,
                resumeDataSeal: ResumeDataSeal = .ephemeral(),
                descriptorStallLimit: Double = 60,
                uploadSourceLimit: Int = CoreEnvironment.uploadSourceBudget(),
                pendingEventsPerSession: Int = Limits.defaultPendingEventsPerSession,
                timeZone: @escaping () -> TimeZone = { TimeZone.current }) {
        self.timeZone = timeZone
        self.now = now
        self.defaultDownloadDirectory = defaultDownloadDirectory
        self.version = version
        self.retryPolicy = retryPolicy
        self.freeSpace = freeSpace
        self.checkpointInterval = checkpointInterval
        self.batchSettleTime = batchSettleTime
        self.resumeDataSeal = resumeDataSeal
        self.descriptorStallLimit = descriptorStallLimit
        self.uploadSourceLimit = uploadSourceLimit
        self.pendingEventsPerSession = pendingEventsPerSession
    }

    /// Descriptors left for upload sources: the soft open-file limit (`RLIMIT_NOFILE`)
    /// less 256 for everything else (the state database, the bus, each running
    /// transfer's sockets and files), at least 16.
    public static func uploadSourceBudget() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return 1 << 20 }
        return max(16, Int(clamping: limit.rlim_cur) - 256)
    }

    /// The wall clock in microseconds since the Unix epoch.
    public static func systemClock() -> UInt64 {
        let seconds = Date().timeIntervalSince1970
        return seconds > 0 ? UInt64(seconds * 1_000_000) : 0
    }

    /// Bytes an unprivileged process may still write on the file system holding
    /// `path` (`statvfs`: available blocks × fragment size).
    public static func systemFreeSpace(_ path: String) -> Int64? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        let (bytes, overflow) = UInt64(info.f_bavail).multipliedReportingOverflow(by: UInt64(info.f_frsize))
        return overflow ? Int64.max : Int64(clamping: bytes)
    }
}
