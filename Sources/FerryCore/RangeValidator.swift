import Foundation

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

    /// The Last-Modified date of an answer when it can check ranges, else nil. A date
    /// within 60 s of the answer's `Date` (or after it) is weak (RFC 9110 §8.8.2.2): the
    /// file may have changed again within the same second and kept the date, and a
    /// range under it could join two versions into one file. (Without a `Date`, or a
    /// date that does not parse, the date is taken as it is.)
    public static func usableLastModified(_ lastModified: String?, date: String?) -> String? {
        guard let lastModified, let date, let modified = HTTPDate.parse(lastModified),
              let sent = HTTPDate.parse(date) else { return lastModified }
        return modified <= sent - 60 ? lastModified : nil
    }
}

/// HTTP dates (RFC 9110 §5.6.7) as seconds since the epoch.
public enum HTTPDate {
    /// "Sun, 06 Nov 1994 08:49:37 GMT" (IMF-fixdate), or the obsolete RFC 850 and
    /// asctime forms; nil for anything else.
    public static func parse(_ text: String) -> Int64? {
        if let seconds = imfFixdate(text) { return seconds }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return Int64(date.timeIntervalSince1970) }
        }
        return nil
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The fixed form, by hand: every answer without an ETag has one or two of them.
    private static func imfFixdate(_ text: String) -> Int64? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT",
              let day = Int(parts[1]), let month = months.firstIndex(of: String(parts[2])), let year = Int(parts[3]) else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let h = Int(clock[0]), let m = Int(clock[1]), let s = Int(clock[2]) else { return nil }
        // Days since the epoch (the proleptic Gregorian calendar, Howard Hinnant's formula).
        let y = month < 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 10) % 12 // March = 0
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = Int64(era * 146_097 + doe - 719_468)
        return days * 86_400 + Int64(h * 3600 + m * 60 + s)
    }
}
