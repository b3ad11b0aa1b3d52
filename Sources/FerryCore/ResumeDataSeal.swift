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
    /// 0600, written under another name and renamed into place). A file of the wrong
    /// size is replaced; when the folder cannot be written, the key is the process's own
    /// and a warning says that resume data will not survive a restart.
    public static func persistent(in directory: String, logger: Logger) -> ResumeDataSeal {
        let path = directory + "/resume-key"
        if let bytes = FileManager.default.contents(atPath: path), bytes.count == keyBytes {
            return ResumeDataSeal(key: SymmetricKey(data: bytes))
        }
        let key = SymmetricKey(size: .bits256)
        let bytes = key.withUnsafeBytes { Array($0) }
        do {
            try StateDirectories.make(directory)
            try writeKeyFile(bytes, to: path)
        } catch {
            logger.warning("cannot keep the resume data key; resume data will not be accepted after a restart",
                           metadata: ["path": "\(path)", "error": "\(error)"])
        }
        return ResumeDataSeal(key: key)
    }

    private static func writeKeyFile(_ bytes: [UInt8], to path: String) throws {
        let temporary = path + ".new"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
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
            throw FerryError.invalidResumeData("the resume data is too short (\(bytes.count) bytes); pass the bytes Pause returned, unchanged")
        }
        guard let json = try? AES.GCM.open(box, using: key, authenticating: Self.magic) else {
            throw FerryError.invalidResumeData("the resume data is damaged, or was made by another Ferry installation (it cannot be opened); start the download again")
        }
        return Array(json)
    }
}
