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
