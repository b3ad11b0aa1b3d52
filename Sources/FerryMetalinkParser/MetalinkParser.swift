import FerryMetalink
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// Reads a Metalink 4 document (RFC 5854) with Foundation's `XMLParser` (libxml2) into a
/// `Metalink`, refusing what a hostile server could use against ferryd.
///
/// Refused, each with a `MetalinkError` saying why:
/// - a document over `maxDocumentBytes` (4 MiB);
/// - any markup declaration — `<!DOCTYPE`, `<!ENTITY`, `<!ELEMENT`, `<!ATTLIST`,
///   `<!NOTATION` — found before parsing and again through the parser's callbacks, so
///   neither an entity expansion ("billion laughs") nor an external entity or DTD is
///   ever read (external entities are also off in the parser); Metalink needs none;
/// - a document not in UTF-8 (or US-ASCII), so the check above sees what the parser sees;
/// - XML that is not well-formed, or whose root is not `<metalink>` in the Metalink 4
///   namespace (Metalink 3 documents are named as such);
/// - more than one `<file>`, or none: a Ferry transfer is one file, and choosing one of
///   several by guess would download something the user did not name;
/// - a file name that is absolute or holds `.`/`..` names or control characters;
/// - a `<size>` that is not a whole number of bytes up to `maxSize` (1 PiB);
/// - a `sha-256` `<hash>` that is not 64 hexadecimal digits, or two that differ;
/// - `sha-256` `<pieces>` whose length is not a positive number, whose hashes are not
///   64 hexadecimal digits, whose count is not size / length rounded up, or without a
///   `<size>` to check that against;
/// - a `<url priority>` that is not a number from 1 to 999999;
/// - no http or https `<url>` at all.
///
/// Kept: URLs of other schemes (ftp, …) and URLs that are not valid http(s) URLs are
/// dropped; of the rest the best `maxSources` (16) are kept, by priority (lowest number
/// first; URLs without one last) and then document order. Hashes of other types and
/// pieces of other types are ignored; so are unknown elements and attributes.
public enum MetalinkParser {
    /// The largest document read (and fetched).
    public static let maxDocumentBytes = MetalinkLimits.maxDocumentBytes
    /// The most URLs kept from a document.
    public static let maxSources = MetalinkLimits.maxSources
    /// The largest `<size>` or piece length accepted: 1 PiB.
    public static let maxSize: Int64 = MetalinkLimits.maxSize
    /// The longest URL kept (as Ferry's own URL limit).
    public static let maxURLBytes = MetalinkLimits.maxURLBytes
    /// The namespace of Metalink 4 elements.
    public static let namespace = "urn:ietf:params:xml:ns:metalink"
    /// The namespace of Metalink 3 (not supported; named in the error).
    static let metalink3Namespace = "http://www.metalinker.org/"

    public static func parse(_ data: Data) throws -> Metalink {
        guard data.count <= maxDocumentBytes else {
            throw MetalinkError(.tooLarge, "the Metalink document is \(data.count) bytes; at most \(maxDocumentBytes) (4 MiB) are read")
        }
        try checkBeforeParsing(data)
        return try parseSkippingByteCheck(data)
    }

    /// The parse alone (the tests use it to show the parser's callbacks refuse
    /// declarations too).
    static func parseSkippingByteCheck(_ data: Data) throws -> Metalink {
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.shouldResolveExternalEntities = false
        parser.shouldProcessNamespaces = true
        parser.shouldReportNamespacePrefixes = false
        parser.delegate = reader
        let parsed = parser.parse()
        if let refusal = reader.refusal { throw refusal }
        guard parsed else {
            throw MetalinkError(.malformed, "the Metalink document is not well-formed XML (near line \(parser.lineNumber), column \(parser.columnNumber))")
        }
        return try reader.result()
    }

