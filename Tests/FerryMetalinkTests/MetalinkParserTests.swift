import Foundation
import XCTest
import FerryMetalink
@testable import FerryMetalinkParser

final class MetalinkParserTests: XCTestCase {
    let a = String(repeating: "a", count: 64)
    let b = String(repeating: "b", count: 64)
    let c = String(repeating: "C", count: 64)

    func document(_ fileBody: String, name: String = "ubuntu.iso", prolog: String = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>") -> Data {
        Data("""
        \(prolog)
        <metalink xmlns="urn:ietf:params:xml:ns:metalink">
          <published>2026-01-01T00:00:00Z</published>
          <file name="\(name)">
        \(fileBody)
          </file>
        </metalink>
        """.utf8)
    }

    func refusal(_ data: Data, file: StaticString = #filePath, line: UInt = #line) -> MetalinkError? {
        do {
            let m = try MetalinkParser.parse(data)
            XCTFail("parsed a document that should be refused: \(m)", file: file, line: line)
            return nil
        } catch let e as MetalinkError {
            return e
        } catch {
            XCTFail("unexpected error \(error)", file: file, line: line)
            return nil
        }
    }

    // MARK: good documents

    func testFullDocumentGivesSizeHashPiecesAndURLsByPriority() throws {
        let m = try MetalinkParser.parse(document("""
            <size>2500</size>
            <identity>Ubuntu</identity>
            <hash type="md5">0123456789abcdef0123456789abcdef</hash>
            <hash type="sha-256">\(c)</hash>
            <pieces length="1000" type="sha-1"><hash>ffff</hash></pieces>
            <pieces length="1000" type="sha-256">
              <hash>\(a)</hash>
              <hash>\(b)</hash>
              <hash>\(c)</hash>
            </pieces>
            <url location="de" priority="3">http://three.example/u.iso</url>
            <url priority="1">https://one.example/u.iso</url>
            <url>http://none.example/u.iso</url>
            <url priority="2">ftp://two.example/u.iso</url>
            <url priority="2">http://two.example/u.iso?a=1&amp;b=2</url>
            <metaurl mediatype="torrent">http://t.example/u.torrent</metaurl>
            <other:thing xmlns:other="urn:example"><url>http://hidden.example/</url></other:thing>
        """))
        XCTAssertEqual(m.name, "ubuntu.iso")
        XCTAssertEqual(m.size, 2500)
        XCTAssertEqual(m.sha256, c.lowercased())
        XCTAssertEqual(m.pieces, Metalink.Pieces(length: 1000, sha256: [a, b, c.lowercased()]))
        XCTAssertEqual(m.urls, ["https://one.example/u.iso", "http://two.example/u.iso?a=1&b=2",
                                "http://three.example/u.iso", "http://none.example/u.iso"])
        XCTAssertEqual(m.sources[2].location, "de")
        XCTAssertNil(m.sources[3].priority)
    }

    func testMinimalDocumentHasOnlyAURL() throws {
        let m = try MetalinkParser.parse(document("<url>http://x.example/f</url>", name: "dir/f.bin", prolog: ""))
        XCTAssertEqual(m.name, "dir/f.bin")
        XCTAssertEqual(m.fileName, "f.bin")
        XCTAssertNil(m.size)
        XCTAssertNil(m.sha256)
        XCTAssertNil(m.pieces)
        XCTAssertEqual(m.urls, ["http://x.example/f"])
    }

    func testURLsAreLimitedToTheBestSixteen() throws {
        var body = ""
        for i in (1...40).reversed() { body += "<url priority=\"\(i)\">http://m\(i).example/f</url>\n" }
        let m = try MetalinkParser.parse(document(body))
        XCTAssertEqual(m.urls, (1...16).map { "http://m\($0).example/f" })
    }

    func testCommentsAndCDATAAreFine() throws {
        let m = try MetalinkParser.parse(document("<!-- a mirror list --><url><![CDATA[http://x.example/f?a&b]]></url>"))
        XCTAssertEqual(m.urls, ["http://x.example/f?a&b"])
    }

    func testEmptyFileNeedsNoPieces() throws {
        let m = try MetalinkParser.parse(document("<size>0</size><pieces length=\"1024\" type=\"sha-256\"></pieces><url>http://x.example/f</url>"))
        XCTAssertEqual(m.size, 0)
        XCTAssertNil(m.pieces)
    }

    // MARK: hostile and broken documents

    func testBillionLaughsIsRefusedAsDeclaration() {
        var entities = "<!ENTITY lol0 \"lol\">"
        for i in 1...9 { entities += "<!ENTITY lol\(i) \"" + String(repeating: "&lol\(i - 1);", count: 10) + "\">" }
        let data = Data("""
        <?xml version="1.0"?>
        <!DOCTYPE metalink [\(entities)]>
        <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="f"><url>http://x.example/&lol9;</url></file></metalink>
        """.utf8)
        let e = refusal(data)
        XCTAssertEqual(e?.kind, .declarations)
        XCTAssertTrue(e?.message.contains("DOCTYPE") ?? false, e?.message ?? "")
    }

    func testExternalEntityAndDTDAreRefused() {
        for prolog in ["<!DOCTYPE metalink SYSTEM \"file:///etc/passwd\">",
                       "<!DOCTYPE metalink [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>",
                       "<?xml version=\"1.0\"?>\n<!ENTITY x \"y\">"] {
            XCTAssertEqual(refusal(document("<url>http://x.example/f</url>", prolog: prolog))?.kind, .declarations, prolog)
        }
    }

