import Foundation

/// What a Metalink 4 document (RFC 5854) says about the one file Ferry downloads from it:
/// where to fetch it, how big it is and how to check it, whole and piece by piece.
///
/// Only what a download needs is kept: the file's name, `<size>`, the `sha-256`
/// `<hash>`, the `sha-256` `<pieces>` and the http/https `<url>`s. Everything else
/// (`<metaurl>`, other hash types, `<signature>`, `<publisher>`, elements of other
/// namespaces) is read past and ignored.
public struct Metalink: Sendable, Equatable, Codable {
    /// The file's SHA-256 piece hashes: piece `i` covers bytes
    /// `i * length ..< min((i + 1) * length, size)`.
    public struct Pieces: Sendable, Equatable, Codable {
        /// Bytes in every piece but the last.
        public var length: Int64
        /// One SHA-256 digest per piece, 64 lowercase hexadecimal digits each, in order.
        public var sha256: [String]

        public init(length: Int64, sha256: [String]) {
            self.length = length
            self.sha256 = sha256
        }

        /// How many pieces of `length` bytes cover `size` bytes (the last may be shorter).
        public static func count(size: Int64, length: Int64) -> Int64 {
            size == 0 ? 0 : (size - 1) / length + 1
        }
    }

    /// One place the file can be fetched from.
    public struct Source: Sendable, Equatable, Codable {
        /// An http or https URL.
        public var url: String
        /// The document's `priority` (1 is the most preferred); `nil` when it gave none
        /// (such URLs come after every URL that has one).
        public var priority: Int?
        /// The document's `location` (an ISO 3166-1 country code), if any.
        public var location: String?

        public init(url: String, priority: Int? = nil, location: String? = nil) {
            self.url = url
            self.priority = priority
            self.location = location
        }
    }

    /// The `<file name>`: a relative path of '/'-separated names, never absolute and
    /// never holding `.` or `..` (RFC 5854 section 4.1.2.1); callers wanting a single
    /// file name take its last component.
    public var name: String
    /// `<size>` in bytes, if the document gives it.
    public var size: Int64?
    /// The whole file's SHA-256 (`<hash type="sha-256">`), 64 lowercase hexadecimal digits.
    public var sha256: String?
    /// The `<pieces type="sha-256">` hashes, if given (they require `size`).
    public var pieces: Pieces?
    /// The http/https URLs, best first: by priority, then in document order; at most
    /// `MetalinkLimits.maxSources`.
    public var sources: [Source]

    public init(name: String, size: Int64? = nil, sha256: String? = nil, pieces: Pieces? = nil, sources: [Source]) {
        self.name = name
        self.size = size
        self.sha256 = sha256
        self.pieces = pieces
        self.sources = sources
    }

    /// The URLs alone, best first.
    public var urls: [String] { sources.map(\.url) }

    /// The last name of `name` (what a destination directory gets as the file's name).
    public var fileName: String {
        name.split(separator: "/").last.map(String.init) ?? name
    }
}

/// Why a Metalink document was refused: a sentence for the user, naming what is wrong
/// (never echoing more than a short excerpt of the document).
public struct MetalinkError: Error, Sendable, Equatable, CustomStringConvertible, Codable {
    public enum Kind: String, Sendable, Equatable, Codable {
        /// Over `MetalinkLimits.maxDocumentBytes`.
        case tooLarge
        /// A DOCTYPE, entity or other markup declaration.
        case declarations
        /// Not well-formed XML, or not a Metalink 4 document.
        case malformed
        /// Well-formed Metalink whose values are wrong (hex, sizes, pieces, URLs, files).
        case invalidValue
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// Limits the daemon and the reader share.
public enum MetalinkLimits {
    /// The largest document fetched and read: 4 MiB.
    public static let maxDocumentBytes = 4 * 1024 * 1024
    /// The most URLs kept from a document.
    public static let maxSources = 16
    /// The largest `<size>` or piece length accepted: 1 PiB.
    public static let maxSize: Int64 = 1 << 50
    /// The longest URL kept (as Ferry's own URL limit).
    public static let maxURLBytes = 64 * 1024
    /// The highest `<url priority>`.
    public static let maxPriority = 999_999
    /// The longest refusal message taken from a reader.
    public static let maxMessageCharacters = 1000
}

extension Metalink {
    /// Why this is not what the parser gives, or nil: ferryd checks a reader's answer
    /// again, so that a reader that went wrong (a flaw a document found in the parser)
    /// can make it use nothing it could not have read: a name that is a path out of the
    /// folder, no URL, pieces that do not cover the size, a size past 1 PiB.
    public var problem: String? {
        if let p = Self.nameProblem(name) { return "a file name that \(p)" }
        if let size, !(0...MetalinkLimits.maxSize).contains(size) { return "a size of \(size) bytes" }
        if let sha256, !Self.isLowercaseDigest(sha256) { return "a sha-256 that is not 64 lowercase hexadecimal digits" }
        if let pieces {
            guard let size else { return "pieces but no size" }
            guard (1...MetalinkLimits.maxSize).contains(pieces.length) else { return "pieces of \(pieces.length) bytes" }
            let expected = Pieces.count(size: size, length: pieces.length)
            guard expected > 0, Int64(pieces.sha256.count) == expected else { return "\(pieces.sha256.count) piece hashes for \(expected) pieces" }
            guard pieces.sha256.allSatisfy(Self.isLowercaseDigest) else { return "a piece hash that is not 64 lowercase hexadecimal digits" }
        }
        guard (1...MetalinkLimits.maxSources).contains(sources.count) else { return "\(sources.count) URLs" }
        for source in sources {
            guard Self.usableURL(source.url) != nil else { return "a URL that is not an http or https URL" }
            if let priority = source.priority, !(1...MetalinkLimits.maxPriority).contains(priority) { return "a priority of \(priority)" }
            if let location = source.location,
               location.count > 81 || location.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                return "a location that is not a short line of text"
            }
        }
        return nil
    }

    /// Why a `<file name>` is refused, or nil.
    public static func nameProblem(_ name: String) -> String? {
        if name.isEmpty { return "is empty" }
        if name.utf8.count > 4096 { return "is longer than 4096 bytes" }
        if name.hasPrefix("/") { return "is an absolute path" }
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { return "holds control characters" }
        let names = name.split(separator: "/", omittingEmptySubsequences: false)
        if names.contains(where: { $0 == "." || $0 == ".." || $0.isEmpty }) { return "holds an empty, '.' or '..' name" }
        if names.contains(where: { $0.utf8.count > 255 }) { return "holds a name longer than 255 bytes" }
        return nil
    }

    /// An http or https URL with a host, or nil (other schemes and broken URLs are dropped).
    public static func usableURL(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= MetalinkLimits.maxURLBytes,
              !text.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }),
              let components = URLComponents(string: text),
              let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = components.host, !host.isEmpty else { return nil }
        return text
    }

    static func isLowercaseDigest(_ s: String) -> Bool {
        s.utf8.count == 64 && s.utf8.allSatisfy { c in (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) }
    }
}

/// What `ferry-metalink-reader` (the process ferryd has read each fetched document, so
/// that the XML parser and its libraries never run inside the daemon) writes to its
/// standard output, as JSON: the document read, or why it was refused.
public enum MetalinkReadOutcome: Sendable, Equatable, Codable {
    case read(Metalink)
    case refused(MetalinkError)
}
