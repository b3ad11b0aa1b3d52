import Dispatch
import Foundation
import Synchronization

/// A few serial queues for slow file work (fdatasync, hashing), each job on the one
/// with the fewest waiting.
///
/// Not a concurrent queue: those run on libdispatch's global worker pool, and on Linux
/// the first such worker starts a once-a-second monitor timer that never stops — an
/// idle ferryd would wake every second for the rest of its life. Serial queues run on
/// threads outside that pool.
final class FileJobQueues: Sendable {
    private let queues: [DispatchQueue]
    /// Jobs waiting or running on each queue.
    private let waiting: Mutex<[Int]>

    init(label: String, width: Int = 4) {
        precondition(width >= 1, "FileJobQueues needs at least one queue")
        queues = (0..<width).map { DispatchQueue(label: "\(label).\($0)", qos: .utility) }
        waiting = Mutex(Array(repeating: 0, count: width))
    }

    func async(_ work: @escaping @Sendable () -> Void) {
        let pick = waiting.withLock { waiting in
            var pick = 0
            for i in 1..<waiting.count where waiting[i] < waiting[pick] { pick = i }
            waiting[pick] += 1
            return pick
        }
        queues[pick].async { [self] in
            work()
            waiting.withLock { $0[pick] -= 1 }
        }
    }
}
