import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Makes a fresh directory `PARENT/PREFIX.XXXXXX` (mkdtemp) and returns its path.
/// The parent defaults to `/tmp` to keep paths short: a Unix socket path below
/// the directory must fit in 108 bytes.
public func makeShortTemporaryDirectory(prefix: String, in parent: String = "/tmp") throws -> String {
    var template = Array("\(parent)/\(prefix).XXXXXX".utf8CString)
    guard let p = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw TestProcessError("mkdtemp failed: \(String(cString: strerror(errno)))")
    }
    return String(cString: p)
}

/// One directory per test process, `/tmp/ferry-run.XXXXXX`, made on first use and
/// removed with everything below it when the process exits. Test processes and
/// private buses keep their logs and sockets there: their owners live as long as
/// the XCTest case that made them, which XCTest keeps until the run ends, so their
/// own clean-up in `deinit` never runs.
public enum TestRunDirectory {
    private static let made = Result {
        let path = try makeShortTemporaryDirectory(prefix: "ferry-run")
        runDirectoryToRemove = path
        atexit { if let path = runDirectoryToRemove { try? FileManager.default.removeItem(atPath: path) } }
        return path
    }

    /// The directory's path (made on the first call).
    public static func path() throws -> String { try made.get() }
}

/// Read only by the exit handler; written once, before the handler is registered.
nonisolated(unsafe) private var runDirectoryToRemove: String?
