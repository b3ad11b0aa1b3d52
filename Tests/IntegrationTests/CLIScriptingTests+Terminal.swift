import DBus
import FerryBusClient
import FerryTestSupport
import Foundation
import XCTest

/// The CLI in a real terminal (a pseudo-terminal of a given size): where files go, and progress that fits its columns.
extension CLIScriptingTests {
    /// `ferry get URLS -d DIR --wait EXTRA` in a terminal of `columns` × `rows` (script(1)):
    /// its exit status and what the terminal showed, split into rows, escapes dropped.
    /// `stderr`: a file standard error goes to instead of the terminal.
    func getInTerminal(_ urls: [String], into dir: String, columns: Int = 80, rows: Int = 24,
                       extra: [String] = [], stderr: String? = nil) throws -> (status: Int32, rows: [String], raw: String) {
        guard let script = findExecutable("script") else { throw XCTSkip("no script(1)") }
        let args = (urls + [dir] + extra).map { "'\($0)'" }.joined(separator: " ")
        let n = urls.count
        let urlArgs = (1...n).map { "\"$\($0)\"" }.joined(separator: " ")
        let rest = extra.indices.map { "\"$\($0 + n + 2)\"" }.joined(separator: " ")
        let redirect = stderr.map { " 2>\($0)" } ?? ""
        let command = "stty cols \(columns) rows \(rows); exec \"$0\" get \(urlArgs) -d \"$\(n + 1)\" --wait \(rest)\(redirect)"
        let r = try runTool(script, ["-qfec", "sh -c '\(command)' \(ferryPath!) \(args)", "/dev/null"],
                            environment: environment(), timeout: 30)
        let plain = r.stdout.replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        return (r.status, plain.components(separatedBy: CharacterSet(charactersIn: "\r\n")).filter { !$0.isEmpty }, r.stdout + r.stderr)
    }

    /// `ferry ARGS` in a terminal (script(1)) of 200 columns: its exit status and rows.
    func ferryInTerminal(_ args: [String]) throws -> (status: Int32, rows: [String], raw: String) {
        guard let script = findExecutable("script") else { throw XCTSkip("no script(1)") }
        let quoted = args.map { "'\($0)'" }.joined(separator: " ")
        let r = try runTool(script, ["-qfec", "sh -c 'stty cols 200 rows 24; exec \"$0\" \"$@\"' \(ferryPath!) \(quoted)", "/dev/null"],
                            environment: environment(), timeout: 30)
        let plain = r.stdout.replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        return (r.status, plain.components(separatedBy: CharacterSet(charactersIn: "\r\n")).filter { !$0.isEmpty }, r.stdout + r.stderr)
    }

    /// In a terminal, `get` says what it queued and where it goes, and `get --wait` ends
    /// with the saved file's path (the display cuts names to fit); piped, the bare ids
    /// scripts read are unchanged.
    func testGetInATerminalSaysWhereTheFileGoes() async throws {
        let body = serve("/where/f3.bin", size: 20_000)
        let url = server.url("/where/f3.bin")
        let queued = try ferryInTerminal(["get", url, "-o", work + "/later.bin", "--paused"])
        XCTAssertEqual(queued.status, 0, queued.raw)
        let id = try XCTUnwrap(queued.rows.first?.split(separator: " ").first.flatMap { UInt64($0) }, queued.raw)
        XCTAssertEqual(queued.rows, ["\(id) paused: \(url) -> \(work!)/later.bin"])

        let (status, rows, raw) = try getInTerminal([url], into: work + "/tty")
        XCTAssertEqual(status, 0, raw)
        XCTAssertEqual(rows.last, "\(work!)/tty/f3.bin", "the last line names the saved file: \(rows)")
        assertFile(work + "/tty/f3.bin", equals: body)

        let piped = try ferry(["get", url, "-o", work + "/piped.bin", "--paused"])
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertNotNil(UInt64(piped.stdout.trimmingCharacters(in: .newlines)), "a bare id: \(piped.stdout)")
    }

    /// In an 80-column terminal the display fits: no line wider than 80, a total line, the final state.
    func testProgressInAnEightyColumnTerminal() async throws {
        let long = "/a-rather-long-file-name-that-would-not-fit-in-a-narrow-terminal-at-all-\(String(repeating: "x", count: 40)).bin"
        serve(long, size: 300_000)
        serve("/second.bin", size: 200_000)
        server.set(.slow(bytesPerSecond: 600 * 1024), on: long)
        let (status, rows, raw) = try getInTerminal([server.url(long), server.url("/second.bin")], into: work + "/tty")
        XCTAssertEqual(status, 0, raw)
        XCTAssertFalse(rows.isEmpty, raw.debugDescription)
        // (The saved paths after the display are results, in full.)
        for row in rows where !row.hasPrefix(work) { XCTAssertLessThanOrEqual(row.count, 80, "too wide: \(row)") }
        XCTAssertTrue(rows.contains { $0.hasPrefix("Total:") }, "a total line: \(rows)")
        XCTAssertTrue(rows.last { $0.hasPrefix("Total:") }?.contains("2 completed") ?? false, rows.suffix(4).joined(separator: "\n"))
    }

