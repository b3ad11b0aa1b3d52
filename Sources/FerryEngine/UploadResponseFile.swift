import FerryCore
import Foundation

/// Where an upload's answer is saved (`response-destination`). Checked before the upload
/// begins (not made: a missing one is first made by a successful answer); the answer is written to a new file without a name
/// in the same folder (`O_TMPFILE`; a hidden named one where the file system cannot),
/// which takes the destination's name only once the whole answer is on the disk
/// (`commit`: synced, then renamed over it, the folder synced). So the destination holds
/// the last receipt until a successful answer has fully come, never part of one: an
/// upload that fails, or whose answer is cut, leaves it as it was. Engine thread only.
struct UploadResponseFile {
    let path: String
    /// The folder and the name of `path`.
    private let directory: String
    private let baseName: String
    private let area: SandboxArea?
    /// The folder the answer goes to and the destination's name there, opened (and, for
    /// a sandboxed application, checked) when the answer begins.
    private var folder: Int32 = -1
    private var name = ""
    /// The new file the answer is written to, once a successful answer begins.
    private var answer: Int32 = -1
    /// Its name, where it has one (a file system without `O_TMPFILE`).
    private var answerName: String?

    private init(path: String, area: SandboxArea?) {
        self.path = path
        directory = FileSystemChecks.directoryName(path) // absolute (checked at the call)
        baseName = FileSystemChecks.baseName(path)
        self.area = area
    }

    /// Checks `destination` before the upload: an existing one is opened for writing
    /// without emptying it, O_NONBLOCK, and kept only if it is a regular file (a FIFO put
    /// there, read by nobody or by someone who never reads, must not hold up the engine
    /// thread); a missing one is not made (an upload that fails leaves no empty receipt).
    /// Either way its folder must let the answer's file be made there. A sandboxed application's file is looked at
    /// relative to its folder as opened and checked to be inside the app's directory: a
    /// folder on the way swapped for a link since the call sends the answer nowhere else.
    static func open(_ destination: String, within area: SandboxArea?) -> Result<UploadResponseFile, CoreError> {
        guard let (folder, name) = SandboxArea.place(of: destination, within: area) else {
            return .failure(.disk("the response-destination '\(destination)' is no longer inside the application's directory '\(area?.root ?? "")/'; the answer was not written"))
        }
        defer { SandboxArea.release(folder) }
        let file = UploadResponseFile(path: destination, area: area)
        let fd = name.withCString { openat(folder, $0, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY) }
        if fd >= 0 {
            var st = stat()
            let regular = fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
            Glibc.close(fd)
            guard regular else {
                return .failure(.disk("the response-destination '\(destination)' is not a regular file; the answer was not written there"))
            }
        } else if errno != ENOENT { // (missing: the answer makes it)
            return .failure(.disk(PartFileError(code: errno, action: "opening", path: destination).message))
        }
        // The answer's new file is made in the folder and renamed over the destination:
        // a folder that lets neither (made read-only since the call) fails the upload
        // before anything is sent, not after the server took it.
        let folderLets = folder == AT_FDCWD ? access(file.directory, W_OK | X_OK) : faccessat(folder, ".", W_OK | X_OK, 0)
        guard folderLets == 0 else {
            return .failure(.disk(PartFileError(code: errno, action: "making the answer's file in the folder of", path: destination).message))
        }
        return .success(file)
    }

    /// Makes the new file for the answer, once, when the successful answer's body begins
    /// (or the answer ends without one).
    mutating func claim() -> CoreError? {
        guard answer < 0 else { return nil }
        let place: (folder: Int32, name: String)?
        if let area {
            place = area.openFolder(of: path)
        } else {
            let fd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            place = fd >= 0 ? (fd, baseName) : nil
        }
        guard let place else {
            return .disk("the folder of the response-destination '\(path)' cannot be opened\(area.map { " inside the application's directory '\($0.root)/'" } ?? ""); the answer was not written")
        }
        (folder, name) = place
        // Without /proc a file without a name could not be given one at the end.
        var code: Int32 = PartFile.canNameUnnamedFiles ? 0 : EOPNOTSUPP
        if code == 0 {
            answer = openat(folder, ".", PartFile.oTmpFile | O_WRONLY | O_CLOEXEC, PartFile.partFileMode)
            code = answer < 0 ? errno : 0
        }
        if code == EOPNOTSUPP || code == EISDIR || code == EINVAL {
            // The file system (or the kernel) cannot make a file without a name: a hidden one.
            let hidden = Self.hiddenName()
            switch PartFile.createNamed(path, folder: folder, name: hidden) {
            case .success(let fd):
                (answer, answerName, code) = (fd, hidden, 0)
            case .failure(let error):
                code = error.code
            }
        }
        guard answer >= 0 else {
            Glibc.close(folder)
            folder = -1
            return .disk(PartFileError(code: code, action: "creating the answer for", path: path).message)
        }
        // The receipt keeps the permissions of the one it replaces (a private 0600 one
        // stays private); a new one gets the usual mode under the umask.
        var old = stat()
        if fstatat(folder, name, &old, AT_SYMLINK_NOFOLLOW) == 0, (old.st_mode & S_IFMT) == S_IFREG {
            _ = fchmod(answer, old.st_mode & 0o7777)
        } else if let mask = PartFile.processUmask {
            _ = fchmod(answer, PartFile.partFileMode & ~mask)
        }
        return nil
    }

    private static func hiddenName() -> String {
        EngineUpload.hiddenAnswerPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }

    /// Appends a piece of the answer's body (claiming the file first).
    mutating func write(_ data: UnsafeRawPointer, _ count: Int) -> CoreError? {
        if let error = claim() { return error }
        var p = data
        var left = count
        while left > 0 {
            let n = Glibc.write(answer, p, left)
            if n > 0 { p += n; left -= n; continue }
            let code = n < 0 ? errno : ENOSPC
            if code == EINTR { continue }
            return .disk(PartFileError(code: code, action: "writing", path: path).message)
        }
        return nil
    }

    /// The answer is complete (an empty answer makes an empty file too): synced, given
    /// the destination's name in one step (`rename` over what was there), the folder
    /// synced, closed.
    mutating func commit() -> CoreError? {
        defer { close() }
        if let error = claim() { return error }
        let code = DurableFiles.syncFile(fd: answer, path: path)
        if code != 0 {
            return .disk(PartFileError(code: code, action: "flushing", path: path).message)
        }
        if answerName == nil {
            // A name first (linkat never replaces), then that name over the destination.
            let hidden = Self.hiddenName()
            let linked = PartFile.link(unnamed: answer, in: folder, as: hidden)
            guard linked == 0 else {
                return .disk(PartFileError(code: linked, action: "naming the answer for", path: path).message)
            }
            answerName = hidden
        }
        guard let hidden = answerName else { return nil }
        let moved = hidden.withCString { source in name.withCString { renameat(folder, source, folder, $0) == 0 ? 0 : errno } }
        guard moved == 0 else {
            return .disk(PartFileError(code: moved, action: "moving the answer to", path: path).message)
        }
        answerName = nil // it is the destination now
        DurableFiles.syncFolder(fd: folder, path: directory)
        return nil
    }

    /// Closes what is open; an answer not committed goes (a hidden name is removed).
    mutating func close() {
        if let hidden = answerName, folder >= 0 {
            _ = hidden.withCString { unlinkat(folder, $0, 0) }
        }
        answerName = nil
        if answer >= 0 { Glibc.close(answer) }
        answer = -1
        if folder >= 0 { Glibc.close(folder) }
        folder = -1
    }
}
