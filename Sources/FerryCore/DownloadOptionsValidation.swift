import Foundation

/// The rules for `Download` options other than the destination.
enum DownloadOptionsValidation {
    static let priorities: ClosedRange<Int32> = -1...1
    static let connections: ClosedRange<UInt32> = 1...16

    static func validate(_ options: DownloadOptions) throws {
        if let destination = options.destination { try validateDestinationLength(destination) }
        try Limits.check(options.description, max: Limits.descriptionBytes, what: "the description")
        if let sha = options.sha256 { try validateSHA256(sha) }
        try validatePriority(options.priority)
        guard connections.contains(options.connections) else {
            throw CoreError.invalidArgument("connections is \(options.connections); it must be between 1 and 16")
        }
        try HeaderFields.validate(options.headers)
        if let metalink = options.metalink { try validateMetalinkURL(metalink) }
        try validateMirrors(options.mirrors)
    }

    /// An http or https URL of at most 64 KiB; any other is `InvalidArgument` (the
    /// option's value is malformed), with what `RequestURL` says of it.
    static func validateMetalinkURL(_ url: String) throws {
        do {
            _ = try RequestURL.validate(url)
        } catch let error as CoreError {
            if case .limitExceeded = error { throw error }
            throw CoreError.invalidArgument("metalink: \(error.message)")
        }
    }

    /// Each mirror an http or https URL as `RequestURL` checks them; a malformed one is
    /// an `InvalidArgument` that names its index.
    static func validateMirrors(_ mirrors: [String]) throws {
        guard mirrors.count <= Limits.mirrors else {
            throw CoreError.invalidArgument("mirrors lists \(mirrors.count) URLs; at most \(Limits.mirrors) are allowed")
        }
        for (i, mirror) in mirrors.enumerated() {
            do {
                _ = try RequestURL.validate(mirror)
            } catch let error as CoreError {
                throw CoreError.invalidArgument("mirror \(i): \(error.message)")
            }
        }
    }

    /// PATH_MAX and NAME_MAX; a file name (not an existing directory) must leave room
    /// for the `.part` suffix the download is written under.
    static func validateDestinationLength(_ destination: String) throws {
        try Limits.checkPath(destination, what: "the destination")
        let last = FileSystemChecks.lastComponent(destination).utf8.count
        let room = Limits.nameBytes - ".part".utf8.count
        guard last > room else { return }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: destination, isDirectory: &isDirectory), isDirectory.boolValue { return }
        throw CoreError.limitExceeded("the destination's file name is \(last) bytes long; at most \(room) are allowed (its partial file adds '.part')")
    }

    static func validateSHA256(_ sha: String) throws {
        guard Hex.sha256Digest(sha) != nil else {
            let shown = sha.count > 80 ? String(sha.prefix(80)) + "…" : sha
            throw CoreError.invalidArgument("sha256 '\(shown)' is not a SHA-256 digest; give 64 hexadecimal digits")
        }
    }

    static func validatePriority(_ p: Int32) throws {
        guard priorities.contains(p) else {
            throw CoreError.invalidArgument("priority is \(p); use -1 (low), 0 (normal) or 1 (high)")
        }
    }
}
