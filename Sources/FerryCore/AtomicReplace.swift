import Foundation

/// Puts a finished file in place of an existing one in one step. `rename(2)` replaces
/// the target atomically, so at every moment the final name holds either the old file
/// or the new one, and a crash at any point leaves no hidden copy of the old file
/// behind (the old way moved it aside first; a `kill -9` between the two moves left
/// `.NAME.ferry-replaced-XXXXXXXX` forever). A symbolic link at the target is itself
/// replaced, never followed.
enum AtomicReplace {
    static func replace(_ target: String, with source: String) throws {
        guard rename(source, target) != 0 else { return }
        let code = errno
        throw FerryError.disk("could not move '\(source)' to '\(target)': \(String(cString: strerror(code)))")
    }
}
