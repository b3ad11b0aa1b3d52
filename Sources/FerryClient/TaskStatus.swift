import Foundation
internal import DBus
internal import FerryBusClient
internal import FerryInterface

/// What a task's session last heard of it: its properties, kept current from the
/// signals the session follows anyway (the listing when it attaches, `InterfacesAdded`,
/// `PropertiesChanged`, `Progress`, `Completed`), and the Foundation `Progress` that
/// follows its bytes. Reading it costs no bus call. The session writes it on its
/// queue; anyone reads it.
final class TaskStatus: @unchecked Sendable {
    /// Counts the bytes (`completedUnitCount` of `totalUnitCount`, -1 while the size
    /// is unknown); made without a parent, so that it joins no `Progress.current()`.
    let progress: Progress

    private let lock = NSLock()
    /// Under `lock`.
    private var info: TransferInfo
    /// Whether the service told anything yet (a task's creator may seed what it knows).
    private var heard = false

    init(id: UInt64, path: String) {
        info = TransferInfo(id: id, path: path)
        progress = Progress(parent: nil, userInfo: nil)
        progress.totalUnitCount = -1
    }

    var snapshot: FerryTaskSnapshot { FerryTaskSnapshot(lock.withLock { info }) }

    /// What the creating call knows before the service says more (kind, URL, whether
    /// it starts suspended); ignored once the service told anything.
    func seed(_ properties: [String: DBusValue]) {
        lock.withLock {
            guard !heard else { return }
            info.apply(properties)
        }
    }

    /// The whole transfer as a listing read it.
    func replace(with listed: TransferInfo) {
        let counts: (Int64, Int64) = lock.withLock {
            info = listed
            heard = true
            return (info.bytesTransferred, info.bytesExpected)
        }
        follow(counts)
    }

    /// `InterfacesAdded`'s or `PropertiesChanged`'s values.
    func apply(_ properties: [String: DBusValue]) {
        let counts: (Int64, Int64)? = lock.withLock {
            info.apply(properties)
            heard = true
            let T = FerryInterface.TransferProperty.self
            guard properties[T.bytesExpected.name] != nil || properties[T.bytesTransferred.name] != nil else { return nil }
            return (info.bytesTransferred, info.bytesExpected)
        }
        if let counts { follow(counts) }
    }

    /// A `Progress` signal's counts.
    func progressed(total: Int64, expected: Int64) {
        lock.withLock {
            info.bytesTransferred = total
            info.bytesExpected = expected
        }
        follow((total, expected))
    }

    /// The run ended (told by its `Completed`, before the task's `value` and the
    /// delegate hear of it): its final state, failure and counts.
    func ended(state: String, errorName: String, errorMessage: String, httpStatus: Int, bytes: Int64?) {
        let counts: (Int64, Int64) = lock.withLock {
            info.state = state
            info.waitingReason = ""
            info.rate = 0
            info.errorName = state == "completed" ? "" : errorName
            info.errorMessage = state == "completed" ? "" : errorMessage
            if httpStatus != 0 { info.httpStatus = UInt32(clamping: httpStatus) }
            if let bytes { info.bytesTransferred = bytes }
            // Complete: what it has is all there is, whatever size was announced (or none).
            if state == "completed" { info.bytesExpected = info.bytesTransferred }
            return (info.bytesTransferred, info.bytesExpected)
        }
        follow(counts)
    }

    /// Sets the `Progress` to the counts (outside `lock`: `Progress` takes its own, and
    /// its observers run on this thread).
    private func follow(_ counts: (bytes: Int64, expected: Int64)) {
        progress.totalUnitCount = counts.expected >= 0 ? counts.expected : -1
        progress.completedUnitCount = counts.bytes
    }
}
