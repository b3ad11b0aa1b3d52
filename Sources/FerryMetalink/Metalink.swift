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
    /// `MetalinkParser.maxSources` (in FerryMetalinkParser).
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
        /// Over `MetalinkParser.maxDocumentBytes`.
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
}

/// What `ferry-metalink-reader` (the process ferryd has read each fetched document, so
/// that the XML parser and its libraries never run inside the daemon) writes to its
/// standard output, as JSON: the document read, or why it was refused.
public enum MetalinkReadOutcome: Sendable, Equatable, Codable {
    case read(Metalink)
    case refused(MetalinkError)
}
