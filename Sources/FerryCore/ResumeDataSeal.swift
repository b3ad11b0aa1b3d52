import Crypto
import Foundation
import Logging

/// Seals the resume data `Pause` hands out, so that it is opaque for real: the URL in it
/// may carry `user:password@`, and any client of the bus may call `Pause` on any
/// transfer, while secrets must never be readable on the bus. The bytes are
/// `"FRD2"` + AES-GCM (nonce, ciphertext, tag) of the JSON, with `"FRD2"` as
/// authenticated data; only this daemon's key opens them, and a changed byte is caught.
/// The key lives in ferryd's state folder (0600), so resume data outlives a restart.
public struct ResumeDataSeal: @unchecked Sendable { // the key never changes after init
    public static let magic: [UInt8] = Array("FRD2".utf8)
    /// Bytes the seal adds to the JSON: magic, nonce, tag.
    public static let overhead = 4 + 12 + 16
    static let keyBytes = 32

    let key: SymmetricKey

    public init(key: SymmetricKey) { self.key = key }

    /// A key that lives as long as the process (tests, and a daemon that cannot keep one).
    public static func ephemeral() -> ResumeDataSeal {
        ResumeDataSeal(key: SymmetricKey(size: .bits256))
    }

    /// The key kept in `directory`'s `resume-key` file, made on first use (random,
    /// 0600, written under another name, renamed into place, the folder synced). Read
    /// only from a regular file of this user, never through a link, and made private
    /// again if its mode was widened. A missing or damaged one (wrong size, a link, not
    /// a plain file) is replaced; one that cannot be read (EACCES, EIO) is left alone and
    /// the process uses a key of its own, with a warning: resume data handed out before
    /// is then refused, and what this process hands out will not survive a restart.
    public static func persistent(in directory: String, logger: Logger) -> ResumeDataSeal {
        let path = directory + "/resume-key"
        switch readKeyFile(path) {
        case .key(let bytes):
            return ResumeDataSeal(key: SymmetricKey(data: bytes))
        case .unreadable(let code):
            logger.warning("cannot read the resume data key; resume data will not be accepted after a restart",
                           metadata: ["path": "\(path)", "error": "\(String(cString: strerror(code)))"])
            return .ephemeral()
        case .missingOrDamaged:
            break
        }
        let key = SymmetricKey(size: .bits256)
        let bytes = key.withUnsafeBytes { Array($0) }
        do {
            try StateDirectories.make(directory)
            try writeKeyFile(bytes, to: path, in: directory)
        } catch {
            logger.warning("cannot keep the resume data key; resume data will not be accepted after a restart",
                           metadata: ["path": "\(path)", "error": "\(error)"])
        }
        return ResumeDataSeal(key: key)
    }

    private enum KeyFile { case key([UInt8]), missingOrDamaged, unreadable(Int32) }

    private static func readKeyFile(_ path: String) -> KeyFile {
        // O_NONBLOCK: a FIFO put there does not hang the start.
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            return code == ENOENT || code == ELOOP ? .missingOrDamaged : .unreadable(code)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid(),
              info.st_size == keyBytes else { return .missingOrDamaged }
        if info.st_mode & 0o077 != 0 { _ = fchmod(fd, 0o600) }
        var bytes = [UInt8](repeating: 0, count: keyBytes)
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, keyBytes) }
        guard count >= 0 else { return .unreadable(errno) }
        return count == keyBytes ? .key(bytes) : .missingOrDamaged
    }

    private static func writeKeyFile(_ bytes: [UInt8], to path: String, in directory: String) throws {
        // Synced, renamed, the folder synced: a power cut leaves the key or none.
        try DurableFiles.write(bytes, to: path, mode: 0o600)
    }

    /// The sealed bytes of `json`.
    func sealing(_ json: [UInt8]) -> [UInt8] {
        // AES-GCM with a fresh random nonce cannot fail for a 256-bit key.
        guard let box = try? AES.GCM.seal(json, using: key, authenticating: Self.magic),
              let combined = box.combined else { return [] }
        return Self.magic + Array(combined)
    }

    /// The JSON inside `bytes` (which start with the magic).
    /// - Throws: `.invalidResumeData` when they were changed or sealed by another key.
    func opening(_ bytes: [UInt8]) throws -> [UInt8] {
        guard bytes.count > Self.overhead,
              let box = try? AES.GCM.SealedBox(combined: bytes.dropFirst(Self.magic.count)) else {
            throw CoreError.invalidResumeData("the resume data is too short (\(bytes.count) bytes); pass the bytes Pause returned, unchanged")
        }
        guard let json = try? AES.GCM.open(box, using: key, authenticating: Self.magic) else {
            throw CoreError.invalidResumeData("the resume data is damaged, or was made by another Ferry installation (it cannot be opened); start the download again")
        }
        return Array(json)
    }
}
