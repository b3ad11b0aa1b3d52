import DBus
import FerryBusClient
import FerryInterface
import Foundation

private typealias SessionKey = FerryInterface.SessionOption

// The `--json` schemas, one Codable type each, written with snake_case keys (spelled
// out: JSONEncoder's convertToSnakeCase converted every key of every object again,
// a sixth of `ls --json` with 10,000 transfers) and without `\/` escapes.
// desktop/man/ferry.1 documents them field by field.

/// A transfer, as `ls`, `show`, `get`, `wait` and `watch --until-done` print it: its
/// snapshot (`TransferInfo`, in its JSON form) with the session named by its
/// identifier ("" if it is not known), not its object path.
struct TransferJSON: Encodable {
    var info: TransferInfo

    init(_ i: TransferInfo, sessions: [String: String] = [:]) {
        info = i
        info.session = sessions[i.session] ?? ""
    }

    func encode(to encoder: Encoder) throws { try info.encode(to: encoder) }
}

/// A session, as `sessions --json` prints it.
struct SessionJSON: Codable, Equatable {
    var identifier: String
    var path: String
    var activeTransfers: UInt32
    var transfers: Int
    /// Present for `sessions show`.
    var pendingEvents: Int?
    var configuration: ConfigurationJSON

    enum CodingKeys: String, CodingKey {
        case identifier
        case path
        case activeTransfers = "active_transfers"
        case transfers
        case pendingEvents = "pending_events"
        case configuration
    }
}

/// `sessions show --json`: the session and its pending completion events.
struct SessionShowJSON: Codable, Equatable {
    var session: SessionJSON
    var pendingEvents: [PendingEventJSON]

    enum CodingKeys: String, CodingKey {
        case session
        case pendingEvents = "pending_events"
    }
}

/// A session's configuration (`Configuration`; header values show as "(hidden)").
struct ConfigurationJSON: Codable, Equatable {
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
    var cookies: Bool?
    var applicationId: String?
    var discretionary: Bool?
    var onClientExit: String?

    init(_ c: [String: DBusValue]) {
        discretionary = c[SessionKey.discretionary.name]?.bool
        persistent = c[SessionKey.persistent.name]?.bool
        directory = c[SessionKey.directory.name]?.string
        headers = c[SessionKey.headers.name]?.stringDict
        maxConnectionsPerHost = c[SessionKey.maxConnectionsPerHost.name]?.uint32
        requestTimeout = c[SessionKey.requestTimeout.name]?.double
        resourceTimeout = c[SessionKey.resourceTimeout.name]?.double
        allowMetered = c[SessionKey.allowMetered.name]?.bool
        notify = c[SessionKey.notify.name]?.bool
        speedLimit = c[SessionKey.speedLimit.name]?.uint64
        retries = c[SessionKey.retries.name]?.uint32
        proxy = c[SessionKey.proxy.name]?.string
        cookies = c[SessionKey.cookies.name]?.bool
        applicationId = c[SessionKey.applicationID.name]?.string
        onClientExit = c[SessionKey.onClientExit.name]?.string
    }

    enum CodingKeys: String, CodingKey {
        case persistent
        case directory
        case headers
        case maxConnectionsPerHost = "max_connections_per_host"
        case requestTimeout = "request_timeout"
        case resourceTimeout = "resource_timeout"
        case allowMetered = "allow_metered"
        case notify
        case speedLimit = "speed_limit"
        case retries
        case proxy
        case cookies
        case applicationId = "application_id"
        case discretionary
        case onClientExit = "on_client_exit"
    }
}

/// The manager's settings and counters, as `config get --json` prints them.
struct ManagerJSON: Codable, Equatable {
    var version: String
    /// The contract version ferryd implements in full ("1.2").
    var interfaceVersion: String
    var maxConcurrent: UInt32
    var speedLimit: UInt64
    var notifications: Bool
    var activeTransfers: UInt32
    var queuedTransfers: UInt32
    var downloadRate: UInt64
    var uploadRate: UInt64

    enum CodingKeys: String, CodingKey {
        case version
        case interfaceVersion = "interface_version"
        case maxConcurrent = "max_concurrent"
        case speedLimit = "speed_limit"
        case notifications
        case activeTransfers = "active_transfers"
        case queuedTransfers = "queued_transfers"
        case downloadRate = "download_rate"
        case uploadRate = "upload_rate"
    }
}

/// One line of `events --json` and `watch --json` (JSON lines).
struct EventJSON: Codable, Equatable {
    /// added, state, progress, resumed, finished, completed, removed.
    var event: String
    var id: UInt64
    /// Microseconds since the epoch, when the CLI saw it.
    var time: UInt64
    var state: String?
    var waitingReason: String?
    var url: String?
    var destination: String?
    var bytesTransferred: Int64?
    var bytesExpected: Int64?
    var offset: Int64?
    var location: String?
    var serial: UInt64?
    var errorName: String?
    var errorMessage: String?

