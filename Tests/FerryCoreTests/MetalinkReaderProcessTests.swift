import FerryCore
import FerryMetalink
import FerryTestSupport
import Foundation
import XCTest

/// ferryd reads each fetched Metalink document in `ferry-metalink-reader`, a process of
/// its own (`MetalinkReadQueue`): what it read comes back whole, what it refused comes back
/// with its reason, and a reader that is missing, hangs, dies or says too much fails the
/// document with a sentence saying so, never the daemon.
final class MetalinkReaderProcessTests: XCTestCase {
    var folder = ""

    override func setUpWithError() throws {
        signal(SIGPIPE, SIG_IGN) // as ferryd has it: a reader may die before it has the whole document
        folder = NSTemporaryDirectory() + "ferry-reader-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// The built reader (`$FERRY_METALINK_READER_PATH`, else beside the test bundle).
    let builtReader = BuiltProducts.locate(MetalinkReadQueue.readerName, variable: "FERRY_METALINK_READER_PATH",
                                           besideBundleOf: MetalinkReaderProcessTests.self)

    /// A stand-in reader: a shell script.
    func script(_ body: String) throws -> String {
        let path = folder + "/reader-\(UUID().uuidString).sh"
        try ("#!/bin/sh\n" + body + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o755)
        return path
    }

    func read(_ data: Data, with reader: MetalinkReadQueue) -> Result<Metalink, MetalinkError> {
        let done = expectation(description: "read")
        nonisolated(unsafe) var outcome: Result<Metalink, MetalinkError>?
        reader.read(data) { result in
            outcome = result
            done.fulfill()
        }
        wait(for: [done], timeout: 60)
        return outcome ?? .failure(MetalinkError(.malformed, "no answer"))
    }

    func failure(_ r: Result<Metalink, MetalinkError>, file: StaticString = #filePath, line: UInt = #line) -> MetalinkError? {
        if case .failure(let e) = r { return e }
        XCTFail("read a document where none should be", file: file, line: line)
        return nil
    }

    func testTheReaderReadsADocumentAndNamesWhatItRefuses() throws {
        guard let builtReader else { return XCTFail("no \(MetalinkReadQueue.readerName) built: `swift build` builds it") }
        let reader = MetalinkReadQueue(reader: builtReader)
        let hashes = (0..<3).map { String(repeating: String($0), count: 64) }
        let good = """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="dir/named.iso"><size>2500</size>
            <hash type="sha-256">\(String(repeating: "a", count: 64))</hash>
            <pieces length="1000" type="sha-256">\(hashes.map { "<hash>\($0)</hash>" }.joined())</pieces>
            <url priority="2" location="de">https://b.example/named.iso</url><url priority="1">https://a.example/named.iso</url>
            </file></metalink>
            """
        guard case .success(let m) = read(Data(good.utf8), with: reader) else { return XCTFail("the document was not read") }
        XCTAssertEqual(m, Metalink(name: "dir/named.iso", size: 2500, sha256: String(repeating: "a", count: 64),
                                   pieces: .init(length: 1000, sha256: hashes),
                                   sources: [.init(url: "https://a.example/named.iso", priority: 1),
                                             .init(url: "https://b.example/named.iso", priority: 2, location: "de")]))

        let entity = #"<?xml version="1.0"?><!DOCTYPE m [<!ENTITY a "aaaa">]><metalink xmlns="urn:ietf:params:xml:ns:metalink"/>"#
        let refused = failure(read(Data(entity.utf8), with: reader))
        XCTAssertEqual(refused?.kind, .declarations)
        XCTAssertTrue(refused?.message.contains("DTDs and entities are refused") == true, refused?.message ?? "")

        let big = failure(read(Data(count: MetalinkLimits.maxDocumentBytes + 10), with: reader))
        XCTAssertEqual(big?.kind, .tooLarge, big?.message ?? "")
    }

    /// Once it has its document the reader can only compute and answer: opening, making a
    /// socket, forking, running a program, signalling another process, mapping executable
    /// memory and changing the disk are refused by its seccomp filter (EPERM; without it the descriptor limit would
    /// say EMFILE to the first two, the missing program ENOENT, and the rest would work).
    /// A large document is still read whole.
    func testTheReaderIsConfinedOnceItHasItsDocument() throws {
        guard let builtReader else { return XCTFail("no \(MetalinkReadQueue.readerName) built: `swift build` builds it") }
        let check = Process()
        check.executableURL = URL(fileURLWithPath: builtReader)
        check.arguments = ["--check-confinement"]
        let out = Pipe()
        check.standardOutput = out
        try check.run()
        let said = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        check.waitUntilExit()
        let lines = said.split(separator: "\n").map(String.init)
        let tried = lines.map { $0.components(separatedBy: ": ")[0] }
        XCTAssertEqual(tried.map { $0.split(separator: " ").first ?? "" },
                       ["open", "socket", "fork", "execve", "kill", "mmap", "mkdir"], said)
        for line in lines { XCTAssertTrue(line.hasSuffix(": refused (\(String(cString: strerror(EPERM))))"), line) }
        XCTAssertEqual(check.terminationStatus, 0, said)

        let pieces = 50_000
        let hash = String(repeating: "c", count: 64)
        let large = """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="large.iso"><size>\(pieces * 1024)</size>
            <pieces length="1024" type="sha-256">\(String(repeating: "<hash>\(hash)</hash>\n", count: pieces))</pieces>
            <url>https://a.example/large.iso</url></file></metalink>
            """
        XCTAssertGreaterThan(large.utf8.count, 3_500_000)
        guard case .success(let m) = read(Data(large.utf8), with: MetalinkReadQueue(reader: builtReader)) else {
            return XCTFail("the large document was not read")
        }
        XCTAssertEqual(m.pieces?.sha256.count, pieces)
    }

    func testAMissingReaderFailsTheDocumentSayingSo() {
        let e = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: nil)))
        XCTAssertTrue(e?.message.contains("ferry-metalink-reader") == true, e?.message ?? "")
        let gone = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: folder + "/nothing-here")))
        XCTAssertTrue(gone?.message.contains("could not be started") == true, gone?.message ?? "")
    }

    func testAReaderThatHangsIsKilledAtItsTimeLimit() throws {
        let started = Date()
        let e = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: try script("exec sleep 600"), timeLimit: 0.5)))
        XCTAssertTrue(e?.message.contains("took more than 0.5 s and was stopped") == true, e?.message ?? "")
        XCTAssertLessThan(Date().timeIntervalSince(started), 30, "killed, not waited for")
    }

    func testAReaderThatDiesOrAnswersNonsenseOrTooMuchIsNotBelieved() throws {
        let dies = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: try script("exit 3"))))
        XCTAssertTrue(dies?.message.contains("ended with status 3;") == true, dies?.message ?? "")
        let says = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(
            reader: try script("printf 'ferry-metalink-reader: cannot read standard input: \\033[1mno\\nsecond line\\n' >&2; exit 1"))))
        XCTAssertTrue(says?.message.contains("ended with status 1 (cannot read standard input: [1mno);") == true,
                      "its first line, without its name or control characters: \(says?.message ?? "")")
        let nonsense = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: try script(#"cat >/dev/null; echo '{"read":{}}'"#))))
        XCTAssertTrue(nonsense?.message.contains("not a reading of a document") == true, nonsense?.message ?? "")
        let flood = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: try script("exec cat /dev/zero"))))
        XCTAssertTrue(flood?.message.contains("more than") == true, flood?.message ?? "")
        let crash = failure(read(Data("<x/>".utf8), with: MetalinkReadQueue(reader: try script("kill -SEGV $$"))))
        XCTAssertTrue(crash?.message.contains("crashed (signal 11)") == true, crash?.message ?? "")
    }

    /// What a reader says is checked as the parser would check it: a document it could
    /// not have read is not used, and a refusal's message is kept to a sentence.
    func testAReaderIsNotBelievedBeyondWhatADocumentCanSay() throws {
        func answering(_ json: String) throws -> MetalinkReadQueue {
            MetalinkReadQueue(reader: try script("cat >/dev/null; printf '%s' '\(json)'"))
        }
        let hash = String(repeating: "a", count: 64)
        let bad = [
            (#"{"read":{"_0":{"name":"f.iso","sources":[]}}}"#, "0 URLs"),
            (#"{"read":{"_0":{"name":"../f.iso","sources":[{"url":"https://a.example/f"}]}}}"#, "a file name that"),
            (#"{"read":{"_0":{"name":"f.iso","sources":[{"url":"file:///etc/passwd"}]}}}"#, "a URL that is not an http or https URL"),
            (#"{"read":{"_0":{"name":"f.iso","size":10,"pieces":{"length":4,"sha256":["\#(hash)"]},"sources":[{"url":"https://a.example/f"}]}}}"#, "1 piece hashes for 3 pieces"),
            (#"{"read":{"_0":{"name":"f.iso","size":-1,"sources":[{"url":"https://a.example/f"}]}}}"#, "a size of -1 bytes"),
        ]
        for (json, problem) in bad {
            let e = failure(read(Data("<x/>".utf8), with: try answering(json)))
            XCTAssertTrue(e?.message.contains("answered with \(problem)") == true, "\(json): \(e?.message ?? "")")
        }
        let fine = #"{"read":{"_0":{"name":"f.iso","size":10,"sources":[{"url":"https://a.example/f","priority":3}]}}}"#
        guard case .success(let m) = read(Data("<x/>".utf8), with: try answering(fine)) else { return XCTFail("a sound answer was refused") }
        XCTAssertEqual(m, Metalink(name: "f.iso", size: 10, sources: [.init(url: "https://a.example/f", priority: 3)]))

        let long = String(repeating: "x", count: 5000)
        let refusal = failure(read(Data("<x/>".utf8), with: try answering(#"{"refused":{"_0":{"kind":"malformed","message":"\#(long)"}}}"#)))
        XCTAssertEqual(refusal?.message.count, MetalinkLimits.maxMessageCharacters + 1)
        XCTAssertEqual(refusal?.kind, .malformed)
    }
}