    func testDeclarationCallbacksRefuseOnTheirOwn() {
        // The byte check comes first; the parser's callbacks are the second guard.
        let data = Data("<?xml version=\"1.0\"?><!DOCTYPE m [<!ELEMENT metalink ANY>]><metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"/>".utf8)
        let reader = XMLParserProbe.refusalThroughCallbacks(data)
        XCTAssertEqual(reader?.kind, .declarations)
    }

    func testOversizeDocumentIsRefusedBeforeParsing() {
        let padding = String(repeating: " ", count: MetalinkParser.maxDocumentBytes)
        let e = refusal(document("<url>http://x.example/f</url>" + padding))
        XCTAssertEqual(e?.kind, .tooLarge)
    }

    func testOtherEncodingsAreRefused() {
        XCTAssertEqual(refusal(document("<url>http://x.example/f</url>", prolog: "<?xml version=\"1.0\" encoding=\"UTF-7\"?>"))?.kind, .malformed)
        var utf16 = Data([0xFF, 0xFE])
        utf16.append("<metalink/>".data(using: .utf16LittleEndian)!)
        XCTAssertEqual(refusal(utf16)?.kind, .malformed)
    }

    func testNotWellFormedOrNotMetalink4() {
        XCTAssertEqual(refusal(Data("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file name=\"f\">".utf8))?.kind, .malformed)
        XCTAssertEqual(refusal(Data())?.kind, .malformed)
        XCTAssertEqual(refusal(Data("<html><body>Not found</body></html>".utf8))?.kind, .malformed)
        let v3 = refusal(Data("<metalink version=\"3.0\" xmlns=\"http://www.metalinker.org/\"><files/></metalink>".utf8))
        XCTAssertTrue(v3?.message.contains("Metalink 3") ?? false)
        // An entity reference without a declaration is refused too.
        XCTAssertEqual(refusal(document("<url>http://x.example/&evil;</url>"))?.kind, .declarations)
    }

    func testBadHashes() {
        for bad in [String(a.dropLast()), String(a.dropLast()) + "g", a + "a", ""] {
            XCTAssertEqual(refusal(document("<hash type=\"sha-256\">\(bad)</hash><url>http://x.example/f</url>"))?.kind, .invalidValue, bad)
            XCTAssertEqual(refusal(document("<size>5</size><pieces length=\"8\" type=\"sha-256\"><hash>\(bad)</hash></pieces><url>http://x.example/f</url>"))?.kind, .invalidValue, bad)
        }
        XCTAssertEqual(refusal(document("<hash type=\"sha-256\">\(a)</hash><hash type=\"sha-256\">\(b)</hash><url>http://x.example/f</url>"))?.kind, .invalidValue)
    }

    func testBadSizes() {
        for bad in ["-1", "1e9", "", "12 34", "0x10", "\(MetalinkParser.maxSize + 1)", "99999999999999999999999"] {
            let e = refusal(document("<size>\(bad)</size><url>http://x.example/f</url>"))
            XCTAssertEqual(e?.kind, .invalidValue, bad)
        }
        XCTAssertEqual(refusal(document("<size>1</size><size>2</size><url>http://x.example/f</url>"))?.kind, .invalidValue)
    }

    func testPieceCountMustMatchSizeAndLength() {
        // 2500 bytes in 1000-byte pieces make 3 pieces.
        for count in [2, 4] {
            let hashes = String(repeating: "<hash>\(a)</hash>", count: count)
            let e = refusal(document("<size>2500</size><pieces length=\"1000\" type=\"sha-256\">\(hashes)</pieces><url>http://x.example/f</url>"))
            XCTAssertEqual(e?.kind, .invalidValue)
            XCTAssertTrue(e?.message.contains("make 3") ?? false, e?.message ?? "")
        }
        for length in ["0", "-5", "x", ""] {
            XCTAssertEqual(refusal(document("<size>1</size><pieces length=\"\(length)\" type=\"sha-256\"><hash>\(a)</hash></pieces><url>http://x.example/f</url>"))?.kind, .invalidValue, length)
        }
        XCTAssertEqual(refusal(document("<pieces length=\"10\" type=\"sha-256\"><hash>\(a)</hash></pieces><url>http://x.example/f</url>"))?.kind, .invalidValue)
    }

    func testFilesNamesAndURLs() {
        let two = Data("""
        <metalink xmlns="urn:ietf:params:xml:ns:metalink">
          <file name="a"><url>http://x.example/a</url></file>
          <file name="b"><url>http://x.example/b</url></file>
        </metalink>
        """.utf8)
        XCTAssertTrue(refusal(two)?.message.contains("more than one file") ?? false)
        XCTAssertEqual(refusal(Data("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"/>".utf8))?.kind, .invalidValue)
        for name in ["../etc/passwd", "/etc/passwd", "a/../../b", "", "a//b", "a\u{7F}b"] {
            XCTAssertEqual(refusal(document("<url>http://x.example/f</url>", name: name))?.kind, .invalidValue, name)
        }
        XCTAssertTrue(refusal(document("<url>ftp://x.example/f</url><url>file:///etc/passwd</url>"))?.message.contains("no http or https") ?? false)
        XCTAssertEqual(refusal(document("<url priority=\"0\">http://x.example/f</url>"))?.kind, .invalidValue)
        XCTAssertEqual(refusal(document("<url priority=\"first\">http://x.example/f</url>"))?.kind, .invalidValue)
    }
}

/// Runs only the parser's callbacks, without the byte check, to show they refuse too.
enum XMLParserProbe {
    static func refusalThroughCallbacks(_ data: Data) -> MetalinkError? {
        do {
            _ = try MetalinkParser.parseSkippingByteCheck(data)
            return nil
        } catch let e as MetalinkError {
            return e
        } catch {
            return nil
        }
    }
}
