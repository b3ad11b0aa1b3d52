import XCTest
@testable import FerryCore

final class NamingTests: XCTestCase {
    func testSanitizerKeepsOnlyASafeSingleName() {
        XCTAssertEqual(FileNameSanitizer.sanitize("report.pdf"), "report.pdf")
        XCTAssertEqual(FileNameSanitizer.sanitize("../../etc/passwd"), "passwd")
        XCTAssertEqual(FileNameSanitizer.sanitize("..\\..\\Windows\\evil.exe"), "evil.exe")
        XCTAssertEqual(FileNameSanitizer.sanitize(".bashrc"), "bashrc")
        XCTAssertEqual(FileNameSanitizer.sanitize("...hidden"), "hidden")
        XCTAssertEqual(FileNameSanitizer.sanitize("a\u{0}b\nc.txt"), "abc.txt")
        XCTAssertEqual(FileNameSanitizer.sanitize("  spaced.txt  "), "spaced.txt")
        XCTAssertNil(FileNameSanitizer.sanitize(".."))
        XCTAssertNil(FileNameSanitizer.sanitize("."))
        XCTAssertNil(FileNameSanitizer.sanitize("/"))
        XCTAssertNil(FileNameSanitizer.sanitize(""))
        let long = String(repeating: "x", count: 400) + ".iso"
        let short = FileNameSanitizer.sanitize(long)!
        XCTAssertLessThanOrEqual(short.utf8.count, FileNameSanitizer.maxBytes)
        XCTAssertTrue(short.hasSuffix(".iso"))
    }

    func testContentDispositionForms() {
        let cases: [(String, String?)] = [
            ("attachment; filename=\"report.pdf\"", "report.pdf"),
            ("attachment; filename=plain.txt", "plain.txt"),
            ("attachment; FILENAME=\"a \\\"q\\\".txt\"", "a \"q\".txt"),
            ("attachment; filename*=UTF-8''na%C3%AFve%20file.txt", "naïve file.txt"),
            ("attachment; filename=\"fallback.txt\"; filename*=utf-8'en'%E2%82%AC%20rates.txt", "€ rates.txt"),
            ("attachment; filename*=iso-8859-1''caf%E9.txt", "café.txt"),
            ("inline; filename=\"x;y.txt\"; size=3", "x;y.txt"),
            ("attachment", nil),
            ("attachment; filename=\"\"", nil),
            // A bad filename* falls back to filename.
            ("attachment; filename*=UTF-8''%ZZ; filename=ok.txt", "ok.txt"),
            ("attachment; filename*=koi8-r''x; filename=ok.txt", "ok.txt"),
        ]
        assertFileNames(cases)
    }

    func testContentDispositionPathTraversalIsDefused() {
        let cases: [(String, String?)] = [
            ("attachment; filename=\"../../.ssh/authorized_keys\"", "authorized_keys"),
            ("attachment; filename*=UTF-8''..%2F..%2Fetc%2Fpasswd", "passwd"),
            ("attachment; filename=\"/etc/cron.d/x\"", "x"),
            ("attachment; filename=\".profile\"", "profile"),
            ("attachment; filename=\"..\"", nil),
            ("attachment; filename*=UTF-8''%2E%2E", nil),
            ("attachment; filename=\"a/\"", "a"),
        ]
        assertFileNames(cases)
    }

    func testUniqueNames() {
        var taken: Set<String> = ["file.zip", "file (1).zip"]
        XCTAssertEqual(UniqueFileName.first("file.zip") { taken.contains($0) }, "file (2).zip")
        XCTAssertEqual(UniqueFileName.first("free.zip") { taken.contains($0) }, "free.zip")
        taken = ["backup.tar.gz"]
        XCTAssertEqual(UniqueFileName.first("backup.tar.gz") { taken.contains($0) }, "backup (1).tar.gz")
        taken = ["README"]
        XCTAssertEqual(UniqueFileName.first("README") { taken.contains($0) }, "README (1)")
        taken = [".bashrc"]
        XCTAssertEqual(UniqueFileName.first(".bashrc") { taken.contains($0) }, ".bashrc (1)")
        taken = ["v1.2 notes"]
        XCTAssertEqual(UniqueFileName.first("v1.2 notes") { taken.contains($0) }, "v1.2 notes (1)")
    }