    /// Wide characters take two columns each: a name in Japanese is cut to the columns
    /// the terminal has, not to as many characters (the lines wrapped, and each redraw
    /// left the last frame's extra rows on the screen).
    func testProgressFitsWideCharactersInTheirColumns() async throws {
        let name = String(repeating: "日本語のファイル名", count: 6) + ".bin"
        let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        serve("/wide.bin", size: 300_000, contentDisposition: "attachment; filename*=UTF-8''\(encoded)")
        server.set(.slow(bytesPerSecond: 600 * 1024), on: "/wide.bin")
        let (status, rows, raw) = try getInTerminal([server.url("/wide.bin")], into: work + "/wide")
        XCTAssertEqual(status, 0, raw)
        func columns(_ s: String) -> Int { s.unicodeScalars.reduce(0) { $0 + ((0x3000...0x9FFF).contains($1.value) ? 2 : 1) } }
        XCTAssertTrue(rows.contains { $0.contains("日本語") }, "the name is shown: \(rows)")
        for row in rows where !row.hasPrefix("\(work!)") { XCTAssertLessThanOrEqual(columns(row), 80, "too wide: \(row)") }
    }

    /// Standard output on a terminal and standard error elsewhere (`2>log`): the results
    /// (the id, the final line) are on the terminal, the progress in the log. The ids
    /// were held back whenever stdout was a terminal, as when the display was drawn there.
    func testResultsOnATerminalWithProgressElsewhere() async throws {
        serve("/split.bin", size: 20_000)
        let log = work + "/progress.log"
        let (status, rows, raw) = try getInTerminal([server.url("/split.bin")], into: work + "/split", stderr: log)
        XCTAssertEqual(status, 0, raw)
        let id = try XCTUnwrap(rows.first.flatMap { UInt64($0) }, "the id first: \(rows)")
        XCTAssertEqual(rows.last, "\(id) completed \(work!)/split/split.bin")
        XCTAssertFalse(rows.contains { $0.contains("Total:") }, "no display on stdout: \(rows)")
        let progress = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(progress.contains("\(id) queued "), progress)
    }

    /// A terminal of 3 rows, or one that does not say its size: transfer lines are shown
    /// beside the total (the display once kept only "… and N more" and the total).
    func testProgressInATinyOrSizelessTerminalShowsTransfers() async throws {
        serve("/tiny/one.bin", size: 20_000)
        serve("/tiny/two.bin", size: 20_000)
        for height in [3, 0] {
            let (status, rows, raw) = try getInTerminal([server.url("/tiny/one.bin"), server.url("/tiny/two.bin")],
                                                        into: work + "/tiny", rows: height, extra: ["--overwrite"])
            XCTAssertEqual(status, 0, raw)
            // The last frame: the lines up to its total.
            let end = try XCTUnwrap(rows.lastIndex { $0.hasPrefix("Total:") }, "\(rows)")
            let last = rows[max(0, end - 2)..<end]
            XCTAssertTrue(last.contains { $0.contains("one.bin") || $0.contains("two.bin") }, "rows \(rows): a transfer line in \(last)")
        }
    }

    /// A resized terminal (SIGWINCH) gets frames that fit the new width.
    func testProgressRedrawsForTheNewWidthAfterAResize() async throws {
        guard let script = findExecutable("script") else { throw XCTSkip("no script(1)") }
        serve("/resize/a-long-enough-name-to-be-cut-when-the-terminal-narrows.bin", size: 900_000)
        server.set(.slow(bytesPerSecond: 400 * 1024), on: "/resize/a-long-enough-name-to-be-cut-when-the-terminal-narrows.bin")
        let typescript = work + "/typescript"
        // The shell waits until the display is up (in the typescript), narrows the
        // terminal (the kernel sends SIGWINCH), marks the spot, and waits for ferry.
        let inner = """
            stty cols 100 rows 20; "$0" get "$1" -d "$2" --wait & p=$!
            n=0; until grep -q "ET[A]" "$3" || [ $n -gt 400 ]; do sleep 0.02; n=$((n+1)); done
            stty cols 50; echo RESIZED; wait $p
            """
        let r = try runTool(script, ["-qfec", "sh -c '\(inner)' \(ferryPath!) \(server.url("/resize/a-long-enough-name-to-be-cut-when-the-terminal-narrows.bin")) \(work!)/rs \(typescript)",
                                    typescript], environment: environment(), timeout: 30)
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        let text = (try? String(contentsOfFile: typescript, encoding: .utf8)) ?? ""
        // (The typescript's header quotes the command: the mark is the echoed line.)
        guard let mark = text.range(of: "RESIZED\r\n", options: .backwards) else { return XCTFail("no resize mark: \(text.debugDescription)") }
        let before = text[..<mark.lowerBound].replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        XCTAssertTrue(before.components(separatedBy: CharacterSet(charactersIn: "\r\n")).contains { $0.count > 50 },
                      "wide lines before the resize")
        let after = String(text[mark.upperBound...]).replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
        let rows = after.components(separatedBy: CharacterSet(charactersIn: "\r\n")).filter { !$0.isEmpty && !$0.hasPrefix("Script done") }
        XCTAssertTrue(rows.contains { $0.contains("done") }, "frames after the resize: \(rows)")
        for row in rows where !row.hasPrefix(work) { XCTAssertLessThanOrEqual(row.count, 50, "too wide after the resize: \(row)") }
    }
}
