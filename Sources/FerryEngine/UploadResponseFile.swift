import FerryCore
import Foundation

/// Where an upload's answer is saved (`response-destination`). Opened before the
/// upload begins; emptied only once a successful answer comes (`claim`), so an upload
/// that fails before keeps what the file held; on the disk, under its name, before the
/// upload is reported complete (`commit`). Engine thread only.
struct UploadResponseFile {
    let path: String
    private var fd: Int32
    /// Emptied for this answer.
    private var claimed = false

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    /// Opens `destination` for writing without emptying it. O_NONBLOCK, then only a
    /// regular file is kept: a FIFO put there (read by nobody, or by someone who never
    /// reads) must not hold up the engine thread. A sandboxed application's file is
    /// opened relative to its folder as opened and checked to be inside the app's
    /// directory: a folder on the way swapped for a link since the call sends the answer
    /// nowhere else.
    static func open(_ destination: String, within area: SandboxArea?) -> Result<UploadResponseFile, CoreError> {
        guard let (folder, name) = SandboxArea.place(of: destination, within: area) else {
            return .failure(.disk("the response-destination '\(destination)' is no longer inside the application's directory '\(area?.root ?? "")/'; the answer was not written"))
        }
        let fd = name.withCString {
            openat(folder, $0, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0o644)
        }
        SandboxArea.release(folder)
        guard fd >= 0 else {
            return .failure(.disk(PartFileError(code: errno, action: "opening", path: destination).message))
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            Glibc.close(fd)
            return .failure(.disk("the response-destination '\(destination)' is not a regular file; the answer was not written there"))
        }
        guard DescriptorMode.setNonBlocking(fd, false) else {
            let error = PartFileError(code: errno, action: "opening", path: destination)
            Glibc.close(fd)
            return .failure(.disk(error.message))
        }
        return .success(UploadResponseFile(path: destination, fd: fd))
    }

    /// Empties the file once, when the successful answer's body begins (or the answer
    /// ends without one): the old contents go only for the new answer.
    mutating func claim() -> CoreError? {
        guard !claimed else { return nil }
        claimed = true
        guard ftruncate(fd, 0) == 0 else {
            return .disk(PartFileError(code: errno, action: "writing", path: path).message)
        }
        return nil
    }

    /// Appends a piece of the answer's body (claiming the file first).
    mutating func write(_ data: UnsafeRawPointer, _ count: Int) -> CoreError? {
        if let error = claim() { return error }
        var p = data
        var left = count
        while left > 0 {
            let n = Glibc.write(fd, p, left)
            if n > 0 { p += n; left -= n; continue }
            if n < 0 && errno == EINTR { continue }
            return .disk(PartFileError(code: n < 0 ? errno : ENOSPC, action: "writing", path: path).message)
        }
        return nil
    }

    /// The answer is complete: claimed (an empty answer empties the file too), synced,
    /// its folder synced, closed.
    mutating func commit() -> CoreError? {
        defer { close() }
        if let error = claim() { return error }
        let code = DurableFiles.syncFile(fd: fd, path: path)
        if code != 0 {
            return .disk(PartFileError(code: code, action: "flushing", path: path).message)
        }
        DurableFiles.syncFolder(containing: path)
        let rc = Glibc.close(fd)
        fd = -1
        if rc != 0 && errno != EINTR {
            return .disk(PartFileError(code: errno, action: "closing", path: path).message)
        }
        return nil
    }

    mutating func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}
