import Foundation

/// Collects curl's header lines into the final response's head, across redirects
/// (which curl follows) and 1xx answers.
struct ResponseHeadReader {
    enum Step {
        /// Keep reading.
        case more
        /// The final response's head is complete.
        case final
        /// A redirect to a scheme other than http/https (refused).
        case refusedRedirect(scheme: String)
        /// An http(s) redirect's head is complete; curl follows it unless the callback
        /// stops (a redirect to another origin must not take the caller's headers).
        case redirect(location: String)
    }

    private(set) var head = ResponseHead()
    /// Location of the last redirect followed.
    private(set) var lastLocation: String?

    mutating func take(_ bytes: UnsafeRawBufferPointer) -> Step {
        let line = ResponseHead.decode(bytes)
        if let statusLine = ResponseHead.statusLine(line) {
            head = statusLine
            return .more
        }
        guard line.isEmpty else {
            head.add(line)
            return .more
        }
        if head.status < 200 { return .more }
        if head.isFollowedRedirect {
            lastLocation = head.location
            if let location = head.location, let scheme = URLComponents(string: location)?.scheme?.lowercased(),
               scheme != "http" && scheme != "https" {
                return .refusedRedirect(scheme: scheme)
            }
            return head.location.map { .redirect(location: $0) } ?? .more
        }
        return .final
    }
}
