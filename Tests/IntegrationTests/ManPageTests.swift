import FerryTestSupport
import Foundation
import XCTest

/// The man pages against the binaries: every option `--help` lists (ferry's and each
/// subcommand's, ferryd's) appears in its man page, and each page's version is the
/// binary's `--version`. Runs the programs' `--help` only: no bus, no daemon.
final class ManPageTests: XCTestCase {
    static var repository: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    static func manPage(_ name: String) throws -> String {
        let text = try String(contentsOf: repository.appendingPathComponent("desktop/man/\(name)"), encoding: .utf8)
        // roff's "\-" is a plain minus sign here, and font changes ("\fB") are no text.
        var plain = text.replacingOccurrences(of: "\\-", with: "-")
        for font in ["\\fB", "\\fI", "\\fR", "\\fP"] { plain = plain.replacingOccurrences(of: font, with: " ") }
        return plain
    }

    func run(_ path: String, _ args: [String]) throws -> String {
        let r = try ChildProcess.run(path, args, environment: ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()], timeout: 20)
        XCTAssertEqual(r.status, 0, "\(path) \(args): \(r.stderr)")
        return r.stdout
    }

    /// The lines of a `--help` section ("OPTIONS:", "SUBCOMMANDS:") up to the next one.
    static func section(_ name: String, of help: String) -> [String] {
        var lines: [String] = []
        var inside = false
        for line in help.components(separatedBy: "\n") {
            if !line.hasPrefix(" ") && line.hasSuffix(":") { inside = line == name; continue }
            if inside { lines.append(line) }
        }
        return lines
    }

    /// The options a `--help` lists ("-o, --output <FILE>" gives -o and --output),
    /// without -h/--help, which every command has.
    static func options(in help: String) -> Set<String> {
        var found: Set<String> = []
        for line in section("OPTIONS:", of: help) where line.hasPrefix("  -") {
            let spec = line.trimmingCharacters(in: .whitespaces).components(separatedBy: "  ").first ?? ""
            for word in spec.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "/" }) where word.hasPrefix("-") {
                let option = word.prefix { $0 == "-" || $0.isLetter || $0.isNumber }
                if option.count > 1 { found.insert(String(option)) }
            }
        }
        return found.subtracting(["-h", "--help"])
    }

    static func subcommands(in help: String) -> [String] {
        // "  get                     Queue downloads…", "  get (default)  …"; not the
        // "  See 'ferry help <subcommand>' for detailed help." line.
        section("SUBCOMMANDS:", of: help).compactMap { line in
            guard line.hasPrefix("  "), !line.hasPrefix("   "),
                  let name = line.split(separator: " ").first, name.allSatisfy({ $0.isLowercase || $0 == "-" }),
                  name != "help" else { return nil }
            return String(name)
        }
    }

    /// Whether `option` stands in the page as a word of its own (not inside a longer option).
    static func mentions(_ page: String, _ option: String) -> Bool {
        var searchRange = page.startIndex..<page.endIndex
        while let r = page.range(of: option, range: searchRange) {
            let before = r.lowerBound == page.startIndex ? " " : page[page.index(before: r.lowerBound)]
            let after = r.upperBound == page.endIndex ? " " : page[r.upperBound]
            func part(_ c: Character) -> Bool { c.isLetter || c.isNumber || c == "-" }
            if !part(before) && !part(after) { return true }
            searchRange = r.upperBound..<page.endIndex
        }
        return false
    }

    /// The version in a page's `.TH` line (`"Ferry 0.2.0"`).
    static func pageVersion(_ page: String) -> String? {
        guard let th = page.components(separatedBy: "\n").first(where: { $0.hasPrefix(".TH ") }),
              let r = th.range(of: "\"Ferry ") else { return nil }
        return String(th[r.upperBound...].prefix { $0 != "\"" })
    }

    func testFerryManPageListsEveryOptionAndTheVersion() throws {
        guard let ferry = Binaries.ferry else { throw XCTSkip("ferry was not built (FERRY_CLI_PATH)") }
        let page = try Self.manPage("ferry.1")
        var missing: [String] = []
        var commands: [[String]] = [[]]
        var seen = 0
        while seen < commands.count && seen < 60 {
            let command = commands[seen]
            seen += 1
            let help = try run(ferry, command + ["--help"])
            for option in Self.options(in: help).sorted() where !Self.mentions(page, option) {
                missing.append("\((["ferry"] + command).joined(separator: " ")) \(option)")
            }
            commands += Self.subcommands(in: help).map { command + [$0] }
        }
        XCTAssertGreaterThan(seen, 10, "the subcommands were found")
        XCTAssertEqual(missing, [], "options missing from desktop/man/ferry.1")
        let version = try run(ferry, ["--version"]).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Self.pageVersion(page), version, "ferry.1's .TH line names the version ferry --version says")
    }

    func testFerrydManPageListsEveryOptionAndTheVersion() throws {
        guard let ferryd = Binaries.ferryd else { throw XCTSkip("ferryd was not built (FERRYD_PATH)") }
        let page = try Self.manPage("ferryd.8")
        let help = try run(ferryd, ["--help"])
        let options = Self.options(in: help)
        XCTAssertTrue(options.contains("--batch-settle"), "the options were found: \(help)")
        XCTAssertEqual(options.filter { !Self.mentions(page, $0) }.sorted(), [], "options missing from desktop/man/ferryd.8")
        // Each option is in the SYNOPSIS too, not only described.
        let synopsis = page.components(separatedBy: ".SH DESCRIPTION").first ?? ""
        XCTAssertEqual(options.subtracting(["--version"]).filter { !Self.mentions(synopsis, $0) }.sorted(), [],
                       "options missing from ferryd.8's SYNOPSIS")
        let version = try run(ferryd, ["--version"]).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Self.pageVersion(page), version, "ferryd.8's .TH line names the version ferryd --version says")
    }
}
