import Crypto
import NIOCore

/// A request body the test server received (PUT or POST), hashed as it came.
public struct ReceivedUpload: Sendable {
    /// Bytes in the body.
    public var byteCount: Int
    /// Lowercase hex SHA-256 of the body.
    public var sha256: String
    /// The parts of a `multipart/form-data` body, in order (empty otherwise).
    public var parts: [ReceivedPart]

    /// The part named `name`.
    public func part(_ name: String) -> ReceivedPart? {
        parts.first { $0.name == name }
    }
}

/// One part of a multipart/form-data body.
public struct ReceivedPart: Sendable {
    public var name: String?
    public var fileName: String?
    public var contentType: String?
    public var byteCount: Int
    /// Lowercase hex SHA-256 of the part's content.
    public var sha256: String
    /// The content as text, for small parts (up to 4 KiB of UTF-8).
    public var value: String?
}

/// Hashes a request body as it streams in; parses multipart/form-data on the way
/// (without keeping more than a delimiter's length of it).
final class UploadReceiver {
    private var hasher = SHA256()
    private var count = 0
    private var multipart: MultipartParser?

    init(contentType: String?) {
        if let contentType, contentType.lowercased().hasPrefix("multipart/form-data"),
           let boundary = Self.boundary(contentType) {
            multipart = MultipartParser(boundary: boundary)
        }
    }

    func consume(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { raw in
            hasher.update(bufferPointer: raw)
            count += raw.count
            multipart?.consume(raw)
        }
    }

    func finish() -> ReceivedUpload {
        ReceivedUpload(byteCount: count, sha256: hex(hasher.finalize()), parts: multipart?.finish() ?? [])
    }

    private static func boundary(_ contentType: String) -> String? {
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
            return value.isEmpty ? nil : value
        }
        return nil
    }
}

private func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
    digest.map { String(format: "%02x", $0) }.joined()
}

/// A streaming multipart/form-data parser: part headers, then content up to the next
/// "\r\n--boundary".
struct MultipartParser {
    private enum State { case preamble, headers, content, done }

    private let delimiter: [UInt8]   // "\r\n--boundary"
    private var pending: [UInt8] = [0x0D, 0x0A] // lets the first "--boundary" match like the others
    private var state = State.preamble
    private var parts: [ReceivedPart] = []
    private var current: (part: ReceivedPart, hasher: SHA256, text: [UInt8])?

    init(boundary: String) {
        delimiter = Array("\r\n--\(boundary)".utf8)
    }

    mutating func consume(_ bytes: UnsafeRawBufferPointer) {
        pending.append(contentsOf: bytes)
        process()
    }

    mutating func finish() -> [ReceivedPart] {
        process()
        if state == .content { closePart(with: pending) } // no closing delimiter: keep what came
        return parts
    }

    private mutating func process() {
        var progress = true
        while progress {
            progress = false
            switch state {
            case .preamble:
                if let at = find(delimiter, in: pending, from: 0) {
                    pending.removeFirst(at + delimiter.count)
                    state = .headers
                    progress = true
                }
            case .headers:
                // Either "--" (the end) or "\r\n" then header lines up to "\r\n\r\n".
                if pending.count >= 2 && pending[0] == 0x2D && pending[1] == 0x2D {
                    state = .done
                    pending.removeAll()
                } else if let end = find(Array("\r\n\r\n".utf8), in: pending, from: 0) {
                    let text = String(decoding: pending[0..<end], as: UTF8.self)
                    pending.removeFirst(end + 4)
                    current = (Self.part(fromHeaders: text), SHA256(), [])
                    state = .content
                    progress = true
                }
            case .content:
                if let at = find(delimiter, in: pending, from: 0) {
                    closePart(with: Array(pending[0..<at]))
                    pending.removeFirst(at + delimiter.count)
                    state = .headers
                    progress = true
                } else if pending.count > delimiter.count {
                    // Everything but a possible start of the delimiter is content.
                    let keep = delimiter.count - 1
                    let content = pending.count - keep
                    feed(pending[0..<content])
                    pending.removeFirst(content)
                }
            case .done:
                pending.removeAll()
            }
        }
    }

    private mutating func feed(_ bytes: ArraySlice<UInt8>) {
        guard current != nil else { return }
        bytes.withUnsafeBytes { current!.hasher.update(bufferPointer: $0) }
        current!.part.byteCount += bytes.count
        if current!.text.count <= 4096 { current!.text.append(contentsOf: bytes.prefix(4097 - current!.text.count)) }
    }

    private mutating func closePart(with last: [UInt8]) {
        feed(last[...])
        guard let finished = current else { return }
        var part = finished.part
        part.sha256 = hex(finished.hasher.finalize())
        if finished.text.count <= 4096 { part.value = String(validating: finished.text, as: UTF8.self) }
        parts.append(part)
        current = nil
    }

    private static func part(fromHeaders text: String) -> ReceivedPart {
        var part = ReceivedPart(name: nil, fileName: nil, contentType: nil, byteCount: 0, sha256: "", value: nil)
        for line in text.components(separatedBy: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name == "content-type" { part.contentType = value }
            if name == "content-disposition" {
                for parameter in value.split(separator: ";").dropFirst() {
                    let pair = parameter.split(separator: "=", maxSplits: 1)
                    guard pair.count == 2 else { continue }
                    var v = pair[1].trimmingCharacters(in: .whitespaces)
                    if v.hasPrefix("\""), v.hasSuffix("\""), v.count >= 2 { v = String(v.dropFirst().dropLast()) }
                    switch pair[0].trimmingCharacters(in: .whitespaces).lowercased() {
                    case "name": part.name = v
                    case "filename": part.fileName = v
                    default: break
                    }
                }
            }
        }
        return part
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard needle.count <= haystack.count - start, let first = needle.first else { return nil }
        var i = start
        let last = haystack.count - needle.count
        while i <= last {
            guard let hit = haystack[i...last].firstIndex(of: first) else { return nil }
            if haystack[hit..<(hit + needle.count)].elementsEqual(needle) { return hit }
            i = hit + 1
        }
        return nil
    }
}