    func testURLFileNames() throws {
        XCTAssertEqual(try RequestURL.validate("https://example.com/dir/a%20b.zip?x=1#frag").suggestedFileName, "a b.zip")
        XCTAssertEqual(try RequestURL.validate("https://example.com/").suggestedFileName, "download")
        XCTAssertEqual(try RequestURL.validate("https://example.com").suggestedFileName, "download")
        XCTAssertEqual(try RequestURL.validate("https://example.com/x/%2E%2E").suggestedFileName, "download")
        XCTAssertEqual(try RequestURL.validate("https://example.com/x/..%2F..%2Fetc%2Fpasswd").suggestedFileName, "passwd")
        XCTAssertEqual(try RequestURL.validate("https://example.com/.env").suggestedFileName, "env")
        // The per-host key: host and port, the scheme's port when none is given.
        XCTAssertEqual(try RequestURL.validate("HTTPS://Example.COM:8443/f").host, "example.com:8443")
        XCTAssertEqual(try RequestURL.validate("https://example.com/f").host, "example.com:443")
        XCTAssertEqual(try RequestURL.validate("http://example.com/f").host, "example.com:80")
    }

    /// Spaces and control characters are refused in URLs whatever the script: ASCII
    /// ones (looked at byte by byte) and Unicode's (looked up per character).
    func testURLsWithSpacesOrControlCharactersAreRefused() {
        for bad in ["https://h/a b", "https://h/a\tb", "https://h/a\u{7F}", "https://h/\u{1}", "https://h/é\u{2003}x",
                    "https://h/\u{A0}", "https://h/ü\n", "https://h/\u{3000}"] {
            XCTAssertTrue(RequestURL.hasSpaceOrControl(bad), bad.debugDescription)
            XCTAssertThrowsError(try RequestURL.validate(bad), bad.debugDescription)
        }
        for good in ["https://h/a%20b", "https://h/é", "https://例え.jp/ファイル", "https://h/~x!$&'()*+,;=:@"] {
            XCTAssertFalse(RequestURL.hasSpaceOrControl(good), good)
        }
    }

    /// `normalize` returns a path unchanged exactly when it is already canonical, and
    /// `lastComponent` finds the last name in it: every path of up to 7 characters of
    /// `/`, `.` and `a` agrees with the split-and-join rule.
    func testNormalPathsAreKeptAsTheyAre() {
        func splitAndJoin(_ path: String) -> String {
            var parts: [Substring] = []
            for part in path.split(separator: "/") {
                if part == "." { continue }
                if part == ".." { _ = parts.popLast(); continue }
                parts.append(part)
            }
            return "/" + parts.joined(separator: "/")
        }
        var paths = [""]
        var checked = 0
        for _ in 1...7 {
            paths = paths.flatMap { p in ["/", ".", "a"].map { p + $0 } }
            for path in paths {
                XCTAssertEqual(FileSystemChecks.normalize(path), splitAndJoin(path), path)
                XCTAssertEqual(FileSystemChecks.isNormal(path), splitAndJoin(path) == path, path)
                XCTAssertEqual(FileSystemChecks.lastComponent(path), path.split(separator: "/").last ?? "", path)
                checked += 1
            }
        }
        XCTAssertEqual(checked, 3_279)
        XCTAssertEqual(FileSystemChecks.normalize("/home/u/Downloads/..."), "/home/u/Downloads/...")
        XCTAssertEqual(FileSystemChecks.normalize("/home/u/./Downloads//x/../"), "/home/u/Downloads")
    }