    /// The checks made on the bytes: UTF-8 (or ASCII) only, and no markup declaration.
    static func checkBeforeParsing(_ data: Data) throws {
        let bytes = [UInt8](data)
        if bytes.count >= 2, (bytes[0] == 0xFE && bytes[1] == 0xFF) || (bytes[0] == 0xFF && bytes[1] == 0xFE) {
            throw MetalinkError(.malformed, "the Metalink document is in UTF-16; only UTF-8 documents are read")
        }
        if bytes.contains(0) {
            throw MetalinkError(.malformed, "the Metalink document holds NUL bytes; only UTF-8 documents are read")
        }
        // `<!` followed by a letter starts a markup declaration (`<!DOCTYPE`, `<!ENTITY`,
        // …); comments (`<!--`) and CDATA sections (`<![CDATA[`) do not. A declaration
        // inside a comment is refused as well: cheaper than knowing where comments end,
        // and no real Metalink document has one.
        var i = 0
        while i + 2 < bytes.count {
            if bytes[i] == UInt8(ascii: "<"), bytes[i + 1] == UInt8(ascii: "!") {
                let c = bytes[i + 2]
                if (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) {
                    let word = String(decoding: bytes[(i + 2)..<min(bytes.count, i + 10)].prefix { $0 >= 0x41 }, as: UTF8.self)
                    throw MetalinkError(.declarations, "the Metalink document has a <!\(word) declaration; DTDs and entities are refused (Metalink needs none)")
                }
            }
            i += 1
        }
        if let encoding = declaredEncoding(bytes) {
            let lower = encoding.lowercased()
            guard ["utf-8", "utf8", "us-ascii", "ascii"].contains(lower) else {
                let shown = encoding.count > 40 ? String(encoding.prefix(40)) + "…" : encoding
                throw MetalinkError(.malformed, "the Metalink document declares encoding '\(shown)'; only UTF-8 documents are read")
            }
        }
    }

    /// The `encoding` of the XML declaration (`<?xml … encoding="…"?>`) at the very start.
    static func declaredEncoding(_ bytes: [UInt8]) -> String? {
        var start = 0
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { start = 3 }
        let head = bytes[start...]
        guard head.starts(with: Array("<?xml".utf8)) else { return nil }
        guard let end = head.indices.first(where: { head[$0] == UInt8(ascii: ">") }) else { return nil }
        let declaration = String(decoding: head[head.startIndex..<end], as: UTF8.self)
        guard let range = declaration.range(of: "encoding") else { return nil }
        var rest = declaration[range.upperBound...].drop { $0 == " " || $0 == "=" || $0 == "\t" }
        guard let quote = rest.first, quote == "\"" || quote == "'" else { return nil }
        rest = rest.dropFirst()
        return String(rest.prefix { $0 != quote })
    }

    static func isHexDigest(_ s: String) -> Bool {
        s.utf8.count == 64 && s.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46)
        }
    }

    static func excerpt(_ s: String) -> String {
        let flat = s.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : String($0) }.joined()
        return flat.count > 80 ? String(flat.prefix(80)) + "…" : flat
    }

    /// A whole number of bytes, 0…`maxSize` (or 1…`maxSize`).
    static func byteCount(_ text: String, what: String, allowZero: Bool) throws -> Int64 {
        let t = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !t.isEmpty, t.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), t.utf8.count <= 20,
              let n = Int64(t), n <= maxSize, allowZero || n > 0 else {
            let least = allowZero ? 0 : 1
            throw MetalinkError(.invalidValue, "the Metalink \(what) '\(excerpt(t))' is not a number of bytes from \(least) to \(maxSize) (1 PiB)")
        }
        return n
    }
}

/// The parser's delegate: follows the elements of the Metalink namespace and collects
/// the values, stopping the parser at the first refusal.
private final class Reader: NSObject, XMLParserDelegate {
    enum Element { case metalink, file, size, hash, pieces, pieceHash, url, other }

    struct PiecesDraft { var length: Int64; var hashes: [String] }
    struct URLDraft { var url: String; var priority: Int?; var location: String?; var order: Int }

    var refusal: MetalinkError?
    var stack: [Element] = []
    var sawRoot = false
    var rootEnded = false
    var files = 0
    var name: String?
    var size: Int64?
    var sha256: String?
    var pieces: PiecesDraft?
    /// True while inside a `<pieces>` of type sha-256 (other types are skipped).
    var inSHA256Pieces = false
    var urls: [URLDraft] = []
    var urlCount = 0
    var pendingHashType: String?
    var pendingURL: (priority: Int?, location: String?)?
    var text = ""

    func refuse(_ parser: XMLParser, _ error: MetalinkError) {
        if refusal == nil { refusal = error }
        parser.abortParsing()
    }

