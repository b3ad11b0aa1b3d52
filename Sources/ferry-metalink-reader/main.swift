import FerryMetalink
import FerryMetalinkParser
import Foundation

// ferryd's Metalink reader: one fetched document on standard input (at most
// `MetalinkLimits.maxDocumentBytes`; one byte more is read so that a larger one is named
// as such), its outcome on standard output as JSON (`MetalinkReadOutcome`). The document
// comes from a server: the XML parser and its libraries (libxml2, ICU) run here, in a
// process of their own that ends with the document, never inside the daemon.
//
// Exit status 0 when the outcome was written (a refused document included), 1 when
// nothing could be.

// A document that keeps the parser busy is stopped by the kernel, not waited for.
var cpu = rlimit(rlim_cur: 30, rlim_max: 30)
_ = setrlimit(Int32(RLIMIT_CPU.rawValue), &cpu)

let input: Data
do {
    input = try FileHandle.standardInput.read(upToCount: MetalinkLimits.maxDocumentBytes + 1) ?? Data()
} catch {
    FileHandle.standardError.write(Data("ferry-metalink-reader: cannot read standard input: \(error)\n".utf8))
    exit(1)
}

// From here on the process can open nothing: no file, socket or pipe (it keeps its
// standard input, output and error, all it needs), so a flaw the document finds in the
// parser cannot reach a file or the bus from here. (Not a sandbox: see MetalinkReadQueue.)
var files = rlimit(rlim_cur: 3, rlim_max: 3)
_ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)

let outcome: MetalinkReadOutcome
do {
    outcome = .read(try MetalinkParser.parse(input))
} catch let refusal as MetalinkError {
    outcome = .refused(refusal)
} catch {
    outcome = .refused(MetalinkError(.malformed, "the Metalink document could not be read: \(error)"))
}

do {
    try FileHandle.standardOutput.write(contentsOf: try JSONEncoder().encode(outcome))
} catch {
    FileHandle.standardError.write(Data("ferry-metalink-reader: cannot write the outcome: \(error)\n".utf8))
    exit(1)
}
exit(0)
