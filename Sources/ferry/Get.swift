import ArgumentParser
import DBus
import FerryClient
import Foundation

struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Queue downloads; prints the new transfer ids, one per line.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "http:// or https:// URLs.")
    var urls: [String]

    @Option(name: [.short, .customLong("output")], help: ArgumentHelp("Save to this file (one URL only).", valueName: "FILE"))
    var output: String?

    @Option(name: [.short, .customLong("directory")], help: ArgumentHelp("Save into this directory.", valueName: "DIR"))
    var directory: String?

    @Option(name: [.customShort("H"), .customLong("header")], help: ArgumentHelp("An extra request header, 'Name: value'.", valueName: "HEADER"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("Expected SHA-256 (hex); a mismatch fails the transfer.", valueName: "HEX"))
    var sha256: String?

    @Flag(help: "Replace an existing file instead of picking a new name.")
    var overwrite = false

    @Flag(help: "Create the transfers paused.")
    var paused = false

    @Flag(help: "Wait until the downloads end, showing progress; exit 1 if any failed.")
    var wait = false

    @Flag(help: "Print JSON instead of ids.")
    var json = false

    func validate() throws {
        if output != nil && directory != nil { throw ValidationError("use either -o FILE or -d DIR, not both") }
        if output != nil && urls.count > 1 { throw ValidationError("-o FILE takes a single URL; use -d DIR for several") }
        for h in headers where !h.contains(":") { throw ValidationError("header '\(h)' is not of the form 'Name: value'") }
    }

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let session = try await client.openSession(global.session)
            var options: [String: DBusValue] = [:]
            if let path = output ?? directory { options["destination"] = .string(absolutePath(path)) }
            if !headers.isEmpty {
                var d: [String: String] = [:]
                for h in headers {
                    let parts = h.split(separator: ":", maxSplits: 1)
                    d[parts[0].trimmingCharacters(in: .whitespaces)] = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
                }
                options["headers"] = .stringDict(d)
            }
            if let sha256 { options["sha256"] = .string(sha256) }
            if overwrite { options["overwrite"] = .boolean(true) }
            if paused { options["start"] = .boolean(false) }

            var transfers: [FerryTransfer] = []
            for url in urls {
                transfers.append(try await session.download(url, options: options))
            }
            if json {
                var list: [[String: Any]] = []
                for t in transfers { list.append(JSONOutput.transfer(try await t.info())) }
                if !wait { JSONOutput.print(list) }
            } else if !wait || !isatty(1).asBool {
                for t in transfers { print(t.id) }
            }
            guard wait else { return }
            let infos = try await ProgressDisplay.follow(transfers, client: client, quiet: json)
            if json { JSONOutput.print(infos.map(JSONOutput.transfer)) }
            if infos.contains(where: { $0.state != "completed" }) { throw CLIError.transfersFailed }
        }
    }
}

func absolutePath(_ path: String) -> String {
    if path.hasPrefix("/") { return path }
    if path == "~" || path.hasPrefix("~/") { return NSString(string: path).expandingTildeInPath }
    return URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)).standardizedFileURL.path
}

extension Int32 {
    var asBool: Bool { self != 0 }
}