    enum CodingKeys: String, CodingKey {
        case event
        case id
        case time
        case state
        case waitingReason = "waiting_reason"
        case url
        case destination
        case bytesTransferred = "bytes_transferred"
        case bytesExpected = "bytes_expected"
        case offset
        case location
        case serial
        case errorName = "error_name"
        case errorMessage = "error_message"
    }
}

/// A pending completion event, as `sessions show --json` lists it.
struct PendingEventJSON: Codable, Equatable {
    var serial: UInt64
    var id: UInt64
    var kind: String
    var location: String?
    var errorName: String?
    var errorMessage: String?
    var httpStatus: UInt32?
    var bytes: Int64?
    var sha256: String?

    enum CodingKeys: String, CodingKey {
        case serial
        case id
        case kind
        case location
        case errorName = "error_name"
        case errorMessage = "error_message"
        case httpStatus = "http_status"
        case bytes
        case sha256
    }
}

enum JSONOutput {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    static let prettyEncoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
        return e
    }()

    /// A document (pretty-printed).
    static func print<T: Encodable>(_ value: T) {
        write(try? prettyEncoder.encode(value))
    }

    /// An array as a document. A long one (a listing of thousands of transfers) is
    /// encoded in slices, one per core, and joined: JSONEncoder builds a tree of every
    /// element and sorts each object's keys, about 40 % of `ls --json`'s own CPU.
    static func print<T: Encodable & Sendable>(_ values: [T]) {
        write(encodeArray(values))
    }

    /// Writes an encoded document and a newline. Written as encoded: a listing of ten
    /// thousand transfers is megabytes, and going through a String copied it three times.
    private static func write(_ document: Data?) {
        guard var data = document else { return }
        data.append(UInt8(ascii: "\n"))
        Output.flush()
        FileHandle.standardOutput.write(data)
    }

    /// Arrays shorter than this are encoded in one piece.
    static let sliceMinimum = 512

    /// `values` pretty-printed, the same bytes as `prettyEncoder.encode(values)`. In
    /// that form an array is `[\n`, its elements each indented by two spaces and
    /// separated by `,\n`, then `\n]`; so each slice is encoded as an array, its
    /// brackets are cut off, and the insides are joined with `,\n`.
    static func encodeArray<T: Encodable & Sendable>(_ values: [T]) -> Data? {
        let wanted = min(ProcessInfo.processInfo.activeProcessorCount, values.count / (sliceMinimum / 2))
        guard wanted > 1 else { return try? prettyEncoder.encode(values) }
        let size = (values.count + wanted - 1) / wanted
        let slices = (values.count + size - 1) / size // none empty
        let parts = SliceResults(count: slices)
        let formatting = prettyEncoder.outputFormatting
        DispatchQueue.concurrentPerform(iterations: slices) { i in
            let slice = values[(i * size)..<min(values.count, (i + 1) * size)]
            let encoder = JSONEncoder() // one each: an encoder is not shared between threads
            encoder.outputFormatting = formatting
            parts.set(i, try? encoder.encode(Array(slice)))
        }
        let open = Data("[\n".utf8), close = Data("\n]".utf8), comma = Data(",\n".utf8)
        var whole = Data(open)
        whole.reserveCapacity(parts.totalBytes)
        for i in 0..<slices {
            guard let part = parts.get(i), part.starts(with: open), part.count > open.count + close.count,
                  part.suffix(close.count) == close else { return try? prettyEncoder.encode(values) }
            if i > 0 { whole.append(comma) }
            whole.append(part[(part.startIndex + open.count)..<(part.endIndex - close.count)])
        }
        whole.append(close)
        return whole
    }

    /// What the slices' threads hand back.
    private final class SliceResults: @unchecked Sendable {
        private let lock = NSLock()
        private var parts: [Data?]
        init(count: Int) { parts = Array(repeating: nil, count: count) }
        func set(_ i: Int, _ data: Data?) { lock.withLock { parts[i] = data } }
        func get(_ i: Int) -> Data? { lock.withLock { parts[i] } }
        var totalBytes: Int { lock.withLock { parts.reduce(0) { $0 + ($1?.count ?? 0) } } }
    }

    /// One JSON line.
    static func line<T: Encodable>(_ value: T) {
        Output.raw(text(value))
    }

    /// A value as one line of JSON.
    static func text<T: Encodable>(_ value: T) -> String {
        guard let data = try? encoder.encode(value) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    static func now() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1_000_000) }
}

/// `ferry config schedule --json`: one object per window, in order.
struct ScheduleWindowJSON: Codable, Equatable {
    var days: String
    var start: String
    var end: String
    /// Bytes/s over all transfers while the window is on; 0 = none.
    var speedLimit: UInt64
    var discretionaryOnly: Bool

    enum CodingKeys: String, CodingKey {
        case days, start, end
        case speedLimit = "speed_limit"
        case discretionaryOnly = "discretionary_only"
    }
}
