import ArgumentParser
import DBus
import FerryBusClient
import FerryInterface
import Foundation

private typealias UploadKey = FerryInterface.UploadOption

/// What `put` and `post` share: headers, description, waiting, output.
struct UploadOptions: ParsableArguments {
    @Option(name: [.customShort("H"), .customLong("header")], help: ArgumentHelp("An extra request header, 'Name: value'.", valueName: "HEADER"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("The Content-Type of the file.", valueName: "TYPE"))
    var contentType: String?

    @Option(help: ArgumentHelp("A description shown in listings and notifications.", valueName: "TEXT"))
    var description: String?

    @Option(help: ArgumentHelp("Save the server's response body to this file.", valueName: "FILE"), completion: .file())
    var responseOutput: String?

    @Flag(help: "Create the transfer paused.")
    var paused = false

    @Flag(help: "Wait until the upload ends, showing progress on standard error; exit 1 if it failed.")
    var wait = false

    @Flag(help: "Print JSON (an array with the transfer) instead of its id.")
    var json = false

    func validate() throws {
        try HeaderArguments.validate(headers)
        if contentType != nil, splitHeaders.type != nil {
            throw ValidationError("give the file's type once: --content-type or -H 'Content-Type: …'")
        }
    }

    /// The `-H` headers, and apart from them `-H 'Content-Type: …'` as curl users write
    /// it: the upload's `content-type` (the service takes the type only as that option).
    private var splitHeaders: (others: [String: String], type: String?) {
        var others = HeaderArguments.dictionary(headers)
        let type = others.keys.first { $0.lowercased() == "content-type" }.flatMap { others.removeValue(forKey: $0) }
        return (others, type)
    }

    func busOptions(method: String) -> [String: DBusValue] {
        var o: [String: DBusValue] = [UploadKey.method.name: .string(method)]
        let (others, headerType) = splitHeaders
        if !others.isEmpty { o[UploadKey.headers.name] = .stringDict(others) }
        if let type = contentType ?? headerType { o[UploadKey.contentType.name] = .string(type) }
        if let description { o[UploadKey.description.name] = .string(description) }
        if let responseOutput { o[UploadKey.responseDestination.name] = .string(absolutePath(responseOutput)) }
        if paused { o[UploadKey.start.name] = .boolean(false) }
        return o
    }
}

/// Queues one upload and, with --wait, follows it (shared by put and post).
func upload(_ global: GlobalOptions, _ opts: UploadOptions, url: String, file: String,
            busOptions: [String: DBusValue]) async throws {
    try await runReportingErrors {
        let path = absolutePath(file)
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            // `put URL FILE`, the arguments the other way round, is the likeliest slip.
            let swapped = file.contains("://") ? " (the file comes first: ferry put FILE URL)" : ""
            throw CLIError.refused("\(file): no such file\(swapped) (FileNotFound)")
        }
        guard !isDir.boolValue else { throw CLIError.refused("\(file) is a folder; ferry uploads one file (FileNotFound)") }
        let client = try global.connect()
        let session = try await client.openSession(global.session)
        let monitor = opts.wait ? try await TransferMonitor.start(client) : nil
        defer { monitor?.stop() }
        let t = try await session.upload(url, file: path, options: busOptions)
        if opts.json && !opts.wait {
            let objects = try await client.listing()
            JSONOutput.print(try pick([t.id], from: objects).map { TransferJSON($0, sessions: sessionNames(objects)) })
        } else if !opts.json && !global.quiet && (!opts.wait || !ProgressDisplay.drawnOnStandardOutputsTerminal) {
            Output.line(String(t.id))
        }
        guard opts.wait, let monitor else { return }
        let objects = try await client.listing()
        let initial = try pick([t.id], from: objects)
        let final = try await InterruptNote.whileWaiting(for: [t.id]) {
            try await Follower(options: Follower.Options())
                .run(initial, monitor: monitor, sink: ProgressDisplay(quiet: global.quiet || opts.json, on: .standardError))
        }
        if opts.json { JSONOutput.print(final.map { TransferJSON($0, sessions: sessionNames(objects)) }) }
        await acknowledgeShown(client, session: global.session, sessions: objects.sessions,
                               shown: Set(final.filter(\.isFinal).map(\.path)), listed: nil)
        if final.contains(where: { $0.state != "completed" }) { throw CLIError.transfersFailed }
    }
}

struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload a file with PUT (also `ferry -T FILE URL`); prints the new transfer id.",
        discussion: "A URL whose path ends in / gets the file's name appended (URL-encoded), as curl -T does: -T notes.txt http://h/up/ PUTs to http://h/up/notes.txt.")
    @OptionGroup var global: GlobalOptions
    @Option(name: [.customShort("T"), .customLong("upload-file")], help: ArgumentHelp("The file to upload.", valueName: "FILE"), completion: .file())
    var uploadFile: String?
    @Argument(help: ArgumentHelp("FILE URL (or URL with -T FILE).", valueName: "FILE-OR-URL"), completion: .file())
    var arguments: [String] = []
    @OptionGroup var opts: UploadOptions

    var fileAndURL: (file: String, url: String)? {
        if let uploadFile, arguments.count == 1 { return (uploadFile, arguments[0]) }
        if uploadFile == nil, arguments.count == 2 { return (arguments[0], arguments[1]) }
        return nil
    }

    func validate() throws {
        if fileAndURL == nil { throw ValidationError("usage: ferry put FILE URL (or ferry put -T FILE URL)") }
    }

    func run() async throws {
        let (file, url) = fileAndURL!
        try await upload(global, opts, url: Self.target(url, file: file), file: file, busOptions: opts.busOptions(method: "PUT"))
    }

    /// curl's rule for -T: a URL whose path ends in `/` (or has no path) names a folder,
    /// and the file's base name, URL-encoded, is appended to it.
    static func target(_ url: String, file: String) -> String {
        guard var c = URLComponents(string: url), c.scheme != nil, c.host != nil else { return url }
        let path = c.percentEncodedPath
        guard path.isEmpty || path.hasSuffix("/") else { return url }
        let name = (file as NSString).lastPathComponent
        guard !name.isEmpty, name != "/", name != ".", name != "..",
              let encoded = name.addingPercentEncoding(withAllowedCharacters: unreserved) else { return url }
        c.percentEncodedPath = (path.isEmpty ? "/" : path) + encoded
        return c.string ?? url
    }

    /// RFC 3986's unreserved characters: everything else in a name is percent-encoded.
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}

struct Post: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload a file as a multipart/form-data POST: ferry post URL -F field=@FILE [-F name=value].",
        discussion: "Exactly one -F names the file (field=@FILE); other -F name=value fields are sent as the option form-values (a proposed addition to the bus contract).")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The URL.")
    var url: String
    @Option(name: [.customShort("F"), .customLong("form")], help: ArgumentHelp("A form field: field=@FILE for the file, or name=value.", valueName: "FIELD"))
    var form: [String] = []
    @OptionGroup var opts: UploadOptions

    /// (file field, file, other fields)
    func parsedForm() throws -> (field: String, file: String, values: [String: String]) {
        var file: (String, String)?
        var values: [String: String] = [:]
        for f in form {
            guard let eq = f.firstIndex(of: "="), eq != f.startIndex else {
                throw ValidationError("-F '\(f)' is not of the form name=value or field=@FILE")
            }
            let name = String(f[..<eq])
            let value = String(f[f.index(after: eq)...])
            if value.hasPrefix("@") {
                if file != nil { throw ValidationError("only one -F field=@FILE per upload") }
                guard value.count > 1 else { throw ValidationError("-F \(name)=@ names no file") }
                file = (name, String(value.dropFirst()))
            } else {
                values[name] = value
            }
        }
        guard let file else { throw ValidationError("name the file with -F field=@FILE") }
        return (file.0, file.1, values)
    }

    func validate() throws { _ = try parsedForm() }

    func run() async throws {
        let form = try parsedForm()
        var o = opts.busOptions(method: "POST")
        o[UploadKey.formField.name] = .string(form.field)
        if !form.values.isEmpty { o[UploadKey.formValues.name] = .stringDict(form.values) }
        try await upload(global, opts, url: url, file: form.file, busOptions: o)
    }
}