    func testRedaction() {
        XCTAssertEqual(RequestURL.redacted("https://user:secret@host/x"), "https://host/x")
        // Too broken to say where the authority ends (a slash, '?' or '#' in the password,
        // no '//'): an error message hides everything from the scheme to the last @.
        XCTAssertEqual(RequestURL.redacted("http://u:p/ss@h/x"), "http://h/x")
        XCTAssertEqual(RequestURL.redacted("https://host/x?a=b@c"), "https://c", "may hide too much, never a password")
        for (url, shown) in [("http:user:PW1@h:8080/f", "http:h:8080/f"), ("http:\\\\user:PW2@h/f", "http:h/f"),
                             ("http://user:PW3?@h/f", "http://h/f"), ("http://user:PW4#@h/f", "http://h/f")] {
            XCTAssertEqual(RequestURL.redacted(url), shown, url)
            XCTAssertFerryError(try RequestURL.validate(url), { !$0.message.contains("PW") }, url)
        }
        XCTAssertFerryError(try RequestURL.validate("http://u:pa/ss@h/x"), { !$0.message.contains("ss") && !$0.message.contains("pa/") })
        let cases: [(String, String)] = [
            ("http://u:p@h:8080/a@b", "http://h:8080/a@b"),           // the last @ before the path
            ("http://a@b:c@h/", "http://h/"),                         // an unescaped @ in the password
            ("http://u:p@h", "http://h"),                             // no path at all
            ("http://u:p@h?q#f", "http://h?q#f"),
            ("http://h#frag@x", "http://h#frag@x"),                   // @ after the authority ends
            ("http://ü:ö@hôst/é", "http://hôst/é"),                    // non-ASCII around it
            ("mailto:a@b", "mailto:a@b"), ("", ""), ("://", "://"), ("://u@", "://"),
            ("not a url @ all", "not a url @ all"),
        ]
        for (url, shown) in cases {
            XCTAssertEqual(Redaction.urlWithoutCredentials(url), shown, url)
        }
    }

    func testXDGDownloadDirectory() {
        let text = """
        # written by xdg-user-dirs-update
        XDG_DESKTOP_DIR="$HOME/Desktop"
        XDG_DOWNLOAD_DIR="$HOME/Téléchargements"
        """
        XCTAssertEqual(XDGUserDirectories.parseDownloadDirectory(userDirs: text, home: "/home/ann"), "/home/ann/Téléchargements")
        XCTAssertEqual(XDGUserDirectories.parseDownloadDirectory(userDirs: "XDG_DOWNLOAD_DIR=\"/srv/dl/\"", home: "/h"), "/srv/dl")
        XCTAssertEqual(XDGUserDirectories.parseDownloadDirectory(userDirs: "XDG_DOWNLOAD_DIR=\"$HOME/\"", home: "/h"), "/h")
        XCTAssertNil(XDGUserDirectories.parseDownloadDirectory(userDirs: "XDG_DOWNLOAD_DIR=\"relative\"", home: "/h"))
        XCTAssertNil(XDGUserDirectories.parseDownloadDirectory(userDirs: "# XDG_DOWNLOAD_DIR=\"/x\"", home: "/h"))
    }

    func testXDGLookupReadsConfigAndFallsBack() throws {
        let root = NSTemporaryDirectory() + "ferry-xdg-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/config", withIntermediateDirectories: true)
        try "XDG_DOWNLOAD_DIR=\"$HOME/Incoming\"\n".write(toFile: root + "/config/user-dirs.dirs", atomically: true, encoding: .utf8)
        let dir = XDGUserDirectories.downloadDirectory(environment: ["HOME": root, "XDG_CONFIG_HOME": root + "/config"])
        XCTAssertEqual(dir, root + "/Incoming")
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir), "created when missing")
        let fallback = XDGUserDirectories.downloadDirectory(environment: ["HOME": root])
        XCTAssertEqual(fallback, root + "/Downloads")
        XCTAssertTrue(FileManager.default.fileExists(atPath: fallback))
    }

    func testHeaderMergeLetsTransferOverrideCaseInsensitively() {
        let merged = HeaderFields.merge(session: ["Accept": "*/*", "X-Session": "s", "user-agent": "ua1"],
                                        transfer: ["User-Agent": "ua2", "X-T": "t"])
        XCTAssertEqual(merged.map(\.name), ["Accept", "X-Session", "User-Agent", "X-T"])
        XCTAssertEqual(merged.map(\.value), ["*/*", "s", "ua2", "t"])
    }
}

extension NamingTests {
    /// Each header gives the file name beside it (nil: none).
    func assertFileNames(_ cases: [(String, String?)], line: UInt = #line) {
        for (header, name) in cases {
            XCTAssertEqual(ContentDisposition.fileName(from: header), name, header, line: line)
        }
    }
}
