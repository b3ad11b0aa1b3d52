import Dispatch

/// Runs Swift tasks on a serial dispatch queue instead of the default global pool.
///
/// On Linux, libdispatch starts a monitor of its worker pool — a timer on its manager
/// thread, firing once a second for the rest of the process — as soon as the first
/// worker thread of a global (non-overcommit) queue runs. Swift's default executor and
/// concurrent queues use those workers. A daemon that should not wake up at all when it
/// has nothing to do runs its `async` code here (`Task.onQueue { … }`), and uses serial
/// queues for its other background work.
public final class QueueTaskExecutor: TaskExecutor, Sendable {
    /// The executor for the daemon's own tasks (bus calls awaited at start, on idle exit…).
    public static let shared = QueueTaskExecutor(label: "org.ferry.tasks")

    let queue: DispatchQueue

    public init(label: String) {
        queue = DispatchQueue(label: label)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}

extension Task where Failure == Never, Success == Void {
    /// Starts a task whose non-isolated code runs on `QueueTaskExecutor.shared`.
    @discardableResult
    public static func onQueue(_ operation: sending @escaping () async -> Void) -> Task<Void, Never> {
        Task(executorPreference: QueueTaskExecutor.shared, operation: operation)
    }
}
