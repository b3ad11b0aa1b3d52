/// A key of one of the bus API's `a{sv}` option dictionaries, with the D-Bus type its
/// value must have. The daemon parses by these and the clients write by them: no
/// option key is spelled anywhere else.
public struct BusOption: Sendable, Hashable {
    public let name: String
    /// The D-Bus type signature its value must have, exactly.
    public let signature: String

    init(_ name: String, _ signature: String) {
        self.name = name
        self.signature = signature
    }
}

extension FerryInterface {
    /// `OpenSession`'s `configuration` and the Session's `Configuration` property.
    public enum SessionOption {
        public static let persistent = BusOption("persistent", "b")
        public static let directory = BusOption("directory", "s")
        public static let headers = BusOption("headers", "a{ss}")
        public static let maxConnectionsPerHost = BusOption("max-connections-per-host", "u")
        public static let requestTimeout = BusOption("request-timeout", "d")
        public static let resourceTimeout = BusOption("resource-timeout", "d")
        public static let allowMetered = BusOption("allow-metered", "b")
        public static let notify = BusOption("notify", "b")
        public static let speedLimit = BusOption("speed-limit", "t")
        public static let retries = BusOption("retries", "u")
        public static let proxy = BusOption("proxy", "s")
        public static let applicationID = BusOption("application-id", "s")
        public static let cookies = BusOption("cookies", "b")
        public static let privateSignals = BusOption("private-signals", "b")
        public static let discretionary = BusOption("discretionary", "b")
        public static let onClientExit = BusOption("on-client-exit", "s")

        /// In the order an unknown key's error lists them.
        public static let all = [persistent, directory, headers, maxConnectionsPerHost, requestTimeout, resourceTimeout,
                                 allowMetered, notify, speedLimit, retries, proxy, applicationID, cookies, privateSignals,
                                 discretionary, onClientExit]
    }

    /// `Download`'s, `ResumeDownload`'s and each `DownloadGroup` item's options.
    public enum DownloadOption {
        public static let destination = BusOption("destination", "s")
        public static let headers = BusOption("headers", "a{ss}")
        public static let description = BusOption("description", "s")
        public static let sha256 = BusOption("sha256", "s")
        public static let startAfter = BusOption("start-after", "t")
        public static let priority = BusOption("priority", "i")
        public static let speedLimit = BusOption("speed-limit", "t")
        public static let connections = BusOption("connections", "u")
        public static let overwrite = BusOption("overwrite", "b")
        public static let start = BusOption("start", "b")
        public static let discretionary = BusOption("discretionary", "b")
        public static let mirrors = BusOption("mirrors", "as")
        public static let pieces = BusOption("pieces", "(tas)")
        public static let metalink = BusOption("metalink", "s")
        public static let dedupe = BusOption("dedupe", "b")
        /// Taken out before the others are parsed (not in `all`): `Download` and
        /// `ResumeDownload` only.
        public static let destinationFD = BusOption("destination-fd", "h")

        /// In the order an unknown key's error lists them.
        public static let all = [destination, headers, description, sha256, startAfter, priority, speedLimit, connections,
                                 overwrite, start, discretionary, mirrors, pieces, metalink, dedupe]
    }

    /// `Upload`'s options.
    public enum UploadOption {
        public static let method = BusOption("method", "s")
        public static let headers = BusOption("headers", "a{ss}")
        public static let description = BusOption("description", "s")
        public static let contentType = BusOption("content-type", "s")
        public static let formField = BusOption("form-field", "s")
        public static let formValues = BusOption("form-values", "a{ss}")
        public static let start = BusOption("start", "b")
        public static let responseDestination = BusOption("response-destination", "s")
        /// Taken out before the others are parsed.
        public static let sourceFD = BusOption("source-fd", "h")
        public static let discretionary = BusOption("discretionary", "b")

        /// In the order an unknown key's error lists them.
        public static let all = [method, headers, description, contentType, formField, formValues, start,
                                 responseDestination, sourceFD, discretionary]
    }

    /// (v1.2) `DownloadGroup`'s own options.
    public enum GroupOption {
        public static let description = BusOption("description", "s")
        public static let allOrNothing = BusOption("all-or-nothing", "b")
        public static let start = BusOption("start", "b")

        public static let all = [description, allOrNothing, start]
    }

    /// (v1.2) The extras of a Manager `Schedule` window.
    public enum ScheduleExtra {
        public static let discretionaryOnly = BusOption("discretionary-only", "b")
        public static let all = [discretionaryOnly]
    }
}
