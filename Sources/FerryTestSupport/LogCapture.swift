import Foundation
import Synchronization
import Logging

/// Collects log messages so tests can check what a person would read.
public final class LogCapture: Sendable {
    /// Appended from whichever thread logs; read by the test after the call returns.
    private let lines = Mutex<[(Logger.Level, String)]>([])

    public init() {}

    public var logger: Logger {
        Logger(label: "ferry.test") { _ in CapturingHandler(capture: self) }
    }

    public func append(_ level: Logger.Level, _ message: String) {
        lines.withLock { $0.append((level, message)) }
    }

    public var messages: [(level: Logger.Level, text: String)] {
        lines.withLock { $0.map { (level: $0.0, text: $0.1) } }
    }

    struct CapturingHandler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            capture.append(event.level, "\(event.message)")
        }
    }
}
