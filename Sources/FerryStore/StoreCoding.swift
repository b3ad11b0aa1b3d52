import FerryCore
import Foundation

/// SQLite integers are signed 64-bit: unsigned values are kept as their bit pattern.
extension UInt64 {
    var stored: Int64 { Int64(bitPattern: self) }
    init(stored: Int64) { self = UInt64(bitPattern: stored) }
}

/// A session configuration as stored (JSON). Every field is optional so that a key
/// added later reads as its default from older rows.
struct SessionConfigurationRecord: Codable {
    var persistent: Bool?
    var directory: String?
    var headers: [String: String]?
    var maxConnectionsPerHost: UInt32?
    var requestTimeout: Double?
    var resourceTimeout: Double?
    var allowMetered: Bool?
    var notify: Bool?
    var speedLimit: UInt64?
    var retries: UInt32?
    var proxy: String?
    var applicationID: String?
    var cookies: Bool?
    var privateSignals: Bool?
    var discretionary: Bool?
    var onClientExit: String?

    init(_ c: SessionConfiguration) {
        discretionary = c.discretionary
        cookies = c.cookies
        privateSignals = c.privateSignals
        onClientExit = c.onClientExit.rawValue
        persistent = c.persistent; directory = c.directory; headers = c.headers
        maxConnectionsPerHost = c.maxConnectionsPerHost; requestTimeout = c.requestTimeout
        resourceTimeout = c.resourceTimeout; allowMetered = c.allowMetered; notify = c.notify
        speedLimit = c.speedLimit; retries = c.retries; proxy = c.proxy; applicationID = c.applicationID
    }

    var configuration: SessionConfiguration {
        var c = SessionConfiguration()
        if let v = persistent { c.persistent = v }
        c.directory = directory
        if let v = headers { c.headers = v }
        if let v = maxConnectionsPerHost { c.maxConnectionsPerHost = v }
        if let v = requestTimeout { c.requestTimeout = v }
        if let v = resourceTimeout { c.resourceTimeout = v }
        if let v = allowMetered { c.allowMetered = v }
        if let v = notify { c.notify = v }
        if let v = speedLimit { c.speedLimit = v }
        if let v = retries { c.retries = v }
        c.proxy = proxy
        if let v = applicationID { c.applicationID = v }
        if let v = cookies { c.cookies = v }
        if let v = privateSignals { c.privateSignals = v }
        if let v = discretionary { c.discretionary = v }
        if let v = onClientExit.flatMap(ClientExitPolicy.init(rawValue:)) { c.onClientExit = v }
        return c
    }
}

/// Download options as stored (JSON), optional fields for the same reason.
struct DownloadOptionsRecord: Codable {
    var destination: String?
    var headers: [String: String]?
    var description: String?
    var sha256: String?
    var startAfter: UInt64?
    var priority: Int32?
    var speedLimit: UInt64?
    var connections: UInt32?
    var overwrite: Bool?
    var start: Bool?
    var discretionary: Bool?
    var metalink: String?
    var mirrors: [String]?
    /// `pieces` as its length and hex digests.
    var pieceLength: Int64?
    var pieces: [String]?

    init(_ o: DownloadOptions) {
        discretionary = o.discretionary
        metalink = o.metalink
        if !o.mirrors.isEmpty { mirrors = o.mirrors }
        if let p = o.pieces { pieceLength = p.length; pieces = p.hex }
        destination = o.destination; headers = o.headers; description = o.description; sha256 = o.sha256
        startAfter = o.startAfter; priority = o.priority; speedLimit = o.speedLimit
        connections = o.connections; overwrite = o.overwrite; start = o.start
    }

    var options: DownloadOptions {
        var o = DownloadOptions()
        o.destination = destination
        if let v = headers { o.headers = v }
        if let v = description { o.description = v }
        o.sha256 = sha256
        if let v = startAfter { o.startAfter = v }
        if let v = priority { o.priority = v }
        if let v = speedLimit { o.speedLimit = v }
        if let v = connections { o.connections = v }
        if let v = overwrite { o.overwrite = v }
        if let v = start { o.start = v }
        o.discretionary = discretionary
        o.metalink = metalink
        o.mirrors = mirrors ?? []
        if let pieceLength, let pieces {
            o.pieces = try? PieceList(length: UInt64(max(pieceLength, 0)), hex: pieces)
        }
        return o
    }
}

/// An upload's settings as stored (JSON).
struct UploadSpecRecord: Codable {
    var method: String
    var contentType: String?
    var formField: String?
    var formValues: [String: String]?
    var responseDestination: String?
    var size: Int64
    var modificationTime: Int64
    var fromDescriptor: Bool?

    init(_ u: UploadSpec) {
        method = u.method; contentType = u.contentType; formField = u.formField; formValues = u.formValues
        responseDestination = u.responseDestination; size = u.size; modificationTime = u.modificationTime
        fromDescriptor = u.fromDescriptor
    }

    var spec: UploadSpec {
        UploadSpec(method: method, contentType: contentType, formField: formField, formValues: formValues ?? [:],
                   responseDestination: responseDestination, size: size, modificationTime: modificationTime,
                   fromDescriptor: fromDescriptor ?? false)
    }
}

enum JSONColumn {
    static func encode<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ text: String, what: String) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(text.utf8))
        } catch {
            throw StoreError("the stored \(what) cannot be read: \(error)")
        }
    }
}
