/// What a range request is checked against (`If-Range`), for downloads on one
/// connection and on several alike.
public enum RangeValidator {
    /// A strong ETag, else the Last-Modified date. A weak ETag (`W/"…"`) says two
    /// answers mean the same, not that their bytes are the same: a client must not
    /// send it in `If-Range` (RFC 9110 §13.1.5), and no range is joined to bytes under it.
    public static func strong(etag: String?, lastModified: String?) -> String? {
        if let etag, !etag.isEmpty, !etag.hasPrefix("W/") { return etag }
        return lastModified
    }
}
