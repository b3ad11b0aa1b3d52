import Foundation

/// The body of an upload attempt (`EngineRequest.upload`): a file the caller opened,
/// streamed by the engine from its descriptor (never copied into memory).
///
/// Ownership: `fd` stays the caller's. The engine `dup`s it for the length of an
/// attempt and reads it with `pread`, so one descriptor serves every retry (each
/// restarts from byte 0); the caller closes it when the transfer is over.
///
/// The engine checks `size` and `modificationTime` after reading each chunk, before
/// handing it to libcurl (a file on a FUSE or network file system is read a chunk ahead
/// on a queue of the attempt's own, never on the engine's network thread): a file that
/// changed fails the attempt with `CoreError.fileNotFound` and a message saying so,
/// rather than sending a mix.
public struct EngineUpload: Sendable, Equatable {
    /// How the file travels.
    public enum Body: Sendable, Equatable {
        /// The file is the request body (`PUT`, or `POST` with a raw body).
        case raw
        /// `multipart/form-data`: the file as one part named `field` (with `fileName`
        /// and `contentType` in the part's headers), after the plain `fields`.
        case multipart(field: String, fields: [FormField])
    }

    /// A `name=value` part of a multipart body.
    public struct FormField: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) { self.name = name; self.value = value }
    }

    /// An open, readable descriptor of the file (the caller's; see above).
    public var fd: Int32
    /// The file's size when it was opened.
    public var size: Int64
    /// The file's modification time when it was opened, in nanoseconds since the epoch.
    public var modificationTime: Int64
    /// The device the file is on (`st_dev`; 0 = unknown): the engine reads a file on a
    /// FUSE or network file system off its own thread (see `UploadAttempt`).
    public var device: UInt64
    /// `PUT` or `POST`.
    public var method: String
    public var body: Body
    /// The file name sent in a multipart part (the source's last path component).
    public var fileName: String
    /// Content-Type of the body (raw) or of the file's part (multipart); nil =
    /// `application/octet-stream`.
    public var contentType: String?
    /// Where the server's answer is saved; nil = the first 64 KiB come back in
    /// `EngineResponse.body`.
    public var responseDestination: String?

    /// How the hidden file an answer is written to begins, beside the
    /// `responseDestination`, where the file system cannot make one without a name.
    public static let hiddenAnswerPrefix = ".ferry-answer-"

    public init(fd: Int32, size: Int64, modificationTime: Int64, device: UInt64 = 0, method: String = "PUT", body: Body = .raw,
                fileName: String = "file", contentType: String? = nil, responseDestination: String? = nil) {
        self.fd = fd; self.size = size; self.modificationTime = modificationTime; self.device = device; self.method = method
        self.body = body; self.fileName = fileName; self.contentType = contentType
        self.responseDestination = responseDestination
    }

    /// Opens `path` for an upload (read-only, close-on-exec) and records its size and
    /// modification time. The caller owns the returned `fd` (see `closeSource()`).
    /// Throws `CoreError.fileNotFound` for a missing, unreadable or non-regular file.
    public static func open(path: String, method: String = "PUT", body: Body = .raw, contentType: String? = nil,
                            responseDestination: String? = nil) throws -> EngineUpload {
        // O_NONBLOCK: a FIFO at the path (no writer, or one that never writes) must not
        // hold up the caller; it is refused below, and a regular file reads as ever.
        let fd = path.withCString { Glibc.open($0, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK) }
        guard fd >= 0 else {
            let why = errno == ENOENT ? "there is no file at \(path) to upload"
                : "\(path) cannot be read (\(String(cString: strerror(errno))))"
            throw CoreError.fileNotFound(why)
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            Glibc.close(fd)
            throw CoreError.fileNotFound("\(path) is not a regular file")
        }
        DescriptorMode.setNonBlocking(fd, false)
        let name = (path as NSString).lastPathComponent
        return EngineUpload(fd: fd, size: Int64(st.st_size), modificationTime: Self.nanoseconds(st.st_mtim),
                            device: UInt64(st.st_dev), method: method, body: body, fileName: name.isEmpty ? "file" : name,
                            contentType: contentType, responseDestination: responseDestination)
    }

    /// Closes `fd` (call once, when the transfer no longer needs it).
    public func closeSource() {
        Glibc.close(fd)
    }

    /// A `timespec` as nanoseconds since the epoch.
    public static func nanoseconds(_ t: timespec) -> Int64 {
        Int64(t.tv_sec) &* 1_000_000_000 &+ Int64(t.tv_nsec)
    }
}

/// Where an attempt's cookies live (`EngineRequest.cookieJar`). Requests with the same
/// jar share cookies: a `Set-Cookie` answer is sent back on later requests with that
/// jar, never on requests with another one.
public enum EngineCookieJar: Sendable, Equatable, Hashable {
    /// A Netscape-format cookie file, read when the engine first uses it and rewritten
    /// after each attempt (for persistent sessions). The engine creates it with mode
    /// 0600 when it is missing.
    case file(String)
    /// Cookies kept in the engine's memory only, keyed by an id (an ephemeral session's).
    case memory(UInt64)
}