    func refuseDeclaration(_ parser: XMLParser, _ what: String) {
        refuse(parser, MetalinkError(.declarations, "the Metalink document declares \(what); DTDs and entities are refused (Metalink needs none)"))
    }

    // Markup declarations: refused should any reach the parser past the byte check.
    func parser(_ parser: XMLParser, foundElementDeclarationWithName elementName: String, model: String) {
        refuseDeclaration(parser, "an element")
    }
    func parser(_ parser: XMLParser, foundAttributeDeclarationWithName attributeName: String, forElement elementName: String, type: String?, defaultValue: String?) {
        refuseDeclaration(parser, "an attribute list")
    }
    func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
        refuseDeclaration(parser, "an entity")
    }
    func parser(_ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?) {
        refuseDeclaration(parser, "an external entity")
    }
    func parser(_ parser: XMLParser, foundUnparsedEntityDeclarationWithName name: String, publicID: String?, systemID: String?, notationName: String?) {
        refuseDeclaration(parser, "an unparsed entity")
    }
    func parser(_ parser: XMLParser, foundNotationDeclarationWithName name: String, publicID: String?, systemID: String?) {
        refuseDeclaration(parser, "a notation")
    }
    func parser(_ parser: XMLParser, resolveExternalEntityName name: String, systemID: String?) -> Data? {
        refuse(parser, MetalinkError(.declarations, "the Metalink document refers to the entity '&\(MetalinkParser.excerpt(name));'; entities are refused (Metalink needs none)"))
        return nil
    }

    func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                qualifiedName qName: String?, attributes: [String: String] = [:]) {
        guard refusal == nil else { return }
        let ours = namespaceURI == MetalinkParser.namespace
        guard sawRoot else {
            sawRoot = true
            if namespaceURI == MetalinkParser.metalink3Namespace {
                return refuse(parser, MetalinkError(.malformed, "this is a Metalink 3 document; Ferry reads Metalink 4 (RFC 5854, .meta4)"))
            }
            guard ours, elementName == "metalink" else {
                return refuse(parser, MetalinkError(.malformed, "the document is not Metalink 4: its root is <\(MetalinkParser.excerpt(elementName))>, not <metalink xmlns=\"\(MetalinkParser.namespace)\">"))
            }
            stack.append(.metalink)
            return
        }
        let parent = stack.last ?? .other
        var element = Element.other
        if ours {
            switch (parent, elementName) {
            case (.metalink, "file"):
                element = .file
                files += 1
                guard files == 1 else {
                    return refuse(parser, MetalinkError(.invalidValue, "the Metalink document describes more than one file; a Ferry transfer is one file, so give a document with one <file>"))
                }
                guard let raw = attributes["name"] else {
                    return refuse(parser, MetalinkError(.invalidValue, "the Metalink <file> has no name"))
                }
                if let problem = Metalink.nameProblem(raw) {
                    return refuse(parser, MetalinkError(.invalidValue, "the Metalink file name '\(MetalinkParser.excerpt(raw))' \(problem)"))
                }
                name = raw
            case (.file, "size"):
                element = .size
            case (.file, "hash"):
                element = .hash
                pendingHashType = attributes["type"]?.lowercased()
            case (.file, "pieces"):
                element = .pieces
                inSHA256Pieces = attributes["type"]?.lowercased() == "sha-256"
                if inSHA256Pieces {
                    guard pieces == nil else {
                        return refuse(parser, MetalinkError(.invalidValue, "the Metalink file has two sha-256 <pieces>"))
                    }
                    do {
                        let length = try MetalinkParser.byteCount(attributes["length"] ?? "", what: "piece length", allowZero: false)
                        pieces = PiecesDraft(length: length, hashes: [])
                    } catch let e as MetalinkError { return refuse(parser, e) } catch { return }
                }
            case (.pieces, "hash"):
                element = .pieceHash
            case (.file, "url"):
                element = .url
                var priority: Int?
                if let p = attributes["priority"] {
                    let t = p.trimmingCharacters(in: .whitespaces)
                    guard t.utf8.count <= 6, t.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(t), (1...MetalinkLimits.maxPriority).contains(n) else {
                        return refuse(parser, MetalinkError(.invalidValue, "the Metalink <url> priority '\(MetalinkParser.excerpt(p))' is not a number from 1 to 999999"))
                    }
                    priority = n
                }
                pendingURL = (priority, attributes["location"].map(MetalinkParser.excerpt))
            default:
                element = .other
            }
        }
        stack.append(element)
        text = ""
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        guard refusal == nil else { return }
        switch stack.last {
        case .size, .hash, .pieceHash, .url: text += string
        default: break
        }
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        self.parser(parser, foundCharacters: String(decoding: CDATABlock, as: UTF8.self))
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?) {
        guard refusal == nil, let element = stack.popLast() else { return }
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        text = ""
        do {
            switch element {
            case .size:
                let n = try MetalinkParser.byteCount(value, what: "size", allowZero: true)
                if let size, size != n {
                    throw MetalinkError(.invalidValue, "the Metalink file has two different sizes (\(size) and \(n))")
                }
                size = n
            case .hash:
                guard pendingHashType == "sha-256" else { break }
                guard MetalinkParser.isHexDigest(value) else {
                    throw MetalinkError(.invalidValue, "the Metalink sha-256 hash '\(MetalinkParser.excerpt(value))' is not 64 hexadecimal digits")
                }
                let digest = value.lowercased()
                if let sha256, sha256 != digest {
                    throw MetalinkError(.invalidValue, "the Metalink file has two different sha-256 hashes")
                }
                sha256 = digest
            case .pieceHash:
                guard inSHA256Pieces else { break }
                guard MetalinkParser.isHexDigest(value) else {
                    let index = pieces?.hashes.count ?? 0
                    throw MetalinkError(.invalidValue, "the Metalink sha-256 hash of piece \(index) '\(MetalinkParser.excerpt(value))' is not 64 hexadecimal digits")
                }
                pieces?.hashes.append(value.lowercased())
            case .pieces:
                inSHA256Pieces = false
            case .metalink:
                rootEnded = true
            case .url:
                defer { pendingURL = nil }
                urlCount += 1
                guard let usable = Metalink.usableURL(value) else { break }
                urls.append(URLDraft(url: usable, priority: pendingURL?.priority, location: pendingURL?.location, order: urlCount))
            default:
                break
            }
        } catch let e as MetalinkError {
            refuse(parser, e)
        } catch {}
    }

    func parser(_ parser: XMLParser, parseErrorOccurred parseError: Error) {
        // The caller reports the parser's failure with its line and column.
    }

    func result() throws -> Metalink {
        guard sawRoot else {
            throw MetalinkError(.malformed, "the Metalink document is empty")
        }
        guard rootEnded else {
            throw MetalinkError(.malformed, "the Metalink document ends before its </metalink>")
        }
        guard files == 1, let name else {
            throw MetalinkError(.invalidValue, "the Metalink document describes no <file>")
        }
        var checkedPieces: Metalink.Pieces?
        if let pieces {
            guard let size else {
                throw MetalinkError(.invalidValue, "the Metalink file gives <pieces> but no <size> to check them against")
            }
            let expected = Metalink.Pieces.count(size: size, length: pieces.length)
            guard Int64(pieces.hashes.count) == expected else {
                throw MetalinkError(.invalidValue, "the Metalink file has \(pieces.hashes.count) piece hashes; \(size) bytes in pieces of \(pieces.length) make \(expected)")
            }
            if expected > 0 { checkedPieces = Metalink.Pieces(length: pieces.length, sha256: pieces.hashes) }
        }
        guard !urls.isEmpty else {
            let seen = urlCount == 0 ? "no <url>" : "no http or https <url> (of \(urlCount))"
            throw MetalinkError(.invalidValue, "the Metalink file has \(seen); Ferry fetches over http and https only")
        }
        let ordered = urls.sorted { a, b in
            let pa = a.priority ?? Int.max, pb = b.priority ?? Int.max
            return pa != pb ? pa < pb : a.order < b.order
        }
        let sources = ordered.prefix(MetalinkParser.maxSources).map {
            Metalink.Source(url: $0.url, priority: $0.priority, location: $0.location)
        }
        return Metalink(name: name, size: size, sha256: sha256, pieces: checkedPieces, sources: Array(sources))
    }

}
