import Crypto
import Foundation

/// What `Pause` hands out and `ResumeDownload` takes back: enough to continue a download
/// from its `.part` file in a new transfer. Opaque to clients: `Pause` hands out the JSON
/// sealed by `ResumeDataSeal` (`"FRD2"`), which only this daemon can read, since the URL
/// may hold credentials. `"FRD1"` + JSON + SHA-256 of the JSON, what Ferry handed out
/// before, is still taken back. Everything in it is checked again when it comes back.
public struct ResumeData: Codable, Equatable, Sendable {
    public static let magic: [UInt8] = Array("FRD1".utf8)
    static let digestLength = 32

    public var url: String
    public var destination: String
    public var partPath: String
    /// Bytes in the part file when paused.
    public var offset: Int64
    public var etag: String?
    public var lastModified: String?
    /// Total size, -1 when unknown.
    public var expected: Int64
    /// The session identifier it came from (informational).
    public var session: String
    /// When the original transfer was created (µs since the epoch).
    public var created: UInt64
    /// A segmented download's ranges on disk (`SegmentMap.encoded`), fetched under the
    /// validator; nil for a plain download (its bytes are the part file's prefix).
    public var segments: String?

    public init(url: String, destination: String, partPath: String, offset: Int64, etag: String?,
                lastModified: String?, expected: Int64, session: String, created: UInt64) {
        self.url = url; self.destination = destination; self.partPath = partPath; self.offset = offset
        self.etag = etag; self.lastModified = lastModified; self.expected = expected
        self.session = session; self.created = created
    }

    /// The opaque bytes, sealed with `seal`.
    public func encoded(sealedWith seal: ResumeDataSeal) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Encoding plain strings and numbers cannot fail.
        let json = [UInt8]((try? encoder.encode(self)) ?? Data())
        let bytes = seal.sealing(json)
        // A URL near its own limit can make the data longer than ResumeDownload takes:
        // then there is none, as when the server cannot resume (Resume still works).
        return bytes.count <= Limits.resumeDataBytes ? bytes : []
    }

    /// Parses and checks bytes from a client: magic, seal (or digest), JSON, absolute
    /// paths, `partPath == destination + ".part"`, offset, URL. Does not look at the disk.
    public static func decode(_ bytes: [UInt8], seal: ResumeDataSeal) throws -> ResumeData {
        guard bytes.count <= Limits.resumeDataBytes else {
            throw CoreError.limitExceeded("the resume data is \(bytes.count) bytes long; at most \(Limits.resumeDataBytes) are accepted")
        }
        let json: [UInt8]
        if bytes.starts(with: ResumeDataSeal.magic) {
            json = try seal.opening(bytes)
        } else {
            guard bytes.count > magic.count + digestLength else {
                throw CoreError.invalidResumeData("the resume data is too short (\(bytes.count) bytes); pass the bytes Pause returned, unchanged")
            }
            guard Array(bytes.prefix(magic.count)) == magic else {
                throw CoreError.invalidResumeData("the resume data does not come from Ferry's Pause (unknown format)")
            }
            json = Array(bytes[magic.count ..< bytes.count - digestLength])
            let digest = Array(bytes.suffix(digestLength))
            guard Array(SHA256.hash(data: json)) == digest else {
                throw CoreError.invalidResumeData("the resume data is damaged (its checksum does not match)")
            }
        }
        let data: ResumeData
        do {
            data = try JSONDecoder().decode(ResumeData.self, from: Data(json))
        } catch {
            throw CoreError.invalidResumeData("the resume data cannot be read (its contents are not in the expected form)")
        }
        guard data.destination.hasPrefix("/"), data.partPath.hasPrefix("/"),
              FileSystemChecks.normalize(data.destination) == data.destination else {
            throw CoreError.invalidResumeData("the resume data names a relative or unusual path ('\(data.destination)')")
        }
        guard data.partPath == data.destination + ".part" else {
            throw CoreError.invalidResumeData("the resume data's partial file '\(data.partPath)' does not belong to '\(data.destination)'")
        }
        guard data.offset >= 0 else {
            throw CoreError.invalidResumeData("the resume data has a negative offset (\(data.offset))")
        }
        do {
            _ = try RequestURL.validate(data.url)
        } catch let error as CoreError {
            throw CoreError.invalidResumeData("the resume data holds an unusable URL: \(error.message)")
        }
        return data
    }
}
