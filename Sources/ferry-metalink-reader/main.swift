import CReaderConfinement
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

/// From here on the process can do nothing but compute and answer on the descriptors it
/// has (its standard input, output and error): no file, socket or pipe opened, no
/// program run, no process started or signalled, nothing changed on disk (a seccomp
/// filter refuses every other system call with EPERM; no descriptor beyond the three
/// either), so a flaw the document finds in the parser or its libraries reaches nothing
/// from here. A reader that cannot be confined reads no document.
func confine() {
    var files = rlimit(rlim_cur: 3, rlim_max: 3)
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
    let error = ferry_confine_reader()
    guard error == 0 else {
        FileHandle.standardError.write(Data("ferry-metalink-reader: cannot confine itself (seccomp): \(String(cString: strerror(error)))\n".utf8))
        exit(1)
    }
}

// `--check-confinement`: confines itself as for a document, then tries what a parser
// flaw would try, and says on standard output what the kernel answered; exit status 0
// when the filter refused each (EPERM: without it, the missing program would be ENOENT,
// the descriptor limit EMFILE). For packagers and the tests.
if CommandLine.arguments.dropFirst().first == "--check-confinement" {
    confine()
    var refusedAll = true
    func tried(_ what: String, _ result: Int32) {
        let code = errno
        let refused = result == -1 && code == EPERM
        if !refused { refusedAll = false }
        print("\(what): \(result == -1 ? "refused (\(String(cString: strerror(code))))" : "ALLOWED")")
    }
    tried("open /", open("/", O_RDONLY | O_DIRECTORY))
    tried("socket", socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0))
    let child = fork()
    if child == 0 { _exit(0) }
    tried("fork", child)
    // A program that does not exist: only the filter answers EPERM, and an exec that
    // went through could not replace this process with one that says nothing.
    let program = "/nonexistent/ferry-check-confinement"
    tried("execve \(program)", execve(program, [strdup(program), nil], [nil]))
    tried("kill the parent", kill(getppid(), 0))
    let code = mmap(nil, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    tried("mmap executable memory", code == MAP_FAILED ? -1 : 0)
    let folder = NSTemporaryDirectory() + "ferry-check-confinement-\(getpid())"
    let made = mkdir(folder, 0o700)
    tried("mkdir \(folder)", made)
    if made == 0 { rmdir(folder) }
    exit(refusedAll ? 0 : 1)
}

let input: Data
do {
    input = try FileHandle.standardInput.read(upToCount: MetalinkLimits.maxDocumentBytes + 1) ?? Data()
} catch {
    FileHandle.standardError.write(Data("ferry-metalink-reader: cannot read standard input: \(error)\n".utf8))
    exit(1)
}

confine()

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
